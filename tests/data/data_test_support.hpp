#pragma once
// Shared by the data and tokenizer tests: a fresh temporary directory, and
// whole files read and written through store/.

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cerrno> // program_invocation_short_name
#include <filesystem>
#include <string>

#include "tutti/store/atomic_file.hpp"

namespace tutti::testing {

// TMPDIR/PROGRAM_PID_NAME, empty; removed with what it holds at the end
// of its scope.
struct temp_dir {
  std::filesystem::path path;
  explicit temp_dir(const std::string& name)
    : path(std::filesystem::temp_directory_path()
           / (std::string(program_invocation_short_name) + "_"
              + std::to_string(::getpid()) + "_" + name)) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
};

// The whole file, which must be readable.
inline std::string slurp(const std::filesystem::path& p) {
  auto r = store::read_file(p);
  REQUIRE(r.ok());
  return r.value();
}

// Writes `bytes` to `p` atomically, making its directory first.
inline void spit(const std::filesystem::path& p, const std::string& bytes) {
  std::filesystem::create_directories(p.parent_path());
  REQUIRE(store::write_file_atomic(p, bytes));
}

// Datasets made twice from one seed (`one`, `two`) hold the same bytes in
// each of `files`; one from another seed (`other`) another first shard.
inline void check_deterministic(const std::filesystem::path& one,
                                const std::filesystem::path& two,
                                const std::filesystem::path& other,
                                std::initializer_list<const char*> files) {
  for (const char* f : files) {
    INFO(f);
    CHECK(slurp(one / f) == slurp(two / f));
  }
  CHECK(slurp(one / "train-00000.tok") != slurp(other / "train-00000.tok"));
}

} // namespace tutti::testing
