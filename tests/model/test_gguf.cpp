// tutti export --format gguf: the file follows GGUF v3 as llama.cpp reads
// it (read back here field by field): llama.cpp's names and metadata, the
// experts stacked, Q and K rows in llama.cpp's rotary order, F16 where
// asked; half-precision rounding by hand.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "export_gguf.hpp"
#include "test_support.hpp"
#include "tutti/store/gguf.hpp"
#include "tutti/store/safetensors.hpp"

using namespace tutti;
using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

struct gguf_file {
  std::map<std::string, std::string> strings;
  std::map<std::string, uint64_t> numbers;
  struct info {
    std::vector<uint64_t> ne;
    uint32_t type;
    uint64_t offset;
  };
  std::map<std::string, info> tensors;
  std::vector<std::string> order;
  uint64_t data_start = 0;
  std::string bytes;

  const char* data(const std::string& name) const {
    return bytes.data() + data_start + tensors.at(name).offset;
  }
};

gguf_file read_gguf(const fs::path& file) {
  gguf_file g;
  g.bytes = read_text(file);
  size_t at = 0;
  auto need = [&](size_t n) { REQUIRE(at + n <= g.bytes.size()); };
  auto pod = [&](auto v) {
    need(sizeof v);
    std::memcpy(&v, g.bytes.data() + at, sizeof v);
    at += sizeof v;
    return v;
  };
  auto str = [&] {
    const auto n = pod(uint64_t());
    need(n);
    auto s = g.bytes.substr(at, n);
    at += n;
    return s;
  };
  REQUIRE(g.bytes.substr(0, 4) == "GGUF");
  at = 4;
  REQUIRE(pod(uint32_t()) == 3);
  const auto n_tensors = pod(uint64_t());
  const auto n_kv = pod(uint64_t());
  std::function<void(uint32_t, const std::string&)> value =
    [&](uint32_t type, const std::string& key) {
      switch (type) {
      case 4:
        g.numbers[key] = pod(uint32_t());
        break;
      case 5:
        g.numbers[key] = static_cast<uint64_t>(pod(int32_t()));
        break;
      case 6:
        pod(float());
        g.numbers[key] = 0;
        break;
      case 7:
        g.numbers[key] = pod(uint8_t());
        break;
      case 8:
        g.strings[key] = str();
        break;
      case 10:
        g.numbers[key] = pod(uint64_t());
        break;
      case 9: {
        const auto inner = pod(uint32_t());
        const auto n = pod(uint64_t());
        g.numbers[key + ".size"] = n;
        for (uint64_t i = 0; i < n; ++i)
          value(inner, key + "[" + std::to_string(i) + "]");
        break;
      }
      default:
        FAIL("unexpected GGUF value type " << type);
      }
    };
  for (uint64_t i = 0; i < n_kv; ++i) {
    const auto key = str();
    value(pod(uint32_t()), key);
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const auto name = str();
    gguf_file::info t;
    const auto dims = pod(uint32_t());
    for (uint32_t d = 0; d < dims; ++d)
      t.ne.push_back(pod(uint64_t()));
    t.type = pod(uint32_t());
    t.offset = pod(uint64_t());
    CHECK(t.offset % 32 == 0);
    g.tensors[name] = t;
    g.order.push_back(name);
  }
  g.data_start = (at + 31) / 32 * 32;
  // The last tensor ends the file (after its padding).
  const auto& last = g.tensors.at(g.order.back());
  uint64_t n = 1;
  for (auto d : last.ne)
    n *= d;
  const uint64_t end = g.data_start + last.offset + n * (last.type ? 2 : 4);
  CHECK(g.bytes.size() == (end + 31) / 32 * 32);
  return g;
}

} // namespace

TEST_CASE("half precision rounds to nearest even", "[unit]") {
  CHECK(store::float_to_half(1.0f) == 0x3C00);
  CHECK(store::float_to_half(-2.0f) == 0xC000);
  CHECK(store::float_to_half(65504.0f) == 0x7BFF);
  CHECK(store::float_to_half(1e6f) == 0x7C00); // overflow: inf
  CHECK(store::float_to_half(0.1f) == 0x2E66);
  CHECK(store::float_to_half(1e-8f) == 0x0000);
  CHECK(store::float_to_half(5.960464477539063e-08f) == 0x0001); // 2^-24
  CHECK(store::float_to_half(1.0f + 1.0f / 2048) == 0x3C00);     // tie: even
  CHECK(store::float_to_half(1.0f + 3.0f / 2048) == 0x3C02);     // tie: even
  CHECK(store::float_to_half(3e-6f) == 0x0032); // subnormal: 50 * 2^-24
  for (float f : {0.5f, -3.25f, 1234.5f, 6.1035156e-05f})
    CHECK(store::half_to_float(store::float_to_half(f))
          == Approx(f).epsilon(1e-3));
}

TEST_CASE("Q and K rows move to llama.cpp's rotary order", "[unit]") {
  // One head of dim 4, one input: rows (a, j) = (0,0) (0,1) (1,0) (1,1).
  const auto out = cli::rope_rows_for_gguf({10, 11, 12, 13}, 1, 4, 1);
  CHECK(out == std::vector<float>{10, 12, 11, 13});
  const auto two = cli::rope_rows_for_gguf({0, 1, 2, 3, 4, 5, 6, 7}, 2, 4, 1);
  CHECK(two == std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7});
}

TEST_CASE("tutti export --format gguf writes llama.cpp's layout",
          "[integration]") {
  auto dir = scratch("gguf_export");
  auto cfg = dir / "tiny.yaml";
  write_text(cfg, "cluster_config:\n  world_size: 1\n  nnodes: 1\n"
                  "  nproc_per_node: 1\n  ep_size: 1\nmodel:\n"
                  "  vocab_size: 40\n  hidden_size: 16\n"
                  "  intermediate_size: 24\n  num_hidden_layers: 2\n"
                  "  num_attention_heads: 4\n  num_key_value_heads: 2\n"
                  "  max_seq_len: 32\nmoe_config:\n  num_experts: 4\n"
                  "  router_top_k: 2\ntrain:\n  steps: 1\n"
                  "  global_batch_size: 1\n  seq_len: 32\ndata:\n  dir: d\n"
                  "run:\n  dir: r\n");
  const auto base = tutti_bin() + " export --init " + cfg.string();
  for (const auto& [args, out] :
       {std::pair{" --format hf", "hf"}, std::pair{" --format gguf", "g32"},
        std::pair{" --format gguf --dtype f16", "g16"}}) {
    auto r = run(base + args + " --out " + (dir / out).string());
    INFO(r.output);
    REQUIRE(r.status == 0);
  }
  CHECK(run(base + " --format hf --dtype f16 --out x").status == 2);
  CHECK(run(base + " --format onnx --out x").status == 2);

  auto hf = store::read_safetensors(dir / "hf" / "model.safetensors");
  REQUIRE(hf.ok());
  std::map<std::string, std::vector<float>> by_name;
  for (auto& t : hf.value())
    by_name[t.name] = t.data;

  auto g = read_gguf(dir / "g32" / "model-f32.gguf");
  CHECK(g.strings["general.architecture"] == "llama");
  CHECK(g.strings["tokenizer.ggml.model"] == "llama");
  CHECK(g.strings["tokenizer.ggml.tokens[65]"].empty()); // vocab is 40
  CHECK(g.strings["tokenizer.ggml.tokens[39]"] == "<0x27>");
  CHECK(g.numbers["tokenizer.ggml.tokens.size"] == 40);
  CHECK(g.numbers["llama.block_count"] == 2);
  CHECK(g.numbers["llama.expert_count"] == 4);
  CHECK(g.numbers["llama.expert_used_count"] == 2);
  CHECK(g.numbers["llama.attention.head_count_kv"] == 2);
  CHECK(g.numbers["llama.rope.dimension_count"] == 4);
  CHECK(g.numbers["general.alignment"] == 32);
  CHECK(g.tensors.size() == 3 + 10 * 2);
  CHECK(g.tensors.at("token_embd.weight").ne == std::vector<uint64_t>{16, 40});
  CHECK(g.tensors.at("blk.1.ffn_gate_exps.weight").ne
        == std::vector<uint64_t>{16, 24, 4});
  CHECK(g.tensors.at("blk.1.ffn_down_exps.weight").ne
        == std::vector<uint64_t>{24, 16, 4});
  CHECK(g.tensors.at("blk.0.attn_k.weight").ne == std::vector<uint64_t>{16, 8});

  auto floats = [&](const gguf_file& f, const std::string& name, size_t n) {
    std::vector<float> v(n);
    if (f.tensors.at(name).type == 0) {
      std::memcpy(v.data(), f.data(name), n * 4);
    } else {
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, f.data(name) + 2 * i, 2);
        v[i] = store::half_to_float(h);
      }
    }
    return v;
  };
  CHECK(floats(g, "output.weight", 640) == by_name["lm_head.weight"]);
  CHECK(floats(g, "blk.0.attn_v.weight", 128)
        == by_name["model.layers.0.self_attn.v_proj.weight"]);
  CHECK(floats(g, "blk.0.attn_q.weight", 256)
        == cli::rope_rows_for_gguf(
          by_name["model.layers.0.self_attn.q_proj.weight"], 4, 4, 16));
  CHECK(floats(g, "blk.0.attn_k.weight", 128)
        == cli::rope_rows_for_gguf(
          by_name["model.layers.0.self_attn.k_proj.weight"], 2, 4, 16));
  std::vector<float> up;
  for (int e = 0; e < 4; ++e) {
    const auto& w = by_name["model.layers.1.block_sparse_moe.experts."
                            + std::to_string(e) + ".w3.weight"];
    up.insert(up.end(), w.begin(), w.end());
  }
  CHECK(floats(g, "blk.1.ffn_up_exps.weight", up.size()) == up);

  auto h = read_gguf(dir / "g16" / "model-f16.gguf");
  CHECK(h.numbers["general.file_type"] == 1);
  CHECK(h.tensors.at("blk.1.ffn_up_exps.weight").type == 1);
  CHECK(h.tensors.at("blk.0.attn_norm.weight").type == 0); // vectors stay F32
  const auto half_up = floats(h, "blk.1.ffn_up_exps.weight", up.size());
  for (size_t i = 0; i < up.size(); ++i)
    CHECK(half_up[i] == store::half_to_float(store::float_to_half(up[i])));
}

TEST_CASE("tutti export --format gguf --dtype q8_0 writes the experts in "
          "llama.cpp's Q8_0",
          "[integration]") {
  auto dir = scratch("gguf_q8_0");
  auto cfg = dir / "tiny32.yaml";
  // Rows of 32 and 64: whole Q8_0 blocks.
  write_text(cfg, "cluster_config:\n  world_size: 1\n  nnodes: 1\n"
                  "  nproc_per_node: 1\n  ep_size: 1\nmodel:\n"
                  "  vocab_size: 40\n  hidden_size: 32\n"
                  "  intermediate_size: 64\n  num_hidden_layers: 2\n"
                  "  num_attention_heads: 4\n  num_key_value_heads: 2\n"
                  "  max_seq_len: 32\nmoe_config:\n  num_experts: 4\n"
                  "  router_top_k: 2\ntrain:\n  steps: 1\n"
                  "  global_batch_size: 1\n  seq_len: 32\ndata:\n  dir: d\n"
                  "run:\n  dir: r\n");
  const auto base = tutti_bin() + " export --init " + cfg.string();
  for (const auto& [args, out] : {std::pair{" --format hf", "hf"},
                                  std::pair{" --format gguf --dtype q8_0",
                                            "q8"}}) {
    auto r = run(base + args + " --out " + (dir / out).string());
    INFO(r.output);
    REQUIRE(r.status == 0);
  }
  auto hf = store::read_safetensors(dir / "hf" / "model.safetensors");
  REQUIRE(hf.ok());
  std::map<std::string, std::vector<float>> by_name;
  for (auto& t : hf.value())
    by_name[t.name] = t.data;
  auto g = read_gguf(dir / "q8" / "model-q8_0.gguf");
  CHECK(g.numbers["general.file_type"] == 7); // LLAMA_FTYPE_MOSTLY_Q8_0
  CHECK(g.tensors.at("blk.1.ffn_down_exps.weight").type == 8);
  CHECK(g.tensors.at("blk.1.ffn_up_exps.weight").ne
        == std::vector<uint64_t>{32, 64, 4});
  // What tutti serves int8 is int8 here; the rest stays F32.
  for (const char* f32 : {"token_embd.weight", "blk.0.attn_q.weight",
                          "blk.0.ffn_gate_inp.weight", "output.weight"})
    CHECK(g.tensors.at(f32).type == 0);
  std::vector<float> up;
  for (int e = 0; e < 4; ++e) {
    const auto& w = by_name["model.layers.1.block_sparse_moe.experts."
                            + std::to_string(e) + ".w3.weight"];
    up.insert(up.end(), w.begin(), w.end());
  }
  const auto blocks = store::quantize_q8_0(up.data(), int64_t(up.size()));
  REQUIRE(blocks.size() == up.size() / 32 * 34);
  CHECK(std::string(g.data("blk.1.ffn_up_exps.weight"), blocks.size())
        == blocks);
  // llama.cpp's reference by hand on every block: d = absmax / 127 in F16,
  // codes round(x * (1 / d)); each value back within half a step.
  for (size_t b = 0; b < up.size() / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i)
      amax = std::max(amax, std::abs(up[b * 32 + i]));
    uint16_t h;
    std::memcpy(&h, blocks.data() + b * 34, 2);
    CHECK(h == store::float_to_half(amax / 127.0f));
    const float d = store::half_to_float(h);
    for (int i = 0; i < 32; ++i) {
      const auto q = static_cast<int8_t>(blocks[b * 34 + 2 + i]);
      CHECK(q == static_cast<int8_t>(
              std::roundf(up[b * 32 + i] * (1.0f / (amax / 127.0f)))));
      CHECK(std::abs(q * d - up[b * 32 + i]) <= 0.51f * d + 1e-3f * amax);
    }
  }
  // Rows Q8_0's blocks do not divide are refused, naming the tensor.
  auto odd = dir / "odd.yaml";
  auto text = read_text(cfg);
  text.replace(text.find("intermediate_size: 64"), 21,
               "intermediate_size: 24");
  write_text(odd, text);
  auto r = run(tutti_bin() + " export --init " + odd.string()
               + " --format gguf --dtype q8_0 --out " + (dir / "x").string());
  CHECK(r.status != 0);
  CHECK(r.output.find("ffn_down_exps") != std::string::npos);
  CHECK(r.output.find("multiple of 32") != std::string::npos);
}
