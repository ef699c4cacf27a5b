#include "tutti/lifecycle/environment.hpp"

#include <link.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "tutti/data/dataset.hpp"
#include "tutti/lifecycle/checkpoint_tiers.hpp"
#include "tutti/store/checksum.hpp"

namespace tutti::lifecycle {

namespace fs = std::filesystem;

namespace {

std::string hex(const unsigned char* bytes, size_t n) {
  std::string out;
  char buf[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", bytes[i]);
    out += buf;
  }
  return out;
}

// The main program's NT_GNU_BUILD_ID note (the first object
// dl_iterate_phdr visits is the program itself).
int find_build_id(dl_phdr_info* info, size_t, void* out) {
  auto& id = *static_cast<std::string*>(out);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE)
      continue;
    auto* at = reinterpret_cast<const unsigned char*>(info->dlpi_addr
                                                      + ph.p_vaddr);
    const auto* end = at + ph.p_memsz;
    while (at + sizeof(ElfW(Nhdr)) <= end) {
      const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(at);
      const auto* name = at + sizeof(ElfW(Nhdr));
      const auto* desc = name + ((note->n_namesz + 3) & ~3u);
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4
          && std::memcmp(name, "GNU", 4) == 0) {
        id = hex(desc, note->n_descsz);
        return 1;
      }
      at = desc + ((note->n_descsz + 3) & ~3u);
    }
  }
  return 1; // only the program itself
}

std::string build_id() {
  if (const char* forced = std::getenv("TUTTI_BUILD_ID"); forced && *forced)
    return forced;
  std::string id;
  dl_iterate_phdr(find_build_id, &id);
  return id.empty() ? "unknown" : id;
}

// The file behind the first mapping whose name starts with one of
// `prefixes`, symlinks resolved (its name carries the version).
std::string loaded_library(const std::vector<std::string>& prefixes) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos)
      continue;
    const fs::path file = line.substr(slash);
    const auto name = file.filename().string();
    for (const auto& p : prefixes)
      if (name.rfind(p, 0) == 0) {
        std::error_code ec;
        auto real = fs::canonical(file, ec);
        return (ec ? file : real).filename().string();
      }
  }
  return "not loaded";
}

std::string first_line(const fs::path& file, const std::string& otherwise) {
  std::ifstream in(file);
  std::string line;
  return std::getline(in, line) && !line.empty() ? line : otherwise;
}

// The image this program was installed in (see environment.hpp).
std::string image_digest() {
  if (const char* forced = std::getenv("TUTTI_IMAGE_DIGEST"); forced && *forced)
    return forced;
  std::error_code ec;
  const auto program = fs::read_symlink("/proc/self/exe", ec);
  if (ec)
    return "unknown";
  return first_line(program.parent_path().parent_path() / "image-digest",
                    "none");
}

std::string os_name() {
  std::string pretty;
  std::ifstream release("/etc/os-release");
  std::string line;
  while (std::getline(release, line))
    if (line.rfind("PRETTY_NAME=", 0) == 0) {
      pretty = line.substr(12);
      pretty.erase(std::remove(pretty.begin(), pretty.end(), '"'),
                   pretty.end());
    }
  utsname u{};
  if (uname(&u) == 0)
    pretty += std::string(pretty.empty() ? "" : ", ") + u.sysname + " "
              + u.release;
  return pretty.empty() ? "unknown" : pretty;
}

// xxh64 over 1 MiB blocks' hashes: large shards need no more memory.
std::string file_checksum(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in)
    return "missing";
  std::vector<char> block(1 << 20);
  std::vector<uint64_t> hashes;
  while (in) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    const auto got = static_cast<size_t>(in.gcount());
    if (got == 0)
      break;
    hashes.push_back(store::xxh64(block.data(), got));
  }
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(store::xxh64(
                  hashes.data(), hashes.size() * sizeof(uint64_t))));
  return buf;
}

std::string gigabytes_free(const fs::path& dir) {
  auto free = free_bytes(dir);
  if (!free)
    return "unknown";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", static_cast<double>(*free) / 1e9);
  return buf;
}

} // namespace

environment node_environment(const job_config& cfg,
                             const std::string& blas_core) {
  environment env;
  env.emplace_back("build_id", build_id());
  env.emplace_back("image", image_digest());
  env.emplace_back("caf", loaded_library({"libcaf_core"}));
  env.emplace_back("gloo", loaded_library({"libgloo"}));
  env.emplace_back("nccl", loaded_library({"libnccl"}));
  env.emplace_back("cuda_runtime", loaded_library({"libcudart"}));
  env.emplace_back("cuda_driver",
                   first_line("/proc/driver/nvidia/version", "none"));
  env.emplace_back("blas", loaded_library({"libopenblas", "libblas"}));
  env.emplace_back("blas_core", blas_core.empty() ? "unknown" : blas_core);
  env.emplace_back("os", os_name());
  // The files the loaders read: meta.json and every shard it lists.
  const fs::path data = cfg.data.dir;
  env.emplace_back("data/meta.json", file_checksum(data / "meta.json"));
  if (auto meta = data::read_meta(data)) {
    for (uint32_t i = 0; i < meta->train_shards; ++i) {
      const auto shard = data::shard_path(data, "train", i);
      env.emplace_back("data/" + shard.filename().string(),
                       file_checksum(shard));
    }
    if (cfg.train.eval_sequences > 0)
      for (uint32_t i = 0; i < meta->val_shards; ++i) {
        const auto shard = data::shard_path(data, "val", i);
        env.emplace_back("data/" + shard.filename().string(),
                         file_checksum(shard));
      }
  }
  env.emplace_back("free_disk.data", gigabytes_free(data));
  env.emplace_back("free_disk.checkpoints",
                   gigabytes_free(cfg.checkpoint.root(cfg.run)));
  return env;
}

std::vector<std::string> environment_lines(const environment& env) {
  std::vector<std::string> out;
  for (const auto& [k, v] : env)
    out.push_back(k + "=" + v);
  return out;
}

environment parse_environment(const std::vector<std::string>& lines) {
  environment env;
  for (const auto& line : lines) {
    const auto eq = line.find('=');
    if (eq != std::string::npos)
      env.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  return env;
}

std::string environment_difference(const environment& reference,
                                   const std::string& reference_name,
                                   const environment& other,
                                   const std::string& other_name) {
  std::map<std::string, std::string> theirs(other.begin(), other.end());
  std::map<std::string, std::string> ours(reference.begin(), reference.end());
  auto compared = [](const std::string& k) {
    return k.rfind("free_disk.", 0) != 0;
  };
  auto differs = [&](const std::string& key, const std::string& a,
                     const std::string& b) {
    return key + ": " + a + " on " + reference_name + ", " + b + " on "
           + other_name;
  };
  for (const auto& [key, value] : reference) {
    if (!compared(key))
      continue;
    auto it = theirs.find(key);
    const auto there = it == theirs.end() ? std::string("missing") : it->second;
    if (there != value)
      return differs(key, value, there);
  }
  for (const auto& [key, value] : other)
    if (compared(key) && !ours.count(key))
      return differs(key, "missing", value);
  return "";
}

std::string environment_table(
  const std::vector<std::pair<std::string, environment>>& nodes) {
  std::vector<std::string> rows;
  std::vector<std::map<std::string, std::string>> columns;
  for (const auto& [name, env] : nodes) {
    columns.emplace_back(env.begin(), env.end());
    for (const auto& [k, v] : env)
      if (std::find(rows.begin(), rows.end(), k) == rows.end())
        rows.push_back(k);
  }
  size_t key_width = 9;
  for (const auto& r : rows)
    key_width = std::max(key_width, r.size());
  std::vector<size_t> widths;
  for (size_t c = 0; c < nodes.size(); ++c) {
    size_t w = nodes[c].first.size();
    for (const auto& [k, v] : columns[c])
      w = std::max(w, v.size());
    widths.push_back(w);
  }
  std::string out, line;
  auto cell = [&](const std::string& text, size_t width) {
    line += "  " + text
            + std::string(width - std::min(width, text.size()), ' ');
  };
  auto end_line = [&] {
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
    line.clear();
  };
  cell("component", key_width);
  for (size_t c = 0; c < nodes.size(); ++c)
    cell(nodes[c].first, widths[c]);
  end_line();
  for (const auto& r : rows) {
    cell(r, key_width);
    for (size_t c = 0; c < nodes.size(); ++c) {
      auto it = columns[c].find(r);
      cell(it == columns[c].end() ? "missing" : it->second, widths[c]);
    }
    end_line();
  }
  return out;
}

} // namespace tutti::lifecycle
