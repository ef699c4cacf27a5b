#include "tutti/data/prepare.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "tutti/data/dataset.hpp"
#include "tutti/data/normalize.hpp"
#include "tutti/data/shard_format.hpp"
#include "tutti/store/atomic_file.hpp"
#include "tutti/store/checksum.hpp"
#include "tutti/tokenizer/tokenizer.hpp"

namespace tutti::data {
namespace {

constexpr const char* progress_name = "progress.jsonl";

// Documents of one split that become one shard.
struct chunk {
  std::string split; // "train" or "val"
  std::uint32_t index = 0;
  std::vector<std::string> docs;
  std::string first_source;
  std::uint64_t first_offset = 0;
  std::uint64_t text_bytes = 0;
  std::uint64_t hash = 0; // of the documents' hashes, in order
};

struct shard_record {
  std::string split;
  std::uint32_t index = 0;
  std::uint64_t chunk_hash = 0;
  std::uint64_t documents = 0, tokens = 0, text_bytes = 0;
  std::string first_source;
  std::uint64_t first_offset = 0;
};

nlohmann::ordered_json record_json(const shard_record& r) {
  nlohmann::ordered_json j;
  j["file"] = shard_path("", r.split, r.index).string();
  j["split"] = r.split;
  j["index"] = r.index;
  j["chunk_hash"] = r.chunk_hash;
  j["documents"] = r.documents;
  j["tokens"] = r.tokens;
  j["text_bytes"] = r.text_bytes;
  j["first_document"] = {{"source", r.first_source},
                         {"offset", r.first_offset}};
  return j;
}

std::optional<shard_record> record_from(const nlohmann::json& j) {
  try {
    shard_record r;
    r.split = j.at("split").get<std::string>();
    r.index = j.at("index").get<std::uint32_t>();
    r.chunk_hash = j.at("chunk_hash").get<std::uint64_t>();
    r.documents = j.at("documents").get<std::uint64_t>();
    r.tokens = j.at("tokens").get<std::uint64_t>();
    r.text_bytes = j.at("text_bytes").get<std::uint64_t>();
    r.first_source = j.at("first_document").at("source").get<std::string>();
    r.first_offset = j.at("first_document").at("offset").get<std::uint64_t>();
    return r;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

using record_key = std::pair<std::string, std::uint32_t>;

// The shards an earlier run of the same settings recorded. A torn last line
// (the run died while appending) is ignored: that shard is simply redone.
std::map<record_key, shard_record> read_progress(
  const std::filesystem::path& path, const std::string& settings) {
  std::map<record_key, shard_record> out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f)
    return out;
  std::string text;
  char buf[1 << 16];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;)
    text.append(buf, n);
  std::fclose(f);
  std::size_t pos = 0;
  bool header = true;
  while (pos < text.size()) {
    const auto nl = text.find('\n', pos);
    if (nl == std::string::npos)
      break;
    const auto j = nlohmann::json::parse(text.substr(pos, nl - pos), nullptr,
                                         false);
    pos = nl + 1;
    if (header) {
      if (j.is_discarded() || !j.contains("settings")
          || j["settings"] != settings)
        return {};
      header = false;
      continue;
    }
    if (j.is_discarded())
      continue;
    if (auto r = record_from(j))
      out[{r->split, r->index}] = *r;
  }
  return out;
}

std::string hex(std::uint64_t v) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(v));
  return s;
}

// Everything that changes which shard files a corpus becomes.
std::string settings_hash(const prepare_options& o,
                          const tokenizer::tokenizer& tok) {
  nlohmann::ordered_json j;
  j["format"] = 1;
  j["tokenizer"] = hex(
    store::xxh64(tok.model_bytes().data(), tok.model_bytes().size()));
  j["tokenizer_kind"] = tok.kind();
  j["val_fraction"] = o.val_fraction;
  j["shard_bytes"] = o.shard_bytes;
  j["split_seed"] = o.split_seed;
  j["text_field"] = o.corpus.text_field;
  j["doc_delimiter"] = o.corpus.doc_delimiter;
  const auto s = j.dump();
  return hex(store::xxh64(s.data(), s.size()));
}

// A bounded queue from the reading thread to the tokenizing workers.
class chunk_queue {
public:
  explicit chunk_queue(std::size_t capacity) : capacity_(capacity) {}
  void push(chunk c) {
    std::unique_lock lock(mutex_);
    not_full_.wait(lock, [&] { return items_.size() < capacity_; });
    items_.push_back(std::move(c));
    not_empty_.notify_one();
  }
  bool pop(chunk& out) {
    std::unique_lock lock(mutex_);
    not_empty_.wait(lock, [&] { return !items_.empty() || closed_; });
    if (items_.empty())
      return false;
    out = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return true;
  }
  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    not_empty_.notify_all();
  }

private:
  std::mutex mutex_;
  std::condition_variable not_full_, not_empty_;
  std::deque<chunk> items_;
  std::size_t capacity_;
  bool closed_ = false;
};

class preparer {
public:
  preparer(const prepare_options& o, tokenizer::tokenizer tok)
    : o_(o), tok_(std::move(tok)), queue_(2 * worker_count()) {}

  unsigned worker_count() const {
    return o_.threads ? o_.threads
                      : std::max(1u, std::thread::hardware_concurrency());
  }

  expected<prepare_report> run(corpus_reader& reader) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto dir = o_.out_dir;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
      return status::error("cannot create directory " + dir.string() + ": "
                           + ec.message());
    std::filesystem::remove(dir / "meta.json", ec);
    const auto settings = settings_hash(o_, tok_);
    done_ = read_progress(dir / progress_name, settings);
    if (done_.empty()) {
      TUTTI_RETURN_IF_ERROR(store::write_file_atomic(
        dir / progress_name,
        nlohmann::json{{"settings", settings}}.dump() + "\n"));
    }
    progress_ = std::fopen((dir / progress_name).c_str(), "ab");
    if (!progress_)
      return status::error((dir / progress_name).string() + ": cannot append");

    std::vector<std::thread> workers;
    for (unsigned i = 0; i < worker_count(); ++i)
      workers.emplace_back([this] { work(); });
    status read_status = read_all(reader);
    queue_.close();
    for (auto& w : workers)
      w.join();
    std::fclose(progress_);
    progress_ = nullptr;
    TUTTI_RETURN_IF_ERROR(read_status);
    TUTTI_RETURN_IF_ERROR(first_error_);

    report_.threads = worker_count();
    report_.tokenizer = tok_.kind();
    report_.vocab_size = tok_.vocab_size();
    report_.train_shards = next_index_["train"];
    report_.val_shards = next_index_["val"];
    report_.seconds = std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - t0)
                        .count();
    if (!report_.complete)
      return report_;
    TUTTI_RETURN_IF_ERROR(finish());
    report_.seconds = std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - t0)
                        .count();
    TUTTI_RETURN_IF_ERROR(
      store::write_file_atomic(dir / "report.json", report_to_json(report_)));
    return report_;
  }

private:
  // Reads, normalises, deduplicates and splits documents into chunks.
  status read_all(corpus_reader& reader) {
    std::unordered_set<std::uint64_t> seen;
    std::map<std::string, chunk> open;
    document doc;
    while (true) {
      if (failed())
        return {};
      auto more = reader.next(doc);
      if (!more.ok())
        return more.error();
      if (!more.value())
        break;
      ++report_.documents;
      report_.input_bytes += doc.text.size();
      auto text = normalize_document(doc.text);
      if (!text.ok())
        return status::error(doc.source.string() + ": document at offset "
                             + std::to_string(doc.offset) + ": "
                             + text.message());
      if (text.value().empty()) {
        ++report_.empty;
        continue;
      }
      const auto h = store::xxh64(text.value().data(), text.value().size());
      if (!seen.insert(h).second) {
        ++report_.duplicates;
        continue;
      }
      const auto split_draw = store::xxh64(&h, sizeof h, o_.split_seed + 1);
      const bool held_out = static_cast<double>(split_draw >> 11) * 0x1p-53
                            < o_.val_fraction;
      const std::string split = held_out ? "val" : "train";
      ++(held_out ? report_.val_documents : report_.train_documents);
      report_.text_bytes += text.value().size();
      auto& c = open[split];
      if (c.docs.empty()) {
        c.split = split;
        c.first_source = doc.source.string();
        c.first_offset = doc.offset;
      }
      c.text_bytes += text.value().size();
      c.hash = store::xxh64(&h, sizeof h, c.hash);
      c.docs.push_back(std::move(text.value()));
      if (c.text_bytes >= o_.shard_bytes) {
        if (!dispatch(std::move(c)))
          return {};
        open.erase(split);
      }
    }
    for (const char* split : {"train", "val"})
      if (auto i = open.find(split); i != open.end() && !i->second.docs.empty())
        if (!dispatch(std::move(i->second)))
          return {};
    report_.complete = true;
    return {};
  }

  // Gives a full chunk its shard index and queues it; false if interrupted.
  bool dispatch(chunk c) {
    if (o_.interrupted && o_.interrupted())
      return false;
    c.index = next_index_[c.split]++;
    queue_.push(std::move(c));
    return true;
  }

  bool failed() {
    std::lock_guard lock(mutex_);
    return !first_error_.ok();
  }

  void work() {
    chunk c;
    while (queue_.pop(c)) {
      if (failed())
        continue;
      auto r = shard_of(c);
      std::lock_guard lock(mutex_);
      if (!r.ok()) {
        if (first_error_.ok())
          first_error_ = r.error();
        continue;
      }
      written_[{c.split, c.index}] = r.value();
      (c.split == "train" ? report_.train_tokens
                          : report_.val_tokens) += r.value().tokens;
    }
  }

  expected<shard_record> shard_of(const chunk& c) {
    const auto path = shard_path(o_.out_dir, c.split, c.index);
    if (auto i = done_.find({c.split, c.index});
        i != done_.end() && i->second.chunk_hash == c.hash) {
      auto s = read_shard(path);
      if (s.ok() && s.value().tokens.size() == i->second.tokens
          && s.value().vocab_size == tok_.vocab_size()) {
        std::lock_guard lock(mutex_);
        ++report_.shards_reused;
        return i->second;
      }
    }
    std::vector<std::int32_t> tokens;
    tokens.reserve(c.text_bytes / 3);
    const std::string separator = "\n\n";
    for (const auto& doc : c.docs) {
      auto ids = tok_.encode(doc);
      if (!ids.ok())
        return status::error(path.string() + ": " + ids.message());
      tokens.insert(tokens.end(), ids.value().begin(), ids.value().end());
      if (tok_.eos_id() >= 0)
        tokens.push_back(tok_.eos_id());
      else
        tokens.insert(tokens.end(), separator.begin(), separator.end());
    }
    TUTTI_RETURN_IF_ERROR(write_shard(path, tokens, tok_.vocab_size()));
    shard_record r{c.split,       c.index,      c.hash,         c.docs.size(),
                   tokens.size(), c.text_bytes, c.first_source, c.first_offset};
    // Recorded only once the shard is durable (write_shard fsyncs).
    std::lock_guard lock(mutex_);
    const auto line = record_json(r).dump() + "\n";
    if (std::fwrite(line.data(), 1, line.size(), progress_) != line.size()
        || std::fflush(progress_) != 0)
      return status::error((o_.out_dir / progress_name).string()
                           + ": cannot append");
    return r;
  }

  // Index, tokenizer, meta.json (last), and no stale files.
  status finish() {
    const auto& dir = o_.out_dir;
    for (const char* split : {"train", "val"})
      for (std::uint32_t i = next_index_[split];; ++i) {
        std::error_code ec;
        if (!std::filesystem::remove(shard_path(dir, split, i), ec))
          break;
      }
    nlohmann::ordered_json index;
    index["tokenizer"] = tok_.kind();
    index["vocab_size"] = tok_.vocab_size();
    index["eos_id"] = tok_.eos_id();
    index["shards"] = nlohmann::ordered_json::array();
    for (const auto& [key, r] : written_)
      if (key.first == "train")
        index["shards"].push_back(record_json(r));
    for (const auto& [key, r] : written_)
      if (key.first == "val")
        index["shards"].push_back(record_json(r));
    TUTTI_RETURN_IF_ERROR(
      store::write_file_atomic(dir / "index.json", index.dump(2) + "\n"));
    std::error_code ec;
    std::filesystem::remove(dir / tokenizer::model_file_name, ec);
    TUTTI_RETURN_IF_ERROR(tok_.save(dir));
    dataset_meta meta;
    meta.vocab_size = tok_.vocab_size();
    meta.order = 0;
    meta.seed = o_.split_seed;
    meta.train_tokens = report_.train_tokens;
    meta.val_tokens = report_.val_tokens;
    meta.tokens = meta.train_tokens + meta.val_tokens;
    meta.train_shards = report_.train_shards;
    meta.val_shards = report_.val_shards;
    meta.source = tok_.kind();
    TUTTI_RETURN_IF_ERROR(write_meta(dir, meta));
    std::filesystem::remove(dir / progress_name, ec);
    return {};
  }

  const prepare_options& o_;
  tokenizer::tokenizer tok_;
  chunk_queue queue_;
  std::mutex mutex_;
  status first_error_;
  std::FILE* progress_ = nullptr;
  std::map<record_key, shard_record> done_;
  std::map<record_key, shard_record> written_;
  std::map<std::string, std::uint32_t> next_index_{{"train", 0}, {"val", 0}};
  prepare_report report_;
};

} // namespace

double prepare_report::bytes_per_token() const {
  const auto t = train_tokens + val_tokens;
  return t ? static_cast<double>(text_bytes) / static_cast<double>(t) : 0;
}

double prepare_report::megabytes_per_second() const {
  return seconds > 0 ? static_cast<double>(input_bytes) / 1e6 / seconds : 0;
}

std::string report_to_json(const prepare_report& r) {
  nlohmann::ordered_json j;
  j["complete"] = r.complete;
  j["documents"] = r.documents;
  j["empty_dropped"] = r.empty;
  j["duplicates_dropped"] = r.duplicates;
  j["train_documents"] = r.train_documents;
  j["val_documents"] = r.val_documents;
  j["train_tokens"] = r.train_tokens;
  j["val_tokens"] = r.val_tokens;
  j["input_bytes"] = r.input_bytes;
  j["text_bytes"] = r.text_bytes;
  j["bytes_per_token"] = r.bytes_per_token();
  j["train_shards"] = r.train_shards;
  j["val_shards"] = r.val_shards;
  j["shards_reused"] = r.shards_reused;
  j["tokenizer"] = r.tokenizer;
  j["vocab_size"] = r.vocab_size;
  j["threads"] = r.threads;
  j["seconds"] = r.seconds;
  j["megabytes_per_second"] = r.megabytes_per_second();
  return j.dump(2) + "\n";
}

expected<prepare_report> prepare_corpus(const prepare_options& options) {
  if (!(options.val_fraction >= 0.0 && options.val_fraction < 1.0))
    return status::error("val_fraction must be in [0, 1), got "
                         + std::to_string(options.val_fraction));
  if (options.shard_bytes == 0)
    return status::error(std::string("shard size must be > 0"));
  auto tok = options.tokenizer.empty()
               ? expected<tokenizer::tokenizer>(tokenizer::tokenizer::bytes())
               : tokenizer::tokenizer::load(options.tokenizer);
  if (!tok.ok())
    return tok.error();
  auto reader = corpus_reader::open(options.inputs, options.corpus);
  if (!reader.ok())
    return reader.error();
  preparer p(options, std::move(tok.value()));
  return p.run(reader.value());
}

} // namespace tutti::data
