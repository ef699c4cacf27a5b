// safetensors: round trip, the format rules checked by an independent parser
// (yaml-cpp reads the JSON header), and rejection of malformed files.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <fstream>
#include <yaml-cpp/yaml.h>

#include "test_support.hpp"
#include "tutti/store/safetensors.hpp"

namespace fs = std::filesystem;
using namespace tutti::store;

namespace {

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::uint64_t le64(const std::string& s) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(s[i]);
  return v;
}

// A file from a raw header (unpadded) and `data_bytes` bytes of data.
fs::path craft(const fs::path& dir, const std::string& name,
               const std::string& header, std::size_t data_bytes,
               std::uint64_t claimed_len = UINT64_MAX) {
  std::string out;
  std::uint64_t n = claimed_len == UINT64_MAX ? header.size() : claimed_len;
  for (int i = 0; i < 8; ++i)
    out += static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out.append(data_bytes, '\x01');
  auto path = dir / name;
  std::ofstream(path, std::ios::binary) << out;
  return path;
}

} // namespace

TEST_CASE("safetensors round trip", "[safetensors]") {
  auto file = tutti::testing::scratch("safetensors_roundtrip") / "out"
              / "model.safetensors";
  std::vector<named_tensor> tensors{
    {"model.embed_tokens.weight",
     {4, 3},
     {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
    {"model.norm.weight", {3}, {0.5f, -0.25f, 1e-30f}},
    {"scalar", {}, {7.f}},
    {"empty", {0, 2}, {}},
    {"name \"quoted\" é", {1}, {3.f}},
  };
  REQUIRE(
    write_safetensors(file, tensors, {{"format", "pt"}, {"source", "tutti"}}));
  std::map<std::string, std::string> meta;
  auto r = read_safetensors(file, &meta);
  INFO(r.message());
  REQUIRE(r.ok());
  REQUIRE(r.value().size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    CHECK(r.value()[i].name == tensors[i].name);
    CHECK(r.value()[i].shape == tensors[i].shape);
    CHECK(r.value()[i].data == tensors[i].data);
  }
  CHECK(meta
        == std::map<std::string, std::string>{{"format", "pt"},
                                              {"source", "tutti"}});
}

TEST_CASE("written safetensors follow the format rules", "[safetensors]") {
  auto file = tutti::testing::scratch("safetensors_rules")
              / "model.safetensors";
  std::vector<named_tensor> tensors{
    {"a", {2, 2}, {1, 2, 3, 4}}, {"b", {3}, {5, 6, 7}}, {"c", {1, 1, 1}, {8}}};
  REQUIRE(write_safetensors(file, tensors, {{"format", "pt"}}));
  const std::string raw = bytes_of(file);
  // 8-byte little-endian header length; data starts 8-byte aligned.
  REQUIRE(raw.size() >= 8);
  const std::uint64_t n = le64(raw);
  REQUIRE(8 + n <= raw.size());
  CHECK((8 + n) % 8 == 0);
  const std::string header = raw.substr(8, n);
  CHECK(header.front() == '{');
  CHECK(header.find_last_not_of(' ')
        == header.rfind('}')); // padded with spaces only
  // JSON header (JSON is YAML: an independent parser).
  YAML::Node doc = YAML::Load(header);
  REQUIRE(doc.IsMap());
  CHECK(doc["__metadata__"]["format"].as<std::string>() == "pt");
  // Offsets cover the data exactly: start at 0, contiguous, end at the file end.
  std::uint64_t covered = 0;
  for (const auto& t : tensors) {
    YAML::Node e = doc[t.name];
    REQUIRE(e.IsMap());
    CHECK(e["dtype"].as<std::string>() == "F32");
    CHECK(e["shape"].as<std::vector<std::int64_t>>() == t.shape);
    auto off = e["data_offsets"].as<std::vector<std::uint64_t>>();
    REQUIRE(off.size() == 2);
    CHECK(off[0] == covered);
    CHECK(off[1] - off[0] == t.data.size() * 4);
    float first = 0;
    std::memcpy(&first, raw.data() + 8 + n + off[0], 4); // little-endian f32
    CHECK(first == t.data[0]);
    covered = off[1];
  }
  CHECK(8 + n + covered == raw.size());
}

TEST_CASE(
  "safetensors from another writer: any key order, offsets out of header order",
  "[safetensors]") {
  auto dir = tutti::testing::scratch("safetensors_foreign");
  // 8 data bytes: "b" (1 float) comes first in the data, "a" second.
  auto f = craft(
    dir, "foreign.safetensors",
    R"({"a": {"shape": [1], "data_offsets": [4, 8], "dtype": "F32"}, )"
    R"("b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "__metadata__": {"k": "v"}}   )",
    8);
  auto r = read_safetensors(f);
  INFO(r.message());
  REQUIRE(r.ok());
  REQUIRE(r.value().size() == 2);
  CHECK(r.value()[0].name == "a");
  CHECK(r.value()[1].name == "b");
  CHECK(r.value()[0].data.size() == 1);
}

TEST_CASE("malformed safetensors are rejected naming the file",
          "[safetensors]") {
  auto dir = tutti::testing::scratch("safetensors_bad");
  const std::string t1 =
    R"("t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  struct bad_case {
    std::string name, header;
    std::size_t data;
    std::uint64_t claimed;
    std::string expect;
  };
  std::vector<bad_case> cases{
    {"len_past_end", "{" + t1 + "}", 8, 4096, "runs past the end"},
    {"len_huge", "{" + t1 + "}", 8, 1ull << 40, "100 MB"},
    {"truncated_json", "{" + t1, 8, UINT64_MAX, "not valid JSON"},
    {"trailing_comma", "{" + t1 + ",}", 8, UINT64_MAX, "not valid JSON"},
    {"duplicate_key", "{" + t1 + "," + t1 + "}", 8, UINT64_MAX,
     "duplicate key"},
    {"not_object", "[1, 2]", 0, UINT64_MAX, "not a JSON object"},
    {"dtype",
     R"({"t": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}})", 4,
     UINT64_MAX, "F16"},
    {"shape_span",
     R"({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8,
     UINT64_MAX, "shape needs 12"},
    {"not_from_zero",
     R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8,
     UINT64_MAX, "gap"},
    {"gap",
     R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, )"
     R"("u": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
     12, UINT64_MAX, "gap"},
    {"overlap",
     R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, )"
     R"("u": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
     8, UINT64_MAX, "overlap"},
    {"trailing_data", "{" + t1 + "}", 12, UINT64_MAX, "trailing bytes"},
    {"truncated_data", "{" + t1 + "}", 6, UINT64_MAX, "truncated"},
    {"bad_offsets",
     R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 8,
     UINT64_MAX, "begin <= end"},
    {"negative_dim",
     R"({"t": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8,
     UINT64_MAX, "negative"},
    {"metadata_value", R"({"__metadata__": {"k": 1}})", 0, UINT64_MAX,
     "not a string"},
  };
  for (const auto& c : cases) {
    SECTION(c.name) {
      auto f = craft(dir, c.name + ".safetensors", c.header, c.data, c.claimed);
      auto r = read_safetensors(f);
      REQUIRE_FALSE(r.ok());
      CHECK_THAT(r.message(),
                 Catch::Contains(f.string()) && Catch::Contains(c.expect));
    }
  }
  SECTION("shorter than the length field") {
    auto f = dir / "tiny.safetensors";
    std::ofstream(f, std::ios::binary) << "abc";
    auto r = read_safetensors(f);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.message(),
               Catch::Contains(f.string()) && Catch::Contains("truncated"));
  }
  SECTION("a valid crafted file still reads (the cases above differ only in "
          "the flaw)") {
    auto f = craft(dir, "valid.safetensors", "{" + t1 + "}", 8);
    CHECK(read_safetensors(f).ok());
  }
}

TEST_CASE("safetensors writer refuses bad input", "[safetensors]") {
  auto dir = tutti::testing::scratch("safetensors_bad_input");
  auto expect = [&](const std::vector<named_tensor>& t,
                    const std::string& what) {
    auto err = write_safetensors(dir / "x.safetensors", t);
    REQUIRE_FALSE(err.ok());
    CHECK_THAT(err.message(),
               Catch::Contains("x.safetensors") && Catch::Contains(what));
  };
  expect({{"a", {2}, {1, 2}}, {"a", {1}, {3}}}, "duplicated");
  expect({{"__metadata__", {1}, {1}}}, "reserved");
  expect({{"a", {3}, {1, 2}}}, "shape wants 3");
  expect({{std::string("bad\xff"), {1}, {1}}}, "UTF-8");
  CHECK_FALSE(fs::exists(dir / "x.safetensors"));
}

TEST_CASE("random damage to a safetensors file is refused cleanly",
          "[safetensors]") {
  auto dir = tutti::testing::scratch("safetensors_fuzz");
  auto file = dir / "m.safetensors";
  REQUIRE(write_safetensors(
    file, {{"a", {2, 2}, {1, 2, 3, 4}}, {"b", {3}, {5, 6, 7}}}, {{"k", "v"}}));
  const std::string good = bytes_of(file);
  const std::uint64_t n = le64(good);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 500; ++i) {
    std::string s = good;
    switch (rng() % 3) {
    case 0:
      s[8 + rng() % n] = static_cast<char>(rng());
      break; // header byte
    case 1:
      s.resize(rng() % s.size());
      break; // truncation
    default:
      s[rng() % 8] = static_cast<char>(rng());
      break; // length field
    }
    std::ofstream(file, std::ios::binary | std::ios::trunc) << s;
    auto r = read_safetensors(file);
    if (!r.ok())
      CHECK_THAT(r.message(), Catch::Contains(file.string()));
  }
}
