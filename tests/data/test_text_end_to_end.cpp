// Real text end to end through the tutti binary: a SentencePiece tokenizer
// trained, a corpus prepared with it, a small job trained, `tutti sample`
// continuing a prompt, `tutti export --format hf` with the tokenizer and
// generation_config.json, and `tutti data bench`. The serving forward is
// checked against the job's own held-out loss on the same windows.
#include <catch2/catch.hpp>

#include <cmath>

#include <nlohmann/json.hpp>

#include "test_support.hpp"
#include "tutti/data/batch_sampler.hpp"
#include "tutti/data/dataset.hpp"
#include "tutti/model/weights.hpp"
#include "tutti/serve/engine.hpp"
#include "tutti/store/checkpoint_files.hpp"

namespace fs = std::filesystem;
using namespace tutti::testing;

namespace {

// Fortune-style documents in a few languages, separated by "%" lines.
std::string corpus() {
  const char* lines[] = {
    "The quick brown fox jumps over the lazy dog.",
    "Naïve café owners serve crème brûlée every morning.",
    "Λόγος και κόσμος: words and the world.",
    "日本語のテキストも少し含まれています。",
    "A list is a mutable sequence; a tuple is not.",
    "def add(x, y):\n    return x + y",
  };
  std::string out;
  for (int i = 0; i < 400; ++i) {
    out += lines[i % 6];
    out += " (" + std::to_string(i % 37) + ")\n";
    out += lines[(i * 7 + 3) % 6];
    out += "\n%\n";
  }
  return out;
}

} // namespace

TEST_CASE("tokenizer, prepare, train, sample, export on real text",
          "[integration]") {
  auto dir = scratch("text_end_to_end");
  write_text(dir / "corpus.txt", corpus());
  const auto bin = tutti_bin();

  auto t = run(bin + " data tokenizer train --input "
                 + (dir / "corpus.txt").string()
                 + " --vocab 400 --model bpe --threads 1 --out "
                 + (dir / "run" / "tokenizer").string(),
               120);
  INFO(t.output);
  REQUIRE(t.status == 0);

  auto p = run(bin + " data prepare --input " + (dir / "corpus.txt").string()
                 + " --doc-delimiter % --val-fraction 0.2 --tokenizer "
                 + (dir / "run" / "tokenizer").string() + " --out "
                 + (dir / "run" / "data").string(),
               120);
  INFO(p.output);
  REQUIRE(p.status == 0);
  CHECK_THAT(p.output, Catch::Contains("400 documents"));
  CHECK_THAT(p.output, Catch::Contains("duplicates")); // repeats dropped
  auto meta = tutti::data::read_meta(dir / "run" / "data");
  REQUIRE(meta.ok());
  CHECK(meta.value().source == "sentencepiece");
  CHECK(meta.value().vocab_size <= 400);

  auto cfg = small_config((dir / "run" / "data").string(),
                          (dir / "run").string(), 2, 30);
  cfg.replace(cfg.find("vocab_size: 32"), 14, "vocab_size: 416");
  write_text(dir / "text.yaml", cfg);
  auto job = run(bin + " run " + (dir / "text.yaml").string() + " --quiet",
                 300);
  INFO(job.output);
  REQUIRE(job.status == 0);

  // The serving forward, which `tutti sample` runs, reproduces the job's
  // held-out loss: the same windows (the first eval_sequences of the
  // held-out split), position by position.
  auto ckpt = tutti::model::latest_checkpoint(dir / "run");
  REQUIRE(ckpt.ok());
  auto model = tutti::serve::load_model(ckpt.value());
  REQUIRE(model.ok());
  auto val = tutti::data::load_split(dir / "run" / "data", "val");
  REQUIRE(val.ok());
  auto windows = tutti::data::eval_windows(val.value(), 32, 8);
  REQUIRE(windows.rows == 8);
  const auto& shape = model.value().shape;
  const tutti::serve::kv_geometry g{shape.layers, shape.kv_heads,
                                    shape.head_dim, 16};
  double ce = 0;
  for (std::uint64_t r = 0; r < windows.rows; ++r) {
    tutti::serve::kv_cache cache(g, 2);
    std::vector<std::int32_t> table;
    REQUIRE(cache.reserve(table, 32));
    tutti::serve::engine forward(model.value(), cache);
    const auto* row = windows.inputs.data() + r * 32;
    std::vector<float> logits;
    REQUIRE(
      forward
        .forward({{row, 32, 0, &table, tutti::serve::seq_chunk::logits::all}},
                 logits)
        .ok());
    for (std::uint64_t i = 0; i < 32; ++i) {
      const float* l = logits.data() + i * shape.vocab;
      double max = -1e30, sum = 0;
      for (std::int64_t v = 0; v < shape.vocab; ++v)
        max = std::max(max, double(l[v]));
      for (std::int64_t v = 0; v < shape.vocab; ++v)
        sum += std::exp(double(l[v]) - max);
      ce += max + std::log(sum) - l[windows.targets[r * 32 + i]];
    }
  }
  ce /= 8 * 32;
  const auto evals = metric_series(dir / "run" / "metrics.jsonl", "eval_loss");
  REQUIRE_FALSE(evals.empty());
  CHECK(ce == Approx(evals.back()).epsilon(1e-4));

  auto s = run(bin + " sample " + (dir / "run").string()
                 + " --prompt 'The quick' --tokens 12",
               120);
  INFO(s.output);
  REQUIRE(s.status == 0);
  CHECK_THAT(s.output, Catch::Contains("The quick"));
  CHECK_THAT(s.output, Catch::Contains("greedy"));
  auto sampled = run(bin + " sample " + (dir / "run").string()
                       + " --prompt 'Naïve' --tokens 8 --temperature 0.8 "
                         "--top-k 20 --seed 3",
                     120);
  CHECK(sampled.status == 0);
  auto refused = run(
    bin + " sample " + (dir / "nothing").string() + " --prompt x", 60);
  CHECK(refused.status == 2);
  CHECK_THAT(refused.output, Catch::Contains("no committed checkpoint"));

  auto e = run(bin + " export " + ckpt.value().string() + " --format hf --out "
                 + (dir / "hf").string(),
               120);
  INFO(e.output);
  REQUIRE(e.status == 0);
  CHECK(fs::exists(dir / "hf" / "tokenizer.model"));
  auto gen = nlohmann::json::parse(
    read_text(dir / "hf" / "generation_config.json"));
  CHECK(gen["eos_token_id"] == 2);
  CHECK(gen["bos_token_id"] == 1);
  auto tcfg = nlohmann::json::parse(
    read_text(dir / "hf" / "tokenizer_config.json"));
  CHECK(tcfg["eos_token"] == "</s>");
  auto config = nlohmann::json::parse(read_text(dir / "hf" / "config.json"));
  CHECK(config["eos_token_id"] == 2);
  CHECK(config["vocab_size"] == 416);

  auto b = run(
    bin + " data bench " + (dir / "text.yaml").string() + " --steps 20", 120);
  INFO(b.output);
  REQUIRE(b.status == 0);
  CHECK_THAT(b.output, Catch::Contains("loader headroom"));
}
