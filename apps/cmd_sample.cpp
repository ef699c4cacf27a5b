// tutti sample RUN_DIR --prompt TEXT: a trained model continues a prompt,
// on the serving forward (serve/continuation.hpp).

#include <cstdio>
#include <filesystem>

#include "command_line.hpp"
#include "commands.hpp"
#include "tutti/model/weights.hpp"
#include "tutti/serve/continuation.hpp"
#include "tutti/tokenizer/tokenizer.hpp"

namespace tutti::cli {

namespace {

namespace fs = std::filesystem;

// --tokenizer, else the first of RUN_DIR, RUN_DIR/tokenizer, RUN_DIR/data
// holding a tokenizer.model or tokenizer.json (the .model first), else
// byte-level for a 256-token model.
expected<tokenizer::tokenizer> find_tokenizer(const fs::path& run_dir,
                                              const std::string& given,
                                              std::int64_t vocab) {
  if (!given.empty())
    return tokenizer::tokenizer::load(given);
  for (const auto& dir : {run_dir, run_dir / "tokenizer", run_dir / "data"})
    if (tokenizer::holds_tokenizer(dir))
      return tokenizer::tokenizer::load(dir);
  if (vocab == 256)
    return tokenizer::tokenizer::bytes();
  return status::error(
    "no tokenizer.model or tokenizer.json in " + run_dir.string()
    + " (or its tokenizer/ or data/) for a model of " + std::to_string(vocab)
    + " tokens: pass --tokenizer PATH");
}

} // namespace

int sample_command(const std::vector<std::string>& args) {
  std::string prompt, tokenizer_path, checkpoint;
  serve::continuation_options o;
  o.sampling.temperature = 0;
  bool no_stop = false;
  command_line cl(
    "sample", "RUN_DIR --prompt TEXT [options]",
    "Continues TEXT with the run's newest checkpoint (or --checkpoint):\n"
    "greedy by default, sampled with --temperature T (and --top-k K),\n"
    "on the serving forward: the tokens `tutti serve` gives the same\n"
    "prompt and parameters.");
  cl.options()("prompt", po::value(&prompt)->required(), "text to continue")(
    "tokens", po::value(&o.max_new_tokens)->default_value(64),
    "new tokens at most")("temperature",
                          po::value(&o.sampling.temperature)->default_value(0),
                          "0: greedy; else softmax(logits / T)")(
    "top-k", po::value(&o.sampling.top_k)->default_value(0),
    "sample among the K likeliest (0: all)")(
    "seed", po::value(&o.sampling.seed)->default_value(0),
    "sampling seed")("checkpoint", po::value(&checkpoint),
                     "a checkpoint directory (default: the run's newest)")(
    "tokenizer", po::value(&tokenizer_path),
    "tokenizer.model or a directory holding one (default: found in RUN_DIR)")(
    "no-stop", po::bool_switch(&no_stop),
    "go on past the end-of-document token");
  cl.required("run_dir", "RUN_DIR");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (o.max_new_tokens < 1 || o.sampling.temperature < 0
      || o.sampling.top_k < 0)
    return cl.bad("--tokens must be >= 1, --temperature and --top-k >= 0");
  const fs::path run_dir = vm["run_dir"].as<std::string>();
  fs::path ckpt = checkpoint;
  if (ckpt.empty()) {
    auto latest = model::latest_checkpoint(run_dir);
    if (!latest.ok())
      return fail(2, "sample: " + latest.message());
    ckpt = latest.value();
  }
  auto model = serve::load_model(ckpt);
  if (!model.ok())
    return fail(2, "sample: " + model.message());
  auto tok = find_tokenizer(run_dir, tokenizer_path, model.value().shape.vocab);
  if (!tok.ok())
    return fail(2, "sample: " + tok.message());
  if (tok.value().vocab_size() > model.value().shape.vocab)
    return fail(2, "sample: the tokenizer has "
                     + std::to_string(tok.value().vocab_size())
                     + " tokens, the model only "
                     + std::to_string(model.value().shape.vocab));
  auto ids = tok.value().encode(prompt);
  if (!ids.ok())
    return fail(2, "sample: " + ids.message());
  // Documents were separated by end-of-document in training: starting
  // after one is starting a document.
  std::vector<std::int32_t> context;
  if (tok.value().eos_id() >= 0)
    context.push_back(tok.value().eos_id());
  context.insert(context.end(), ids.value().begin(), ids.value().end());
  if (!no_stop)
    o.stop_id = tok.value().eos_id();
  auto out = serve::continue_sequence(model.value(), context, o);
  if (!out.ok())
    return fail(1, "sample: " + out.message());
  auto& gen = out.value().tokens;
  if (!gen.empty() && gen.back() == o.stop_id)
    gen.pop_back();
  std::vector<std::int32_t> all = ids.value();
  all.insert(all.end(), gen.begin(), gen.end());
  auto text = tok.value().decode(all);
  if (!text.ok())
    return fail(1, "sample: " + text.message());
  std::printf("%s\n", text.value().c_str());
  std::fprintf(
    stderr, "[%s, %zu new tokens, %s%s]\n", ckpt.filename().c_str(), gen.size(),
    o.sampling.temperature > 0 ? "sampled" : "greedy",
    out.value().at_max_positions ? ", stopped at max_position_embeddings" : "");
  return 0;
}

} // namespace tutti::cli
