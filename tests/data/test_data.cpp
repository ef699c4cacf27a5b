// data/ and store/: shard format, Markov source, dataset dirs, batch sampler.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <unistd.h>

#include "tutti/data/batch_sampler.hpp"
#include "tutti/data/markov_source.hpp"
#include "tutti/data/shard_format.hpp"
#include "tutti/data/synth.hpp"
#include "tutti/store/atomic_file.hpp"
#include "tutti/store/checksum.hpp"

#include "data_test_support.hpp"

namespace fs = std::filesystem;
using namespace tutti;
using namespace tutti::data;
using namespace tutti::testing;

namespace {

std::vector<std::int32_t> iota_tokens(std::size_t n, std::int32_t mod) {
  std::vector<std::int32_t> t(n);
  for (std::size_t i = 0; i < n; ++i)
    t[i] = static_cast<std::int32_t>(i % mod);
  return t;
}

double binary_entropy(double p) {
  return -p * std::log(p) - (1 - p) * std::log(1 - p);
}

} // namespace

TEST_CASE("write_file_atomic replaces the file and leaves no temporary",
          "[store]") {
  temp_dir dir("atomic");
  const fs::path p = dir.path / "f.bin";
  spit(p, "first");
  spit(p, "second");
  CHECK(slurp(p) == "second");
  CHECK_FALSE(fs::exists(dir.path / "f.bin.tmp"));

  auto err = store::write_file_atomic(dir.path / "no_such_dir" / "f.bin", "x");
  REQUIRE_FALSE(err.ok());
  CHECK_THAT(err.message(), Catch::Contains("no_such_dir/f.bin.tmp")
                              && Catch::Contains("No such file"));
  CHECK(store::xxh64("abc", 3) == store::xxh64("abc", 3, 0));
  CHECK(store::xxh64("abc", 3) != store::xxh64("abc", 3, 1));
}

TEST_CASE("shard round-trips with 2- and 4-byte tokens", "[shard]") {
  temp_dir dir("roundtrip");
  for (std::uint32_t vocab : {300u, 65536u, 100000u}) {
    const auto tokens = iota_tokens(5000, static_cast<std::int32_t>(vocab));
    const fs::path p = dir.path / "x.tok";
    REQUIRE(write_shard(p, tokens, vocab));
    auto s = read_shard(p);
    REQUIRE(s.ok());
    CHECK(s.value().vocab_size == vocab);
    CHECK(s.value().token_width == (vocab <= 65536 ? 2u : 4u));
    CHECK(s.value().tokens == tokens);
    CHECK(fs::file_size(p) == shard_header_size + 5000 * s.value().token_width);
  }
  auto empty = decode_shard(encode_shard({}, 10).value(), "empty.tok");
  REQUIRE(empty.ok());
  CHECK(empty.value().tokens.empty());
}

TEST_CASE("the shard writer refuses tokens outside the vocab", "[shard]") {
  temp_dir dir("writer");
  auto err = write_shard(dir.path / "w.tok", {1, 2, 10}, 10);
  REQUIRE_FALSE(err.ok());
  CHECK_THAT(err.message(), Catch::Contains("w.tok")
                              && Catch::Contains("token 10 at index 2"));
  CHECK(encode_shard({1}, 100000, 2).message().find("does not fit")
        != std::string::npos);
}

TEST_CASE("read_shard refuses damaged files, naming file and offset",
          "[shard]") {
  temp_dir dir("damaged");
  const fs::path p = dir.path / "train-00000.tok";
  REQUIRE(write_shard(p, iota_tokens(4096, 1000), 1000));
  const std::string good = slurp(p);
  REQUIRE(good.size() == 48 + 8192);

  SECTION("truncated tokens") {
    spit(p, good.substr(0, 48 + 1000));
    auto s = read_shard(p);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message()
          == p.string()
               + ": truncated at offset 1048: header says 4096 tokens (8192 "
                 "bytes) but 1000 bytes follow");
  }
  SECTION("truncated header") {
    spit(p, good.substr(0, 20));
    auto s = read_shard(p);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.message(),
               Catch::StartsWith(p.string() + ": truncated at offset 20"));
  }
  SECTION("trailing bytes") {
    spit(p, good + "xy");
    CHECK(read_shard(p).message()
          == p.string()
               + ": trailing garbage at offset 8240: header says 4096 tokens "
                 "(8192 bytes) but 8194 bytes follow");
  }
  SECTION("flipped byte in the tokens") {
    std::string bad = good;
    bad[48 + 777] ^= 0x01;
    spit(p, bad);
    CHECK(read_shard(p).message()
          == p.string() + ": checksum mismatch in tokens [offset 48..8240]");
  }
  SECTION("flipped byte in the header") {
    std::string bad = good;
    bad[25] ^= 0x40; // token_count
    spit(p, bad);
    CHECK_THAT(read_shard(p).message(),
               Catch::Contains("header checksum mismatch"));
  }
  SECTION("bad magic") {
    std::string bad = good;
    bad[3] = 'X';
    spit(p, bad);
    CHECK(read_shard(p).message()
          == p.string() + ": bad magic (not a TUTTITOK shard) at offset 0");
  }
  SECTION("a token >= vocab_size under valid checksums") {
    // A buggy writer, not bit rot: rewrite vocab_size to 500 and re-seal the header.
    std::string bad = good;
    const std::uint32_t vocab = 500;
    std::memcpy(&bad[12], &vocab, 4); // little-endian host assumed by this test
    const std::uint64_t h = store::xxh64(bad.data(), 40);
    std::memcpy(&bad[40], &h, 8);
    spit(p, bad);
    // tokens are i % 1000, so index 500 is the first one >= 500.
    CHECK(read_shard(p).message()
          == p.string()
               + ": token 500 (index 500) >= vocab_size 500 at offset 1048");
  }
  SECTION("empty file (nothing to map)") {
    spit(p, "");
    CHECK_THAT(read_shard(p).message(),
               Catch::StartsWith(p.string() + ": truncated at offset 0"));
  }
  SECTION("missing file") {
    CHECK_THAT(read_shard(dir.path / "nope.tok").message(),
               Catch::Contains("nope.tok") && Catch::Contains("No such file"));
  }
}

TEST_CASE("entropy rate of a hand-built order-2 chain matches the closed form",
          "[markov]") {
  // V = 2; repeat the last token with probability p after "00"/"11" and r
  // after "01"/"10". By symmetry pi(00) = pi(11) = x, pi(01) = pi(10) = y,
  // balance at 00 gives x (1 - p) = y r, so
  // H = [r h(p) + (1 - p) h(r)] / (1 - p + r).
  const double p = 0.9, r = 0.3;
  std::vector<std::vector<successor>> table(4);
  table[0b00] = {{0, p}, {1, 1 - p}};
  table[0b01] = {{1, r}, {0, 1 - r}};
  table[0b10] = {{0, r}, {1, 1 - r}};
  table[0b11] = {{1, p}, {0, 1 - p}};
  auto m = markov_source::from_table(2, table);
  REQUIRE(m.ok());
  const double expected = (r * binary_entropy(p) + (1 - p) * binary_entropy(r))
                          / (1 - p + r);
  CHECK(m.value().entropy_rate() == Approx(expected).margin(1e-13));
  CHECK(m.value().prob(0, 1, 1) == r);
  CHECK(m.value().prob(0, 1, 5) == 0.0);
}

TEST_CASE("periodic chains get their entropy rate, reducible ones are refused",
          "[markov]") {
  // V = 3, period 2: pair states split into two classes and every transition
  // crosses (found by search). Plain power iteration oscillates on this one.
  // Rows with two successors are uniform. Solving pi P = pi exactly gives
  // pi(11, 12, 20, 21, 22) = (1/15, 1/10, 2/15, 2/15, 1/6): those are the
  // only rows with entropy (log 2 each), so H = (3/5) log 2.
  std::vector<std::vector<successor>> table = {{{2, 1.0}},            // 00
                                               {{1, 1.0}},            // 01
                                               {{2, 1.0}},            // 02
                                               {{2, 1.0}},            // 10
                                               {{0, 0.5}, {2, 0.5}},  // 11
                                               {{0, 0.5}, {1, 0.5}},  // 12
                                               {{0, 0.5}, {1, 0.5}},  // 20
                                               {{0, 0.5}, {2, 0.5}},  // 21
                                               {{0, 0.5}, {1, 0.5}}}; // 22
  auto m = markov_source::from_table(3, table);
  REQUIRE(m.ok());
  CHECK(m.value().entropy_rate() == Approx(0.6 * std::log(2.0)).margin(1e-13));

  // Always emit 1: states 00, 01, 10 are never re-entered.
  std::vector<std::vector<successor>> absorbing = {
    {{1, 1.0}}, {{1, 1.0}}, {{1, 1.0}}, {{1, 1.0}}};
  CHECK_THAT(markov_source::from_table(2, absorbing).message(),
             Catch::Contains("not irreducible"));
  CHECK_THAT(markov_source::random(16, 1, 1).message(),
             Catch::Contains("branching"));
}

TEST_CASE(
  "generated text's empirical -log P converges to the exact entropy rate",
  "[markov]") {
  for (std::uint32_t vocab : {64u, 256u}) {
    auto m = markov_source::random(vocab, 42);
    REQUIRE(m.ok());
    const double h = m.value().entropy_rate();
    CHECK(h > 0.3);
    CHECK(h < std::log(4.0));
    const auto tokens = m.value().generate(200000, 7);
    double nll = 0.0;
    for (std::size_t i = 2; i < tokens.size(); ++i)
      nll -= std::log(m.value().prob(tokens[i - 2], tokens[i - 1], tokens[i]));
    const double empirical = nll / double(tokens.size() - 2);
    INFO("vocab " << vocab << " exact " << h << " empirical " << empirical);
    CHECK(std::abs(empirical - h) < 0.01);
  }
}

TEST_CASE("the random source is a pure function of its seed", "[markov]") {
  auto a = markov_source::random(32, 5), b = markov_source::random(32, 5),
       c = markov_source::random(32, 6);
  REQUIRE((a.ok() && b.ok() && c.ok()));
  CHECK(a.value().entropy_rate() == b.value().entropy_rate());
  CHECK(a.value().generate(1000, 1) == b.value().generate(1000, 1));
  CHECK(a.value().generate(1000, 1) != a.value().generate(1000, 2));
  CHECK(a.value().entropy_rate() != c.value().entropy_rate());
  for (std::int32_t x = 0; x < 32; ++x)
    for (std::int32_t y = 0; y < 32; ++y)
      CHECK(a.value().successors(x, y).size() == 4);
}

TEST_CASE("synth_dataset writes a deterministic, verifiable dataset",
          "[synth]") {
  temp_dir one("synth1"), two("synth2"), other("synth3");
  REQUIRE(synth_dataset(one.path, 64, 2, 11, 10000, 0.1, 3));
  REQUIRE(synth_dataset(two.path, 64, 2, 11, 10000, 0.1, 3));
  REQUIRE(synth_dataset(other.path, 64, 2, 12, 10000, 0.1, 3));
  check_deterministic(one.path, two.path, other.path,
                      {"train-00000.tok", "train-00001.tok", "train-00002.tok",
                       "val-00000.tok", "meta.json"});

  auto meta = read_meta(one.path);
  REQUIRE(meta.ok());
  CHECK(meta.value().vocab_size == 64);
  CHECK(meta.value().order == 2);
  CHECK(meta.value().seed == 11);
  CHECK(meta.value().tokens == 10000);
  CHECK(meta.value().train_tokens == 9000);
  CHECK(meta.value().val_tokens == 1000);
  CHECK(meta.value().train_shards == 3);
  CHECK(meta.value().val_shards == 1);
  CHECK(meta.value().source == "markov2");
  REQUIRE(meta.value().entropy_rate_nats);
  CHECK(*meta.value().entropy_rate_nats
        == markov_source::random(64, 11).value().entropy_rate()); // bit-exact

  auto train = load_split(one.path, "train");
  auto val = load_split(one.path, "val");
  REQUIRE((train.ok() && val.ok()));
  REQUIRE(train.value().size() == 3);
  CHECK(train.value()[0].size() + train.value()[1].size()
          + train.value()[2].size()
        == 9000);
  CHECK(std::vector<std::int32_t>(train.value()[0].begin(),
                                  train.value()[0].begin() + 1000)
        != val.value()[0]);

  CHECK_THAT(synth_dataset(one.path, 64, 3, 11, 100).message(),
             Catch::Contains("only order 2"));

  // The cache warm-up asks for every shard meta.json lists, and only those.
  auto warmed = warm(one.path);
  REQUIRE(warmed.ok());
  CHECK(warmed.value().files == 4);
  std::uint64_t bytes = 0;
  for (const char* f :
       {"train-00000.tok", "train-00001.tok", "train-00002.tok", "val-00000.tok"})
    bytes += fs::file_size(one.path / f);
  CHECK(warmed.value().bytes == bytes);
  fs::remove(one.path / "val-00000.tok");
  CHECK_THAT(warm(one.path).message(), Catch::Contains("val-00000.tok"));
}

namespace {
// Shard i holds tokens i * 1000 + k, so a window's tokens reveal where it came from.
token_shards numbered_shards(const std::vector<std::size_t>& sizes) {
  token_shards s;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    s.emplace_back(sizes[i]);
    for (std::size_t k = 0; k < sizes[i]; ++k)
      s.back()[k] = static_cast<std::int32_t>(i * 1000 + k);
  }
  return s;
}
} // namespace

TEST_CASE("batch sampler: windows, determinism and epochs", "[sampler]") {
  // seq_len 7 -> windows of 8 tokens: 12 + 0 + 5 + 3 = 20 windows.
  auto sampler = batch_sampler::create(numbered_shards({100, 5, 40, 31}), 7);
  REQUIRE(sampler.ok());
  const batch_sampler& s = sampler.value();
  REQUIRE(s.window_count() == 20);
  CHECK(s.locate(12).shard == 2);
  CHECK(s.locate(12).offset == 0);
  CHECK(s.locate(19).shard == 3);
  CHECK(s.locate(19).offset == 16);

  const std::uint64_t B = 6; // does not divide 20: batches straddle epochs
  std::vector<std::uint64_t> stream;
  for (std::uint64_t step = 0; step < 10; ++step) {
    const auto ids = s.global_batch(99, step, B);
    REQUIRE(ids.size() == B);
    CHECK(ids
          == batch_sampler::create(numbered_shards({100, 5, 40, 31}), 7)
               .value()
               .global_batch(99, step, B));
    CHECK(s.epoch_of(step, B) == step * B / 20);
    stream.insert(stream.end(), ids.begin(), ids.end());
  }
  // 60 positions = 3 whole epochs, each a permutation of all 20 windows.
  for (int e = 0; e < 3; ++e) {
    std::set<std::uint64_t> epoch(stream.begin() + e * 20,
                                  stream.begin() + (e + 1) * 20);
    CHECK(epoch.size() == 20);
    CHECK(*epoch.rbegin() == 19);
  }
  CHECK(!std::equal(stream.begin(), stream.begin() + 20,
                    stream.begin() + 20)); // epochs reshuffle
  CHECK(s.global_batch(99, 0, 20)
        != s.global_batch(100, 0, 20));          // seed matters
  CHECK(s.global_batch(99, 0, 45).size() == 45); // B > windows

  const std::vector<std::uint64_t> ids = {12, 0};
  const batch b = s.materialize(ids);
  CHECK(b.rows == 2);
  CHECK(b.inputs
        == std::vector<std::int32_t>{2000, 2001, 2002, 2003, 2004, 2005, 2006,
                                     0, 1, 2, 3, 4, 5, 6});
  CHECK(b.targets
        == std::vector<std::int32_t>{2001, 2002, 2003, 2004, 2005, 2006, 2007,
                                     1, 2, 3, 4, 5, 6, 7});

  CHECK_FALSE(batch_sampler::create(numbered_shards({7, 3}), 7).ok());
}

TEST_CASE("batch sampler: rank slices concatenate to the global batch",
          "[sampler]") {
  auto s = batch_sampler::create(numbered_shards({100, 5, 40, 31}), 7).value();
  for (std::uint64_t step = 0; step < 5; ++step) {
    const auto global = s.global_batch(3, step, 8);
    std::vector<std::uint64_t> joined;
    for (std::uint32_t r = 0; r < 4; ++r) {
      auto part = s.rank_batch(3, step, 8, r, 4, false);
      REQUIRE(part.ok());
      CHECK(part.value() == rank_slice(global, r, 4).value());
      joined.insert(joined.end(), part.value().begin(), part.value().end());
    }
    CHECK(joined == global);
  }
  CHECK_THAT(rank_slice(s.global_batch(3, 0, 6), 0, 4).message(),
             Catch::Contains("not divisible"));
  CHECK_FALSE(s.rank_batch(3, 0, 8, 4, 4, false).ok());
}

TEST_CASE("batch sampler: shard-per-rank touches only the rank's shards",
          "[sampler]") {
  // 5 shards, world 2: rank 0 owns shards 0, 2, 4; rank 1 owns 1, 3.
  auto s = batch_sampler::create(numbered_shards({80, 40, 24, 56, 16}), 7)
             .value(); // 10+5+3+7+2 windows
  const std::uint64_t windows_of_rank[2] = {10 + 3 + 2, 5 + 7};
  for (std::uint32_t rank = 0; rank < 2; ++rank) {
    std::vector<std::uint64_t> stream;
    for (std::uint64_t step = 0; step < 3 * windows_of_rank[rank]; ++step) {
      auto ids = s.own_shard_batch(5, step, 4, rank,
                                   2); // 2 windows per rank per step
      REQUIRE(ids.ok());
      CHECK(ids.value() == s.rank_batch(5, step, 4, rank, 2, true).value());
      CHECK(s.own_shard_epoch_of(step, 4, rank, 2).value()
            == step * 2 / windows_of_rank[rank]);
      for (std::uint64_t id : ids.value())
        CHECK(s.locate(id).shard % 2 == rank);
      const batch b = s.materialize(ids.value());
      for (std::int32_t t : b.inputs)
        CHECK(t / 1000 % 2 == static_cast<std::int32_t>(rank));
      stream.insert(stream.end(), ids.value().begin(), ids.value().end());
    }
    // Six epochs of the rank's own windows, each covering them exactly once.
    const std::uint64_t n = windows_of_rank[rank];
    for (std::uint64_t e = 0; e < 6; ++e) {
      std::set<std::uint64_t> epoch(stream.begin() + e * n,
                                    stream.begin() + (e + 1) * n);
      CHECK(epoch.size() == n);
    }
  }
  CHECK(s.own_shard_batch(5, 0, 4, 0, 2).value()
        != s.own_shard_batch(5, 0, 4, 1, 2).value());
  CHECK_THAT(s.own_shard_batch(5, 0, 12, 5, 6).message(),
             Catch::Contains("owns no window"));
}

TEST_CASE("eval_windows takes the first windows in order", "[sampler]") {
  const batch b = eval_windows(numbered_shards({10, 20}), 4,
                               3); // windows of 5: 2 + 4
  CHECK(b.rows == 3);
  CHECK(b.inputs
        == std::vector<std::int32_t>{0, 1, 2, 3, 5, 6, 7, 8, 1000, 1001, 1002,
                                     1003});
  CHECK(b.targets
        == std::vector<std::int32_t>{1, 2, 3, 4, 6, 7, 8, 9, 1001, 1002, 1003,
                                     1004});
  CHECK(eval_windows(numbered_shards({10, 20}), 4, 100).rows == 6);
}
