// tutti data prepare: a text corpus into a dataset directory.

#include <atomic>
#include <csignal>
#include <cstdio>

#include "command_line.hpp"
#include "commands.hpp"
#include "data_commands.hpp"
#include "tutti/data/prepare.hpp"

namespace tutti::cli {

namespace {

std::atomic<bool> interrupt_requested{false};

extern "C" void on_interrupt(int) { interrupt_requested = true; }

} // namespace

int data_prepare(const std::vector<std::string>& args) {
  std::vector<std::string> inputs;
  std::string out, tokenizer_path;
  data::prepare_options o;
  double shard_mb = 16;
  command_line cl(
    "data prepare", "--input FILE|DIR... --out DIR [--tokenizer PATH]",
    "Normalises, deduplicates, splits by document and tokenizes a corpus\n"
    "(files, directories, .gz, JSON lines) into shards on all cores. Writes\n"
    "meta.json, index.json, report.json and the tokenizer beside them. An\n"
    "interrupted prepare (Ctrl-C, a crash) resumes where it stopped when\n"
    "run again with the same arguments.");
  cl.options()("input", po::value(&inputs)->multitoken()->required(),
               "text files or directories (.gz, .jsonl read as such)")(
    "out", po::value(&out)->required(), "output directory")(
    "tokenizer", po::value(&tokenizer_path),
    "tokenizer.model or a directory holding one (default: byte-level)")(
    "val-fraction", po::value(&o.val_fraction)->default_value(0.05),
    "share of documents held out")("shard-mb",
                                   po::value(&shard_mb)->default_value(16),
                                   "MB of text per shard")(
    "text-field", po::value(&o.corpus.text_field)->default_value("text"),
    "JSON lines: the field holding the text")(
    "doc-delimiter", po::value(&o.corpus.doc_delimiter),
    "plain text: a line that ends a document (fortune files: %); "
    "default one document per file")("split-seed",
                                     po::value(&o.split_seed)->default_value(0),
                                     "which documents are held out")(
    "threads", po::value(&o.threads)->default_value(0),
    "tokenizing threads (0 = all cores)");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (!(shard_mb > 0))
    return cl.bad("--shard-mb must be > 0");
  o.inputs.assign(inputs.begin(), inputs.end());
  o.out_dir = out;
  o.tokenizer = tokenizer_path;
  o.shard_bytes = static_cast<std::uint64_t>(shard_mb * 1e6);
  o.interrupted = [] { return interrupt_requested.load(); };
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  auto r = data::prepare_corpus(o);
  if (!r.ok())
    return fail(2, "data prepare: " + r.message());
  const auto& rep = r.value();
  if (!rep.complete) {
    std::printf("interrupted: %u train + %u held-out shards so far in %s; "
                "run the same command again to resume\n",
                rep.train_shards, rep.val_shards, out.c_str());
    return 1;
  }
  std::printf(
    "wrote %s: %llu documents (%llu duplicates, %llu empty dropped), "
    "%llu train + %llu held-out tokens (%s, vocab %u), %.2f bytes/token, "
    "%u + %u shards (%u reused), %.1f MB/s on %u threads\n",
    out.c_str(), static_cast<unsigned long long>(rep.documents),
    static_cast<unsigned long long>(rep.duplicates),
    static_cast<unsigned long long>(rep.empty),
    static_cast<unsigned long long>(rep.train_tokens),
    static_cast<unsigned long long>(rep.val_tokens), rep.tokenizer.c_str(),
    rep.vocab_size, rep.bytes_per_token(), rep.train_shards, rep.val_shards,
    rep.shards_reused, rep.megabytes_per_second(), rep.threads);
  return 0;
}

} // namespace tutti::cli
