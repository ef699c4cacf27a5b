#pragma once
// What the config tests share: a small valid config, line edits of it, and
// parse / refusal helpers that fail the test when the config goes the other
// way.

#include <catch2/catch.hpp>

#include <exception>
#include <string>

#include "tutti/config/job_config.hpp"

namespace tutti::testing::config {

// Every section, only the required keys plus a few common ones.
inline const std::string base = "cluster_config:\n"
                                "  world_size: 2\n"
                                "  nnodes: 1\n"
                                "  nproc_per_node: 2\n"
                                "  ep_size: 0\n"
                                "model:\n"
                                "  vocab_size: 32\n"
                                "  hidden_size: 32\n"
                                "  intermediate_size: 64\n"
                                "  num_hidden_layers: 2\n"
                                "  num_attention_heads: 4\n"
                                "  num_key_value_heads: 2\n"
                                "  max_seq_len: 32\n"
                                "moe_config:\n"
                                "  num_experts: 4\n"
                                "  router_top_k: 2\n"
                                "  capacity_factor: 0\n"
                                "train:\n"
                                "  steps: 10\n"
                                "  global_batch_size: 8\n"
                                "  seq_len: 32\n"
                                "data:\n"
                                "  dir: some/data\n"
                                "run:\n"
                                "  dir: some/run\n";

// `base` with the line `from` (without its newline) replaced by `to`; `to`
// may span lines or be empty (the line is then removed).
inline std::string with(const std::string& from, const std::string& to,
                        const std::string& text = base) {
  const auto needle = from + "\n";
  const auto at = text.find(needle);
  REQUIRE(at != std::string::npos); // the edit must apply, or it tests nothing
  REQUIRE(text.find(needle, at + 1) == std::string::npos);
  auto out = text;
  out.replace(at, needle.size(), to.empty() ? std::string() : to + "\n");
  return out;
}

inline job_config parse(const std::string& yaml) {
  auto c = parse_job_config(yaml, "test.yaml");
  INFO(c.message());
  REQUIRE(c.ok());
  return *c;
}

// The message that `yaml` is refused with; fails the test if it parses or
// throws.
inline std::string refusal(const std::string& yaml) {
  expected<job_config> c = status::error("not parsed");
  try {
    c = parse_job_config(yaml, "test.yaml");
  } catch (const std::exception& ex) {
    FAIL("threw instead of returning a failure: " << ex.what());
  }
  if (c.ok())
    FAIL("config was accepted:\n" << yaml);
  std::string what = c.message();
  INFO(what);
  CHECK(what.find('\n') == std::string::npos); // one line
  CHECK_FALSE(what.empty());
  return what;
}

} // namespace tutti::testing::config
