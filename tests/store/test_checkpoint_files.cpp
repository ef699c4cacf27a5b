// Checkpoint shard files and MANIFEST: round trip, corruption caught with the
// file (and offset) named, verify_checkpoint.
#include <catch2/catch.hpp>

#include <fstream>
#include <numeric>
#include <random>

#include "test_support.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/checksum.hpp"

namespace fs = std::filesystem;
using namespace tutti::store;

namespace {

std::vector<float> ramp(std::size_t n, float start) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = start + 0.25f * static_cast<float>(i);
  return v;
}

void flip_byte(const fs::path& file, std::uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

std::string read_all(const fs::path& p) { return tutti::testing::read_text(p); }

// Writes a 2-rank checkpoint of `step` into root/step-XXXXXXXX with a MANIFEST.
fs::path write_checkpoint(const fs::path& root, std::int64_t step) {
  auto dir = root / checkpoint_dir_name(step);
  manifest m{step, 3, 2, {}};
  for (std::int64_t rank = 0; rank < 2; ++rank) {
    auto w = ramp(64, static_cast<float>(rank));
    auto moments = ramp(64, -1.f);
    shard_meta meta{
      rank, step, 3, {{"data_cursor", 1234 + rank}}, {{"rng", "state"}}};
    auto file = dir / shard_file_name(rank);
    auto n = write_shard_file(
      file, meta, {{"w", {8, 8}, w.data()}, {"adam_m", {64}, moments.data()}});
    INFO(n.message());
    REQUIRE(n.ok());
    auto e = describe_shard(file);
    REQUIRE(e.ok());
    CHECK(e.value().bytes == n.value());
    m.shards.push_back(e.value());
  }
  REQUIRE(write_manifest(dir, m));
  return dir;
}

} // namespace

TEST_CASE("checkpoint and shard names", "[checkpoint_files]") {
  CHECK(checkpoint_dir_name(123) == "step-00000123");
  CHECK(checkpoint_dir_name(0) == "step-00000000");
  CHECK(shard_file_name(3) == "shard-00003.ckpt");
}

TEST_CASE("shard file round trip", "[checkpoint_files]") {
  auto file = tutti::testing::scratch("ckpt_roundtrip") / "new"
              / checkpoint_dir_name(7) / shard_file_name(1);
  auto weights = ramp(2 * 3, 1.f);
  float scalar = 42.5f;
  shard_meta meta;
  meta.rank = 1;
  meta.step = 7;
  meta.epoch = 2;
  meta.ints = {{"data_cursor", 987654321012345}, {"negative", -5}};
  meta.strings = {{"rng", std::string("bin\0ary\xff", 8)}, {"note", "ok"}};
  std::vector<tensor_view> tensors{{"layer0.w", {2, 3}, weights.data()},
                                   {"step_scalar", {}, &scalar},
                                   {"empty", {0, 4}, nullptr}};
  auto written = write_shard_file(file, meta, tensors);
  INFO(written.message());
  REQUIRE(written.ok());
  CHECK(written.value() == fs::file_size(file));
  CHECK_FALSE(fs::exists(fs::path(file.string() + ".tmp")));

  auto r = read_shard_file(file);
  INFO(r.message());
  REQUIRE(r.ok());
  CHECK(r.value().meta.rank == 1);
  CHECK(r.value().meta.step == 7);
  CHECK(r.value().meta.epoch == 2);
  CHECK(r.value().meta.ints == meta.ints);
  CHECK(r.value().meta.strings == meta.strings);
  REQUIRE(r.value().tensors.size() == 3);
  CHECK(r.value().tensors[0].name == "layer0.w");
  CHECK(r.value().tensors[0].shape == std::vector<std::int64_t>{2, 3});
  CHECK(r.value().tensors[0].dtype == "f32");
  CHECK(r.value().tensors[0].data == weights);
  CHECK(r.value().tensors[0].xxh64
        == xxh64(weights.data(), weights.size() * 4));
  CHECK(r.value().tensors[1].shape.empty());
  CHECK(r.value().tensors[1].data == std::vector<float>{42.5f});
  CHECK(r.value().tensors[2].shape == std::vector<std::int64_t>{0, 4});
  CHECK(r.value().tensors[2].data.empty());

  auto header_only = read_shard_file(file, false);
  REQUIRE(header_only.ok());
  CHECK(header_only.value().tensors[0].data.empty());
  CHECK(header_only.value().tensors[0].xxh64 == r.value().tensors[0].xxh64);
  CHECK(verify_shard_file(file).ok());
}

TEST_CASE("large shard verifies in one streamed pass", "[checkpoint_files]") {
  auto file = tutti::testing::scratch("ckpt_large") / shard_file_name(0);
  auto a = ramp(700'001, 0.f), b = ramp(1'500'003, 3.f),
       c = ramp(5, 9.f); // crosses 4 MiB chunks
  auto n = write_shard_file(file, {},
                            {{"a", {700'001}, a.data()},
                             {"b", {1'500'003}, b.data()},
                             {"c", {5}, c.data()}});
  REQUIRE(n.ok());
  std::uint64_t whole = 0;
  auto v = verify_shard_file(file, &whole);
  INFO(v.message());
  REQUIRE(v.ok());
  CHECK(whole == describe_shard(file).value().xxh64);
  std::uint64_t b_offset = v.value().offsets[1];
  flip_byte(file, b_offset + 4'000'000);
  auto bad = verify_shard_file(file);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.message(),
             Catch::Contains(file.string()) && Catch::Contains("tensor 'b'")
               && Catch::Contains("at offset " + std::to_string(b_offset)));
}

TEST_CASE("a flipped byte in tensor data is caught naming file and offset",
          "[checkpoint_files]") {
  auto file = tutti::testing::scratch("ckpt_flip") / shard_file_name(0);
  auto x = ramp(100, 0.f), y = ramp(50, 1.f);
  REQUIRE(write_shard_file(file, {},
                           {{"x", {100}, x.data()}, {"y", {5, 10}, y.data()}})
            .ok());
  auto meta = read_shard_file(file, false);
  REQUIRE(meta.ok());
  std::uint64_t y_offset = meta.value().offsets[1];
  CHECK(y_offset == meta.value().data_offset + 400);
  flip_byte(file, y_offset + 17);

  CHECK(
    read_shard_file(file, false).ok()); // header intact: sizes still check out
  for (const auto& r : {read_shard_file(file), verify_shard_file(file)}) {
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.message(),
               Catch::Contains(file.string()) && Catch::Contains("tensor 'y'")
                 && Catch::Contains("hash mismatch")
                 && Catch::Contains("at offset " + std::to_string(y_offset)));
  }
}

TEST_CASE("corrupt or truncated shard headers are refused",
          "[checkpoint_files]") {
  auto dir = tutti::testing::scratch("ckpt_bad_header");
  auto x = ramp(10, 0.f);
  auto fresh = [&](const std::string& name) {
    auto f = dir / name;
    REQUIRE(write_shard_file(f, {}, {{"x", {10}, x.data()}}).ok());
    return f;
  };
  auto expect_error = [](const fs::path& f, const std::string& what) {
    auto r = read_shard_file(f, false);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.message(),
               Catch::Contains(f.string()) && Catch::Contains(what));
  };
  auto f = fresh("flip-header.ckpt");
  flip_byte(f, 20);
  expect_error(f, "header hash mismatch");

  f = fresh("magic.ckpt");
  flip_byte(f, 0);
  expect_error(f, "bad magic at offset 0");

  f = fresh("cut-data.ckpt");
  fs::resize_file(f, fs::file_size(f) - 3);
  expect_error(f, "truncated");

  f = fresh("cut-header.ckpt");
  fs::resize_file(f, 30);
  expect_error(f, "truncated");

  f = fresh("tiny.ckpt");
  fs::resize_file(f, 10);
  expect_error(f, "truncated");

  f = fresh("extra.ckpt");
  std::ofstream(f, std::ios::app | std::ios::binary) << "junk";
  expect_error(f, "unexpected bytes after the last tensor");

  auto missing = read_shard_file(dir / "missing.ckpt");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.message(), Catch::Contains("missing.ckpt"));
}

TEST_CASE("shard writer refuses bad input", "[checkpoint_files]") {
  auto dir = tutti::testing::scratch("ckpt_bad_input");
  auto x = ramp(4, 0.f);
  CHECK_FALSE(write_shard_file(dir / "a", {},
                               {{"x", {4}, x.data()}, {"x", {4}, x.data()}})
                .ok());
  CHECK_FALSE(write_shard_file(dir / "b", {}, {{"x", {-1}, x.data()}}).ok());
  CHECK_FALSE(write_shard_file(dir / "c", {}, {{"x", {4}, nullptr}}).ok());
  std::ofstream(dir / "file") << "x";
  auto r = write_shard_file(dir / "file" / "shard", {}, {{"x", {4}, x.data()}});
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.message(), Catch::Contains((dir / "file").string()));
}

TEST_CASE("MANIFEST round trip and verify_checkpoint", "[checkpoint_files]") {
  auto dir = write_checkpoint(tutti::testing::scratch("ckpt_manifest"), 7);
  auto m = read_manifest(dir);
  INFO(m.message());
  REQUIRE(m.ok());
  CHECK(m.value().step == 7);
  CHECK(m.value().epoch == 3);
  CHECK(m.value().world_size == 2);
  REQUIRE(m.value().shards.size() == 2);
  CHECK(m.value().shards[1].file == "shard-00001.ckpt");
  CHECK(m.value().shards[1].bytes == fs::file_size(dir / "shard-00001.ckpt"));
  auto text = read_all(dir / "MANIFEST");
  CHECK_THAT(text, Catch::Contains("\"step\": 7")
                     && Catch::Contains("\"checksum\": \""));
  auto ok = verify_checkpoint(dir);
  INFO(ok.message());
  CHECK(ok);
}

TEST_CASE("truncated or corrupt MANIFEST is refused naming the file",
          "[checkpoint_files]") {
  auto root = tutti::testing::scratch("ckpt_manifest_bad");
  auto dir = write_checkpoint(root, 9);
  const auto path = dir / "MANIFEST";
  const auto good = read_all(path);
  auto expect_refused = [&](const std::string& what) {
    auto m = read_manifest(dir);
    REQUIRE_FALSE(m.ok());
    CHECK_THAT(m.message(),
               Catch::Contains(path.string()) && Catch::Contains(what));
    auto v = verify_checkpoint(dir);
    REQUIRE_FALSE(v.ok());
    CHECK_THAT(v.message(), Catch::Contains(path.string()));
  };
  fs::resize_file(path, good.size() / 2);
  expect_refused("not valid JSON");
  fs::resize_file(path, 0);
  expect_refused("empty");
  // A changed value with valid JSON: only the checksum can tell.
  auto changed = good;
  changed.replace(changed.find("\"step\": 9"), 9, "\"step\": 8");
  tutti::testing::write_text(path, changed);
  expect_refused("checksum mismatch");
  fs::remove(path);
  expect_refused("cannot open");
  // Whitespace does not matter: the checksum covers values, not layout.
  std::string compact;
  for (char c : good)
    if (c != '\n')
      compact += c;
  tutti::testing::write_text(path, compact);
  CHECK(read_manifest(dir).ok());
}

TEST_CASE("verify_checkpoint catches wrong size, hash, and missing shards",
          "[checkpoint_files]") {
  auto root = tutti::testing::scratch("ckpt_verify");
  auto expect_problem = [](const fs::path& dir, const std::string& file,
                           const std::string& what) {
    auto v = verify_checkpoint(dir);
    REQUIRE_FALSE(v.ok());
    CHECK_THAT(v.message(),
               Catch::Contains((dir / file).string()) && Catch::Contains(what));
  };
  auto dir = write_checkpoint(root, 1);
  std::ofstream(dir / "shard-00001.ckpt", std::ios::app | std::ios::binary)
    << "x";
  expect_problem(dir, "shard-00001.ckpt", "MANIFEST says");

  dir = write_checkpoint(root, 2);
  fs::resize_file(dir / "shard-00000.ckpt",
                  fs::file_size(dir / "shard-00000.ckpt") - 8);
  expect_problem(dir, "shard-00000.ckpt", "(truncated)");

  dir = write_checkpoint(root, 3);
  auto s = read_shard_file(dir / "shard-00001.ckpt", false);
  REQUIRE(s.ok());
  flip_byte(dir / "shard-00001.ckpt", s.value().offsets[1] + 2);
  expect_problem(dir, "shard-00001.ckpt",
                 "at offset " + std::to_string(s.value().offsets[1]));

  dir = write_checkpoint(root, 4);
  fs::remove(dir / "shard-00000.ckpt");
  expect_problem(dir, "shard-00000.ckpt", "listed in MANIFEST");

  // A shard that is valid on its own but not the one the MANIFEST describes.
  dir = write_checkpoint(root, 5);
  fs::copy_file(root / checkpoint_dir_name(4) / "shard-00001.ckpt",
                dir / "shard-00001.ckpt", fs::copy_options::overwrite_existing);
  expect_problem(dir, "shard-00001.ckpt", "whole-file xxh64");

  // A MANIFEST that lists fewer shards than ranks (partial checkpoint).
  dir = write_checkpoint(root, 6);
  auto m = read_manifest(dir).value();
  m.shards.pop_back();
  REQUIRE(write_manifest(dir, m));
  expect_problem(dir, "MANIFEST", "1 shards for world_size 2");

  // Path traversal in a shard name is refused on write and on read.
  m.shards.push_back({"../x", 1, 1});
  auto w = write_manifest(dir, m);
  REQUIRE_FALSE(w.ok());
  CHECK_THAT(w.message(), Catch::Contains("not a plain file name"));
}

TEST_CASE("random damage to shards and MANIFESTs is refused cleanly",
          "[checkpoint_files]") {
  auto root = tutti::testing::scratch("ckpt_fuzz");
  auto dir = write_checkpoint(root, 11);
  const auto shard = dir / "shard-00000.ckpt";
  const std::string good_shard = read_all(shard),
                    good_manifest = read_all(dir / "MANIFEST");
  const manifest good = read_manifest(dir).value();
  const std::uint32_t h = static_cast<unsigned char>(good_shard[12])
                          | static_cast<unsigned char>(good_shard[13]) << 8;
  std::mt19937_64 rng(42);
  auto write_bytes = [](const fs::path& p, const std::string& s) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
  };
  int refused = 0;
  for (int i = 0; i < 300; ++i) {
    // Damage inside the msgpack header, then re-seal it with a valid header
    // hash so the field validation itself (not the hash) has to catch it.
    std::string s = good_shard;
    for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k)
      s[16 + rng() % h] = static_cast<char>(rng());
    std::uint64_t hh = xxh64(s.data() + 16, h);
    for (int b = 0; b < 8; ++b)
      s[16 + h + b] = static_cast<char>((hh >> (8 * b)) & 0xff);
    write_bytes(shard, s);
    auto r = read_shard_file(shard);
    if (!r.ok()) {
      ++refused;
      CHECK_THAT(r.message(), Catch::Contains(shard.string()));
    }
    // Damage or truncate the MANIFEST.
    std::string m = good_manifest;
    if (rng() % 2)
      m.resize(rng() % m.size());
    else
      m[rng() % m.size()] = static_cast<char>(rng());
    write_bytes(dir / "MANIFEST", m);
    // Accepted only if it still says the same thing (e.g. only whitespace
    // changed, or the final newline was cut).
    auto mr = read_manifest(dir);
    if (mr.ok()) {
      CHECK(mr.value().step == 11);
      REQUIRE(mr.value().shards.size() == good.shards.size());
      for (std::size_t k = 0; k < good.shards.size(); ++k) {
        CHECK(mr.value().shards[k].file == good.shards[k].file);
        CHECK(mr.value().shards[k].bytes == good.shards[k].bytes);
        CHECK(mr.value().shards[k].xxh64 == good.shards[k].xxh64);
      }
    } else {
      CHECK_THAT(mr.message(), Catch::Contains("MANIFEST"));
    }
  }
  CHECK(refused > 250); // a few mutations only touch string contents
}
