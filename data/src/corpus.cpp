#include "tutti/data/corpus.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include <nlohmann/json.hpp>

namespace tutti::data {
namespace {

bool has_suffix(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size()
         && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// One file through zlib: plain files pass through unchanged (gzread's
// transparent mode), .gz files are decompressed as they stream.
class byte_stream {
public:
  ~byte_stream() { close(); }

  status open(const std::filesystem::path& path) {
    close();
    path_ = path;
    offset_ = 0;
    begin_ = end_ = 0;
    eof_ = false;
    file_ = gzopen(path.c_str(), "rb");
    if (!file_)
      return status::error(path.string()
                           + ": cannot open: " + std::strerror(errno));
    if (gzbuffer(file_, 1 << 20) != 0)
      return status::error(path.string() + ": zlib refused a 1 MiB buffer");
    compressed_ = has_suffix(path.string(), ".gz");
    return {};
  }

  void close() {
    if (file_)
      gzclose(file_);
    file_ = nullptr;
  }

  // Offset (uncompressed) of the next byte next_line/read_rest returns.
  std::uint64_t offset() const { return offset_; }

  // One line without its '\n'; false at the end of the stream.
  expected<bool> next_line(std::string& line) {
    line.clear();
    while (true) {
      if (begin_ == end_) {
        auto more = fill();
        if (!more.ok())
          return more.error();
        if (!more.value())
          return !line.empty();
      }
      const char* start = buffer_.data() + begin_;
      const auto* nl = static_cast<const char*>(
        std::memchr(start, '\n', end_ - begin_));
      const std::size_t take = nl ? std::size_t(nl - start) : end_ - begin_;
      line.append(start, take);
      begin_ += take;
      offset_ += take;
      if (nl) {
        ++begin_;
        ++offset_;
        return true;
      }
    }
  }

  status read_rest(std::string& out) {
    out.clear();
    while (true) {
      out.append(buffer_.data() + begin_, end_ - begin_);
      offset_ += end_ - begin_;
      begin_ = end_;
      auto more = fill();
      if (!more.ok())
        return more.error();
      if (!more.value())
        return {};
    }
  }

private:
  expected<bool> fill() {
    if (eof_)
      return false;
    if (compressed_ && offset_ == 0 && gzdirect(file_))
      return status::error(path_.string()
                           + ": not gzip data at offset 0 (named .gz)");
    const int n = gzread(file_, buffer_.data(),
                         static_cast<unsigned>(buffer_.size()));
    int code = Z_OK;
    const char* text = gzerror(file_, &code);
    if (n < 0 || (code != Z_OK && code != Z_STREAM_END)) {
      // Z_BUF_ERROR at the end is zlib's "unexpected end of file".
      return status::error(
        path_.string() + ": "
        + (compressed_ ? "corrupt or truncated gzip data" : "read error")
        + " at offset " + std::to_string(offset_ + std::max(n, 0))
        + (compressed_ ? " (uncompressed)" : "") + ": " + text);
    }
    begin_ = 0;
    end_ = static_cast<std::size_t>(n);
    if (n == 0)
      eof_ = true;
    return n > 0;
  }

  std::filesystem::path path_;
  gzFile file_ = nullptr;
  bool compressed_ = false;
  bool eof_ = false;
  std::string buffer_ = std::string(1 << 20, '\0');
  std::size_t begin_ = 0, end_ = 0;
  std::uint64_t offset_ = 0;
};

bool is_json_lines(const std::filesystem::path& p) {
  std::string name = p.filename().string();
  if (has_suffix(name, ".gz"))
    name.resize(name.size() - 3);
  return has_suffix(name, ".jsonl") || has_suffix(name, ".json");
}

} // namespace

struct corpus_reader::state {
  corpus_options options;
  std::vector<std::filesystem::path> files;
  std::uint64_t disk_bytes = 0;
  std::size_t next_file = 0;
  bool open = false; // stream holds files[next_file - 1]
  bool json = false;
  byte_stream stream;
  std::string line;
  std::uint64_t line_number = 0;
  bool whole_file_read = false;

  // The next document of the open file; false when the file is done.
  expected<bool> next_in_file(document& out) {
    const auto& path = files[next_file - 1];
    out.source = path;
    if (json) {
      while (true) {
        out.offset = stream.offset();
        auto more = stream.next_line(line);
        if (!more.ok())
          return more.error();
        if (!more.value())
          return false;
        ++line_number;
        if (line.find_first_not_of(" \t\r") == std::string::npos)
          continue;
        const auto j = nlohmann::json::parse(line, nullptr, false);
        const auto where = path.string() + ": line "
                           + std::to_string(line_number) + " (offset "
                           + std::to_string(out.offset) + "): ";
        if (j.is_discarded())
          return status::error(where + "not valid JSON");
        if (!j.is_object() || !j.contains(options.text_field)
            || !j[options.text_field].is_string())
          return status::error(where + "no string field \"" + options.text_field
                               + "\"");
        out.text = j[options.text_field].get<std::string>();
        return true;
      }
    }
    if (options.doc_delimiter.empty()) {
      if (whole_file_read)
        return false;
      whole_file_read = true;
      out.offset = 0;
      if (auto err = stream.read_rest(out.text); !err)
        return err;
      return true;
    }
    out.text.clear();
    out.offset = stream.offset();
    bool any = false;
    while (true) {
      auto more = stream.next_line(line);
      if (!more.ok())
        return more.error();
      if (!more.value())
        return any;
      any = true;
      if (line == options.doc_delimiter
          || (line.size() == options.doc_delimiter.size() + 1
              && line.back() == '\r'
              && line.compare(0, line.size() - 1, options.doc_delimiter) == 0))
        return true;
      out.text += line;
      out.text += '\n';
    }
  }
};

corpus_reader::corpus_reader() : state_(std::make_unique<state>()) {}
corpus_reader::corpus_reader(corpus_reader&&) noexcept = default;
corpus_reader& corpus_reader::operator=(corpus_reader&&) noexcept = default;
corpus_reader::~corpus_reader() = default;

expected<corpus_reader> corpus_reader::open(
  const std::vector<std::filesystem::path>& inputs, corpus_options options) {
  corpus_reader r;
  r.state_->options = std::move(options);
  auto& files = r.state_->files;
  for (const auto& input : inputs) {
    std::error_code ec;
    if (std::filesystem::is_directory(input, ec)) {
      std::vector<std::filesystem::path> found;
      for (auto it = std::filesystem::recursive_directory_iterator(input, ec);
           !ec && it != std::filesystem::recursive_directory_iterator();
           it.increment(ec))
        if (it->is_regular_file(ec))
          found.push_back(it->path());
      if (ec)
        return status::error(input.string() + ": cannot list: " + ec.message());
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (std::filesystem::is_regular_file(input, ec)) {
      files.push_back(input);
    } else {
      return status::error(input.string() + ": no such file or directory");
    }
  }
  if (files.empty())
    return status::error(std::string("the inputs hold no files"));
  for (const auto& f : files) {
    std::error_code ec;
    r.state_->disk_bytes += std::filesystem::file_size(f, ec);
  }
  return r;
}

const std::vector<std::filesystem::path>& corpus_reader::files() const {
  return state_->files;
}

std::uint64_t corpus_reader::disk_bytes() const { return state_->disk_bytes; }

expected<bool> corpus_reader::next(document& out) {
  auto& st = *state_;
  while (true) {
    if (st.open) {
      auto got = st.next_in_file(out);
      if (!got.ok())
        return got.error();
      if (got.value())
        return true;
      st.stream.close();
      st.open = false;
    }
    if (st.next_file == st.files.size())
      return false;
    const auto& path = st.files[st.next_file++];
    if (auto err = st.stream.open(path); !err)
      return err;
    st.open = true;
    st.json = is_json_lines(path);
    st.line_number = 0;
    st.whole_file_read = false;
  }
}

} // namespace tutti::data
