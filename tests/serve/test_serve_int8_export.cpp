// `tutti export --dtype int8` and `tutti serve` of its directory: the
// experts' weights stored as I8 with F32 scales [out, 1] (the rest F32,
// config.json's quantization_config saying so), loaded without
// re-quantizing, the same codes and scales as quantizing the float export
// at load (serve.weight_dtype int8), and `tutti serve` saying so with the
// kernel it runs them on (with int8 rows too; float experts under int8
// rows refused); a checkpoint missing a scale and the
// --dtype values that do not fit the format refused in one line naming
// them.

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <tuple>

#include "test_support.hpp"
#include "tutti/model/tensor_names.hpp"
#include "tutti/serve/model.hpp"
#include "tutti/store/safetensors.hpp"

using namespace tutti;
using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

// Hidden 32, intermediate 64: rows that Q8_0's blocks divide too.
constexpr const char* tiny_config =
  "cluster_config:\n  world_size: 1\n  nnodes: 1\n  nproc_per_node: 1\n"
  "  ep_size: 1\nmodel:\n  vocab_size: 64\n  hidden_size: 32\n"
  "  intermediate_size: 64\n  num_hidden_layers: 2\n"
  "  num_attention_heads: 4\n  num_key_value_heads: 2\n  max_seq_len: 32\n"
  "moe_config:\n  num_experts: 4\n  router_top_k: 2\ntrain:\n  steps: 1\n"
  "  global_batch_size: 1\n  seq_len: 32\ndata:\n  dir: d\nrun:\n  dir: r\n";

void check_same_packing(const kernels::packed_matrix& a,
                        const kernels::packed_matrix& b) {
  REQUIRE(a.is_int8());
  REQUIRE(b.is_int8());
  CHECK(a.codes == b.codes);
  CHECK(a.scales == b.scales);
}

} // namespace

TEST_CASE("tutti export --dtype int8 is served as it is, as quantized at "
          "load",
          "[integration]") {
  const auto dir = scratch("serve_int8_export");
  const auto cfg = dir / "tiny.yaml";
  write_text(cfg, tiny_config);
  const auto base = tutti_bin() + " export --init " + cfg.string();
  for (const auto& [args, out] : {std::pair{" --format hf", "f32"},
                                  std::pair{" --format hf --dtype int8",
                                            "int8"}}) {
    auto r = run(base + args + " --out " + (dir / out).string());
    INFO(r.output);
    REQUIRE(r.status == 0);
  }

  auto stored = store::read_safetensors_as_f32(dir / "int8"
                                               / "model.safetensors");
  REQUIRE(stored.ok());
  std::map<std::string, const store::named_tensor*> by_name;
  for (const auto& t : stored.value())
    by_name[t.name] = &t;
  const auto w2 = model::names::expert(1, 3, "w2");
  REQUIRE(by_name.count(w2));
  CHECK(by_name[w2]->int8);
  REQUIRE(by_name.count(w2 + "_scale"));
  CHECK(!by_name[w2 + "_scale"]->int8);
  CHECK(by_name[w2 + "_scale"]->shape == std::vector<int64_t>{32, 1});
  for (const auto* dense : {model::names::embed, model::names::lm_head})
    CHECK(!by_name.at(dense)->int8);
  CHECK(!by_name.at(model::names::layer(0, model::names::q_proj))->int8);
  const auto config = nlohmann::json::parse(read_text(dir / "int8"
                                                      / "config.json"));
  CHECK(config["quantization_config"]["config_groups"]["group_0"]["weights"]
              ["strategy"]
        == "channel");

  auto int8 = serve::load_model(dir / "int8");
  INFO(int8.message());
  REQUIRE(int8.ok());
  CHECK(int8.value().expert_dtype == weight_dtype::int8);
  CHECK(!int8.value().quantized_at_load);
  CHECK(serve::expert_weights_text(int8.value()).find("from the checkpoint")
        != std::string::npos);
  auto at_load = serve::load_model(dir / "f32");
  REQUIRE(at_load.ok());
  CHECK(at_load.value().expert_dtype == weight_dtype::fp32);
  serve::quantize_experts(at_load.value(), weight_dtype::int8);
  for (size_t l = 0; l < 2; ++l)
    for (size_t e = 0; e < 4; ++e) {
      check_same_packing(int8.value().layers[l].w13_t[e],
                         at_load.value().layers[l].w13_t[e]);
      check_same_packing(int8.value().layers[l].w2_t[e],
                         at_load.value().layers[l].w2_t[e]);
    }

  // `tutti serve` says at the start what the experts are and which kernel
  // runs them (it is stopped by the deadline, 3 s).
  for (const auto& [model, key, said] :
       {std::tuple{dir / "int8", "", "experts int8 (from the checkpoint), "
                                     "kernel "},
        std::tuple{dir / "f32", "  weight_dtype: int8\n",
                   "experts int8 (quantized at load), kernel "},
        std::tuple{dir / "int8", "  activation_dtype: int8\n",
                   "experts int8 (from the checkpoint), rows int8, kernel "},
        std::tuple{dir / "f32",
                   "  weight_dtype: int8\n  activation_dtype: int8\n",
                   "experts int8 (quantized at load), rows int8, kernel "}}) {
    write_text(dir / "serve.yaml", "serve:\n  model: " + model.string()
                                     + "\n  listen: 127.0.0.1:0\n  log_dir: "
                                     + dir.string() + "\n" + key);
    auto r = run(tutti_bin() + " serve " + (dir / "serve.yaml").string(), 3);
    INFO(r.output);
    CHECK(r.output.find(said) != std::string::npos);
    CHECK(r.output.find("; CPU: ") != std::string::npos);
    CHECK(r.output.find("serving ") != std::string::npos);
  }

  // Float experts under int8 rows: refused at the start, in one line.
  write_text(dir / "serve.yaml", "serve:\n  model: " + (dir / "f32").string()
                                   + "\n  listen: 127.0.0.1:0\n  log_dir: "
                                   + dir.string()
                                   + "\n  activation_dtype: int8\n");
  {
    auto r = run(tutti_bin() + " serve " + (dir / "serve.yaml").string(), 10);
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find("serve.activation_dtype: int8 multiplies int8 "
                        "experts, and this model's are fp32")
          != std::string::npos);
  }

  // A scale missing: refused naming the tensor, in one line.
  const auto broken = dir / "broken";
  fs::create_directories(broken);
  fs::copy_file(dir / "int8" / "config.json", broken / "config.json",
                fs::copy_options::overwrite_existing);
  std::vector<store::named_tensor> kept;
  for (auto& t : stored.value())
    if (t.name != w2 + "_scale")
      kept.push_back(t);
  REQUIRE(store::write_safetensors(broken / "model.safetensors", kept).ok());
  auto refused = serve::load_model(broken);
  REQUIRE(!refused.ok());
  CHECK(refused.message().find(w2 + "_scale") != std::string::npos);
  CHECK(refused.message().find("missing") != std::string::npos);
  CHECK(refused.message().find('\n') == std::string::npos);

  // --dtype values that do not fit the format.
  for (const char* args : {" --format gguf --dtype int8",
                           " --format hf --dtype q8_0",
                           " --format hf --dtype int4"}) {
    auto r = run(base + args + " --out " + (dir / "x").string());
    INFO(args << ": " << r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find("--dtype") != std::string::npos);
  }
}
