#include "mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace tutti::data {

namespace {

status os_error(const std::filesystem::path& path, const char* what) {
  return status::error(path.string() + ": " + what + ": "
                       + std::strerror(errno));
}

} // namespace

expected<mapped_file> mapped_file::open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return os_error(path, "cannot open");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    auto err = os_error(path, "cannot stat");
    ::close(fd);
    return err;
  }
  mapped_file m;
  m.size_ = static_cast<std::size_t>(st.st_size);
  if (m.size_ > 0) { // mmap refuses a length of 0; an empty view is enough
    void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      auto err = os_error(path, "cannot map");
      ::close(fd);
      return err;
    }
    m.data_ = p;
    ::madvise(p, m.size_, MADV_SEQUENTIAL | MADV_WILLNEED); // advice only
  }
  ::close(fd); // the mapping keeps the file
  return m;
}

mapped_file::mapped_file(mapped_file&& other) noexcept
  : data_(std::exchange(other.data_, nullptr)),
    size_(std::exchange(other.size_, 0)) {}

mapped_file& mapped_file::operator=(mapped_file&& other) noexcept {
  if (this != &other) {
    if (data_)
      ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

mapped_file::~mapped_file() {
  if (data_)
    ::munmap(data_, size_);
}

expected<std::uint64_t> read_ahead(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return os_error(path, "cannot open");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    auto err = os_error(path, "cannot stat");
    ::close(fd);
    return err;
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED); // advice only
  ::close(fd);
  return static_cast<std::uint64_t>(st.st_size);
}

} // namespace tutti::data
