#include "file_io.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>
#include <xxhash.h>

namespace tutti::store::detail {
namespace {

std::string io_error(const char* what, const std::filesystem::path& path,
                     std::uint64_t offset, int err) {
  return std::string(what) + " " + path.string() + " at offset "
         + std::to_string(offset) + ": " + std::strerror(err);
}

} // namespace

input_file::input_file(input_file&& other) noexcept
  : path_(std::move(other.path_)), fd_(other.fd_), size_(other.size_) {
  other.fd_ = -1;
}

input_file& input_file::operator=(input_file&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0)
      ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    size_ = other.size_;
    other.fd_ = -1;
  }
  return *this;
}

input_file::~input_file() {
  if (fd_ >= 0)
    ::close(fd_);
}

expected<input_file> input_file::open(const std::filesystem::path& path) {
  input_file f;
  f.path_ = path;
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_ < 0)
    return status::error("cannot open " + path.string() + ": "
                         + std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd_, &st) != 0)
    return status::error("cannot stat " + path.string() + ": "
                         + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return status::error(path.string() + " is not a regular file");
  f.size_ = static_cast<std::uint64_t>(st.st_size);
  return f;
}

status input_file::read_at(std::uint64_t offset, void* dst,
                           std::uint64_t n) const {
  auto* out = static_cast<char*>(dst);
  std::uint64_t done = 0;
  while (done < n) {
    ssize_t got = ::pread(fd_, out + done, n - done,
                          static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR)
        continue;
      return status::error(
        io_error("cannot read", path_, offset + done, errno));
    }
    if (got == 0)
      return status::error(path_.string() + ": truncated at offset "
                           + std::to_string(offset + done) + " (needed "
                           + std::to_string(n) + " bytes from offset "
                           + std::to_string(offset) + ")");
    done += static_cast<std::uint64_t>(got);
  }
  return {};
}

expected<std::uint64_t> input_file::hash_range(std::uint64_t offset,
                                               std::uint64_t n) const {
  XXH64_state_t* state = XXH64_createState();
  if (state == nullptr)
    return status::error("out of memory hashing " + path_.string());
  XXH64_reset(state, 0);
  std::vector<char> buf(std::min<std::uint64_t>(n, 4u << 20));
  for (std::uint64_t done = 0; done < n;) {
    std::uint64_t chunk = std::min<std::uint64_t>(buf.size(), n - done);
    if (auto err = read_at(offset + done, buf.data(), chunk); !err) {
      XXH64_freeState(state);
      return err;
    }
    XXH64_update(state, buf.data(), chunk);
    done += chunk;
  }
  std::uint64_t h = XXH64_digest(state);
  XXH64_freeState(state);
  return h;
}

expected<input_file::pass_hashes> input_file::hash_file(
  const std::vector<std::uint64_t>& cuts) const {
  struct states {
    XXH64_state_t* whole = XXH64_createState();
    XXH64_state_t* seg = XXH64_createState();
    ~states() { XXH64_freeState(whole), XXH64_freeState(seg); }
  } st;
  if (st.whole == nullptr || st.seg == nullptr)
    return status::error("out of memory hashing " + path_.string());
  XXH64_reset(st.whole, 0);
  XXH64_reset(st.seg, 0);
  pass_hashes out;
  std::size_t seg = 0; // segment [cuts[seg], cuts[seg + 1]) being hashed
  std::vector<char> buf(std::min<std::uint64_t>(size_, 4u << 20));
  for (std::uint64_t pos = 0; pos < size_;) {
    std::uint64_t end = pos + std::min<std::uint64_t>(buf.size(), size_ - pos);
    TUTTI_RETURN_IF_ERROR(read_at(pos, buf.data(), end - pos));
    XXH64_update(st.whole, buf.data(), end - pos);
    for (std::uint64_t p = pos; p < end && seg + 1 < cuts.size();) {
      if (p < cuts[seg]) { // bytes before the first segment
        p = std::min(end, cuts[seg]);
        continue;
      }
      std::uint64_t stop = std::min(end, cuts[seg + 1]);
      XXH64_update(st.seg, buf.data() + (p - pos), stop - p);
      p = stop;
      if (p == cuts[seg + 1]) {
        out.segments.push_back(XXH64_digest(st.seg));
        XXH64_reset(st.seg, 0);
        ++seg;
      }
    }
    pos = end;
  }
  // Segments ending at the end of the file (empty ones included) are complete.
  for (; seg + 1 < cuts.size(); ++seg) {
    out.segments.push_back(XXH64_digest(st.seg));
    XXH64_reset(st.seg, 0);
  }
  out.whole = XXH64_digest(st.whole);
  return out;
}

std::string hex64(std::uint64_t v) {
  static const char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4)
    s[i] = digits[v & 0xf];
  return s;
}

bool parse_hex64(const std::string& s, std::uint64_t& out) {
  if (s.size() != 16)
    return false;
  out = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                   : -1;
    if (d < 0)
      return false;
    out = (out << 4) | static_cast<std::uint64_t>(d);
  }
  return true;
}

} // namespace tutti::store::detail
