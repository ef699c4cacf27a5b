// DeepSeek-V3's feed-forward side at the model part's boundaries, whatever
// the family the config allows: the leading dense layers' MLP
// (`mlp.gate_proj`) and the shared experts (`mlp.shared_experts.gate_proj`,
// tutti's `block_sparse_moe.shared_experts.w1`) under the deepseek_v3 and
// qwen3_moe names and back; n_shared_experts, first_k_dense_replace and the
// dense width through a checkpoint header (one without them is a model
// without them) and config.json (DeepSeek-V3's keys: moe_intermediate_size,
// intermediate_size, n_routed_experts); a missing or misshapen tensor
// refused in one line naming it by its Hugging Face name.

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "tutti/config/job_config.hpp"
#include "tutti/model/family.hpp"
#include "tutti/model/hf_config.hpp"
#include "tutti/model/model_shape.hpp"
#include "tutti/model/param_layout.hpp"
#include "tutti/model/tensor_names.hpp"
#include "tutti/model/weights.hpp"

#include "test_support.hpp"

using namespace tutti;
namespace names = tutti::model::names;
using tutti::testing::scratch;
using tutti::testing::write_text;

namespace {

job_config ffn_config() {
  job_config c;
  c.model.vocab_size = 32;
  c.model.hidden_size = 16;
  c.model.intermediate_size = 8;
  c.model.dense_intermediate_size = 24;
  c.model.num_hidden_layers = 3;
  c.model.num_attention_heads = 2;
  c.model.num_key_value_heads = 2;
  c.model.max_seq_len = 16;
  c.moe.num_experts = 4;
  c.moe.router_top_k = 2;
  c.moe.n_shared_experts = 2;
  c.moe.first_k_dense_replace = 1;
  return c;
}

} // namespace

TEST_CASE("the dense MLP and the shared experts under DeepSeek-V3's and "
          "Qwen3-MoE's names",
          "[unit]") {
  const std::pair<std::string, std::string> pairs[] = {
    {names::layer(0, names::dense_gate), "model.layers.0.mlp.gate_proj.weight"},
    {names::layer(0, names::dense_up), "model.layers.0.mlp.up_proj.weight"},
    {names::layer(0, names::dense_down), "model.layers.0.mlp.down_proj.weight"},
    {names::layer(1, names::shared_w1),
     "model.layers.1.mlp.shared_experts.gate_proj.weight"},
    {names::layer(1, names::shared_w3),
     "model.layers.1.mlp.shared_experts.up_proj.weight"},
    {names::layer(1, names::shared_w2),
     "model.layers.1.mlp.shared_experts.down_proj.weight"},
    {names::layer(1, names::router), "model.layers.1.mlp.gate.weight"},
    {names::layer(1, names::router_bias),
     "model.layers.1.mlp.gate.e_score_correction_bias"},
    {names::expert(1, 3, "w1"),
     "model.layers.1.mlp.experts.3.gate_proj.weight"},
    {names::expert(1, 3, "w2"),
     "model.layers.1.mlp.experts.3.down_proj.weight"},
  };
  for (auto family : {model_family::deepseek_v3, model_family::qwen3_moe})
    for (const auto& [tutti_name, hf] : pairs) {
      INFO(to_string(family) << ": " << tutti_name);
      CHECK(model::hf_tensor_name(family, tutti_name) == hf);
      CHECK(model::tutti_tensor_name(family, hf) == tutti_name);
    }
  // Mixtral keeps tutti's names, the dense MLP's included.
  for (const auto& [tutti_name, hf] : pairs)
    CHECK(model::hf_tensor_name(model_family::mixtral, tutti_name)
          == tutti_name);
  CHECK(std::string(model::hf_architecture(model_family::deepseek_v3))
        == "DeepseekV3ForCausalLM");
}

TEST_CASE("the dense layers replace router and experts in the dense layout",
          "[unit]") {
  const auto c = ffn_config();
  const auto layout = model::dense_layout(c.model, c.moe);
  CHECK(layout.find(names::layer(0, names::router)) == nullptr);
  CHECK(layout.at(names::layer(0, names::dense_gate)).shape
        == std::vector<int64_t>{24, 16});
  CHECK(layout.at(names::layer(0, names::dense_down)).shape
        == std::vector<int64_t>{16, 24});
  CHECK(layout.find(names::layer(0, names::shared_w1)) == nullptr);
  for (int64_t l : {1, 2}) {
    CHECK(layout.find(names::layer(l, names::dense_gate)) == nullptr);
    CHECK(layout.at(names::layer(l, names::shared_w3)).shape
          == std::vector<int64_t>{16, 16});
    CHECK(layout.at(names::layer(l, names::shared_w2)).shape
          == std::vector<int64_t>{16, 16});
  }
  // Without the options the layout is the one it always was.
  job_config plain = c;
  plain.moe.n_shared_experts = plain.moe.first_k_dense_replace = 0;
  const auto before = model::dense_layout(plain.model, plain.moe);
  for (const auto& t : before.tensors())
    CHECK(t.name.find("shared_experts") == std::string::npos);
  CHECK(before.total() + 3 * 16 * 24 + 2 * 3 * 16 * 16 - 4 * 16
        == layout.total());
}

TEST_CASE("shared experts and dense layers go through a checkpoint header "
          "and config.json",
          "[unit]") {
  const auto c = ffn_config();
  store::shard_meta meta;
  model::record_shape(c.model, c.moe, meta.ints, meta.strings);
  const auto dir = scratch("feed_forward_keys");
  write_text(dir / "config.json", model::hf_config_text(meta));
  const auto read = model::read_hf_config(dir / "config.json");
  INFO(read.message());
  REQUIRE(read.ok());
  for (const auto& shape : {model::shape_of(meta), read.value()}) {
    CHECK(shape.shared_experts == 2);
    CHECK(shape.dense_layers == 1);
    CHECK(shape.dense_intermediate == 24);
    CHECK(shape.intermediate == 8);
    CHECK(shape.shared_intermediate() == 16);
  }
  // A header written before the keys: no shared experts, no dense layers.
  for (const char* key :
       {"n_shared_experts", "first_k_dense_replace", "dense_intermediate_size"})
    meta.ints.erase(key);
  const auto old = model::shape_of(meta);
  CHECK(old.shared_experts == 0);
  CHECK(old.dense_layers == 0);
  CHECK(model::check_shape(old).ok());

  // DeepSeek-V3's config.json keys for the same sizes.
  model::record_shape(c.model, c.moe, meta.ints, meta.strings);
  meta.strings["model_family"] = "deepseek_v3";
  const auto j = nlohmann::json::parse(model::hf_config_text(meta));
  CHECK(j["architectures"][0] == "DeepseekV3ForCausalLM");
  CHECK(j["moe_intermediate_size"] == 8);
  CHECK(j["intermediate_size"] == 24);
  CHECK(j["n_routed_experts"] == 4);
  CHECK(j["n_shared_experts"] == 2);
  CHECK(j["first_k_dense_replace"] == 1);
  const auto keys = model::ffn_keys_of(model_family::deepseek_v3);
  CHECK(std::string(keys.experts) == "n_routed_experts");
}

TEST_CASE("a missing or misshapen shared or dense tensor is refused by its "
          "Hugging Face name",
          "[unit]") {
  auto shape = model::shape_of(ffn_config().model, ffn_config().moe);
  shape.family = model_family::deepseek_v3;
  std::vector<store::named_tensor> tensors;
  for (int64_t l = 0; l < 3; ++l) {
    const bool dense = l == 0;
    const int64_t f = dense ? 24 : 16;
    for (const char* n : dense
                           ? std::vector{names::dense_gate, names::dense_up}
                           : std::vector{names::shared_w1, names::shared_w3})
      tensors.push_back({names::layer(l, n), {f, 16}, {}});
    tensors.push_back(
      {names::layer(l, dense ? names::dense_down : names::shared_w2),
       {16, f},
       {}});
  }
  CHECK(model::check_feed_forward_tensors(shape, tensors).ok());
  auto bent = tensors;
  bent[4].shape = {16, 8}; // layer 1's shared up_proj
  CHECK(model::check_feed_forward_tensors(shape, bent).message()
        == "tensor model.layers.1.mlp.shared_experts.up_proj.weight has shape "
           "[16,8], expected [16,16]");
  auto short_of = tensors;
  short_of.erase(short_of.begin() + 2); // layer 0's down_proj
  CHECK(model::check_feed_forward_tensors(shape, short_of).message()
        == "tensor model.layers.0.mlp.down_proj.weight missing");
}
