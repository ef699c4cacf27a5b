#include "tutti/store/atomic_file.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tutti::store {
namespace {

std::string errno_message(std::string_view what,
                          const std::filesystem::path& path, int err) {
  return std::string(what) + " " + path.string() + ": " + std::strerror(err);
}

// Closes the descriptor on every path out of a function.
struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

status write_all(int fd, const std::byte* data, std::size_t size,
                 const std::filesystem::path& path) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return status::error(errno_message("cannot write", path, errno));
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return {};
}

status write_and_sync(const std::filesystem::path& tmp,
                      std::span<const std::span<const std::byte>> parts) {
  fd_guard f{
    ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (f.fd < 0)
    return status::error(errno_message("cannot create", tmp, errno));
  for (auto bytes : parts)
    if (auto err = write_all(f.fd, bytes.data(), bytes.size(), tmp); !err)
      return err;
  if (::fsync(f.fd) != 0)
    return status::error(errno_message("cannot fsync", tmp, errno));
  int fd = f.fd;
  f.fd = -1;
  // close() can report a deferred write error (e.g. on NFS).
  if (::close(fd) != 0)
    return status::error(errno_message("cannot close", tmp, errno));
  return {};
}

} // namespace

status fsync_directory(const std::filesystem::path& dir) {
  fd_guard d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd < 0)
    return status::error(errno_message("cannot open directory", dir, errno));
  if (::fsync(d.fd) != 0)
    return status::error(errno_message("cannot fsync directory", dir, errno));
  return {};
}

status write_file_atomic(const std::filesystem::path& path,
                         std::span<const std::byte> bytes) {
  return write_file_atomic_parts(path, std::span(&bytes, 1));
}

status write_file_atomic_parts(
  const std::filesystem::path& path,
  std::span<const std::span<const std::byte>> parts) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  if (auto err = write_and_sync(tmp, parts); !err) {
    ::unlink(tmp.c_str());
    return err;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return status::error(
      errno_message("cannot rename " + tmp.string() + " to", path, err));
  }
  std::filesystem::path dir = path.parent_path();
  return fsync_directory(dir.empty() ? std::filesystem::path(".") : dir);
}

status write_file_atomic(const std::filesystem::path& path,
                         std::string_view bytes) {
  return write_file_atomic(
    path, std::as_bytes(std::span(bytes.data(), bytes.size())));
}

status create_directories_durable(const std::filesystem::path& dir) {
  if (dir.empty())
    return {};
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec))
    return {};
  std::filesystem::path parent = dir.parent_path();
  if (auto err = create_directories_durable(parent); !err)
    return err;
  if (::mkdir(dir.c_str(), 0755) != 0) {
    if (errno != EEXIST)
      return status::error(
        errno_message("cannot create directory", dir, errno));
    if (!std::filesystem::is_directory(dir, ec))
      return status::error(
        errno_message("cannot create directory", dir, ENOTDIR));
  }
  // The new entry lives in the parent; only its fsync makes it durable.
  return fsync_directory(parent.empty() ? std::filesystem::path(".") : parent);
}

expected<std::string> read_file(const std::filesystem::path& path) {
  fd_guard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0)
    return status::error(errno_message("cannot open", path, errno));
  std::string out;
  struct stat st {};
  if (::fstat(f.fd, &st) == 0 && st.st_size > 0)
    out.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return status::error(errno_message("cannot read", path, errno));
    }
    if (n == 0)
      break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

} // namespace tutti::store
