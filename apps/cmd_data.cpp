// tutti data synth | prepare | tokenizer | bench | warm

#include <cstdio>

#include "command_line.hpp"
#include "commands.hpp"
#include "data_commands.hpp"
#include "tutti/data/dataset.hpp"
#include "tutti/data/synth.hpp"

namespace tutti::cli {

namespace {

int synth(const std::vector<std::string>& args) {
  std::string out;
  uint32_t vocab = 0, order = 2, shards = 2;
  uint32_t topics = 0;
  uint64_t seed = 0, tokens = 0;
  double val_fraction = 0.1, topic_switch = 0.002;
  command_line cl("data synth", "--out DIR --vocab V --seed S --tokens N",
                  "synthetic order-2 Markov token data (its entropy rate is "
                  "known)");
  cl.options()("out", po::value(&out)->required(), "output directory")(
    "vocab", po::value(&vocab)->required(), "vocabulary size")(
    "order", po::value(&order)->default_value(2),
    "Markov order (2)")("seed", po::value(&seed)->required(), "random seed")(
    "tokens", po::value(&tokens)->required(), "tokens in total")(
    "val-fraction", po::value(&val_fraction)->default_value(0.1),
    "share held out")("shards", po::value(&shards)->default_value(2),
                      "train shards")(
    "topics", po::value(&topics)->default_value(0),
    "topic mode: N >= 2 topics, each an order-2 chain over its own slice of "
    "the vocabulary (routers learn to co-activate experts in groups)")(
    "topic-switch", po::value(&topic_switch)->default_value(0.002),
    "topic mode: probability per token of switching to another topic");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (topics > 0 && order != 2)
    return fail(2, "data synth: --topics needs --order 2");
  if (auto err = topics > 0
                   ? data::synth_topic_dataset(out, vocab, topics, topic_switch,
                                               seed, tokens, val_fraction,
                                               shards)
                   : data::synth_dataset(out, vocab, order, seed, tokens,
                                         val_fraction, shards);
      !err)
    return fail(2, "data synth: " + err.message());
  auto meta = data::read_meta(out);
  if (!meta.ok())
    return fail(1, "data synth: " + meta.message());
  std::printf(
    "wrote %s: %llu train + %llu held-out tokens, vocab %u, "
    "entropy rate %.6f nats/token\n",
    out.c_str(), static_cast<unsigned long long>(meta.value().train_tokens),
    static_cast<unsigned long long>(meta.value().val_tokens),
    meta.value().vocab_size, meta.value().entropy_rate_nats.value_or(0));
  return 0;
}

} // namespace

int data_command(const std::vector<std::string>& args) {
  if (args.empty())
    return fail(2, "data: missing subcommand (synth, prepare, tokenizer, bench "
                   "or warm)");
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "synth")
    return synth(rest);
  if (args[0] == "prepare")
    return data_prepare(rest);
  if (args[0] == "tokenizer")
    return data_tokenizer(rest);
  if (args[0] == "bench")
    return data_bench(rest);
  if (args[0] == "warm")
    return data_warm(rest);
  if (args[0] == "--help" || args[0] == "-h") {
    command_line cl("data", "synth|prepare|tokenizer|bench|warm [options]",
                    "subcommands:\n"
                    "  synth --out DIR ...            synthetic order-2 "
                    "Markov token data\n"
                    "  prepare --input F... --out DIR a corpus into token "
                    "shards\n"
                    "  tokenizer train|encode|decode  SentencePiece "
                    "tokenizers\n"
                    "  bench CONFIG                   loader tokens/s against "
                    "the job's need\n"
                    "  warm DIR|CONFIG                shards into the page "
                    "cache before a job\n"
                    "'tutti data SUBCOMMAND --help' describes each.");
    po::variables_map vm;
    return cl.parse(args, vm).value_or(0);
  }
  return fail(2, "data: unknown subcommand '" + args[0]
                   + "' (synth, prepare, tokenizer, bench or warm)");
}

} // namespace tutti::cli
