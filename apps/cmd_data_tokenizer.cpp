// tutti data tokenizer train | encode | decode

#include <cstdio>
#include <iostream>
#include <sstream>

#include "command_line.hpp"
#include "commands.hpp"
#include "data_commands.hpp"
#include "tutti/data/corpus.hpp"
#include "tutti/data/normalize.hpp"
#include "tutti/tokenizer/tokenizer.hpp"

namespace tutti::cli {

namespace {

int train(const std::vector<std::string>& args) {
  std::vector<std::string> inputs;
  std::string out, model = "unigram";
  data::corpus_options corpus;
  tokenizer::train_options o;
  command_line cl("data tokenizer train",
                  "--input FILE|DIR... --vocab N --out DIR",
                  "Trains a SentencePiece tokenizer (unigram or BPE, with byte "
                  "fallback) on the\nnormalised lines of a corpus and writes "
                  "DIR/tokenizer.model.");
  cl.options()("input", po::value(&inputs)->multitoken()->required(),
               "text files or directories (.gz, .jsonl read as such)")(
    "vocab", po::value(&o.vocab_size)->required(), "vocabulary size")(
    "model", po::value(&model)->default_value("unigram"),
    "unigram or bpe")("out", po::value(&out)->required(), "output directory")(
    "text-field", po::value(&corpus.text_field)->default_value("text"),
    "JSON lines: the field holding the text")(
    "max-sentences", po::value(&o.max_sentences)->default_value(2'000'000),
    "lines sampled for training (0 = all)")(
    "seed", po::value(&o.seed)->default_value(1),
    "sampling seed")("threads", po::value(&o.threads)->default_value(0),
                     "threads (0 = all cores)");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  auto type = tokenizer::parse_model_type(model);
  if (!type.ok())
    return cl.bad(type.message());
  o.type = type.value();
  auto reader = data::corpus_reader::open(
    std::vector<std::filesystem::path>(inputs.begin(), inputs.end()), corpus);
  if (!reader.ok())
    return fail(2, "data tokenizer train: " + reader.message());
  // Lines of normalised documents, one sentence each.
  status read_error;
  data::document doc;
  std::string text;
  std::size_t pos = 0;
  auto next = [&](std::string& sentence) {
    while (true) {
      while (pos < text.size()) {
        auto nl = text.find('\n', pos);
        if (nl == std::string::npos)
          nl = text.size();
        sentence.assign(text, pos, nl - pos);
        pos = nl + 1;
        if (!sentence.empty())
          return true;
      }
      auto more = reader.value().next(doc);
      if (!more.ok() || !more.value()) {
        if (!more.ok())
          read_error = more.error();
        return false;
      }
      auto norm = data::normalize_document(doc.text);
      if (!norm.ok()) {
        read_error = status::error(doc.source.string() + ": document at offset "
                                   + std::to_string(doc.offset) + ": "
                                   + norm.message());
        return false;
      }
      text = std::move(norm.value());
      pos = 0;
    }
  };
  auto s = tokenizer::train(next, o, out);
  if (!read_error.ok())
    return fail(2, "data tokenizer train: " + read_error.message());
  if (!s.ok())
    return fail(2, "data tokenizer train: " + s.message());
  auto tok = tokenizer::tokenizer::load(out);
  if (!tok.ok())
    return fail(1, "data tokenizer train: " + tok.message());
  std::printf("wrote %s/%s: %s %s, vocab %u\n", out.c_str(),
              std::string(tokenizer::model_file_name).c_str(),
              tok.value().kind().c_str(), model.c_str(),
              tok.value().vocab_size());
  return 0;
}

// encode: ids of stdin's text, one line; decode: text of stdin's ids.
int encode_decode(const std::vector<std::string>& args, bool encode) {
  std::string path;
  command_line cl(std::string("data tokenizer ")
                    + (encode ? "encode" : "decode"),
                  "--tokenizer PATH < INPUT",
                  encode ? "Prints the token ids of the text on stdin."
                         : "Prints the text of the token ids on stdin.");
  cl.options()("tokenizer", po::value(&path)->required(),
               "tokenizer.model or a directory holding one");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  auto tok = tokenizer::tokenizer::load(path);
  if (!tok.ok())
    return fail(2, "data tokenizer: " + tok.message());
  std::stringstream in;
  in << std::cin.rdbuf();
  if (encode) {
    auto ids = tok.value().encode(in.str());
    if (!ids.ok())
      return fail(1, "data tokenizer encode: " + ids.message());
    for (std::size_t i = 0; i < ids.value().size(); ++i)
      std::printf(i ? " %d" : "%d", ids.value()[i]);
    std::printf("\n");
    return 0;
  }
  std::vector<std::int32_t> ids;
  for (long long id; in >> id;)
    ids.push_back(static_cast<std::int32_t>(id));
  if (!in.eof())
    return fail(2, "data tokenizer decode: stdin holds something that is "
                   "not a token id");
  auto text = tok.value().decode(ids);
  if (!text.ok())
    return fail(2, "data tokenizer decode: " + text.message());
  std::fwrite(text.value().data(), 1, text.value().size(), stdout);
  return 0;
}

} // namespace

int data_tokenizer(const std::vector<std::string>& args) {
  const std::string usage =
    "subcommands: train --input F... --vocab N --out DIR | encode | decode";
  if (args.empty())
    return fail(2, "data tokenizer: missing subcommand (" + usage + ")");
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "train")
    return train(rest);
  if (args[0] == "encode" || args[0] == "decode")
    return encode_decode(rest, args[0] == "encode");
  if (args[0] == "--help" || args[0] == "-h") {
    std::printf("usage: tutti data tokenizer train|encode|decode [options]\n"
                "'tutti data tokenizer SUBCOMMAND --help' describes each.\n");
    return 0;
  }
  return fail(2, "data tokenizer: unknown subcommand '" + args[0] + "' ("
                   + usage + ")");
}

} // namespace tutti::cli
