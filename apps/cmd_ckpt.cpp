// tutti ckpt list RUN_DIR | verify CHECKPOINT_DIR | show CHECKPOINT_DIR|SHARD

#include <cstdio>
#include <ctime>
#include <filesystem>

#include "command_line.hpp"
#include "commands.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/job_store.hpp"

namespace tutti::cli {

namespace {

namespace fs = std::filesystem;

std::string local_time(int64_t unix_ms) {
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int list(const fs::path& run_dir) {
  auto db = store::job_store::open(run_dir / "state");
  if (!db.ok())
    return fail(1, "ckpt list: " + db.message());
  auto all = db.value()->checkpoints();
  if (!all.ok())
    return fail(1, "ckpt list: " + all.message());
  std::printf("%10s %14s  %-20s  %s\n", "step", "bytes", "committed", "dir");
  for (const auto& c : all.value())
    std::printf("%10lld %14lld  %-20s  %s\n", static_cast<long long>(c.step),
                static_cast<long long>(c.bytes),
                local_time(c.time_unix_ms).c_str(), c.dir.c_str());
  if (all.value().empty())
    std::printf("(no committed checkpoint in %s)\n", run_dir.c_str());
  return 0;
}

int verify(const fs::path& dir) {
  if (auto err = store::verify_checkpoint(dir); !err)
    return fail(1, "ckpt verify: " + err.message());
  auto m = store::read_manifest(dir);
  std::printf("%s: ok (%zu shards, every hash verified)\n", dir.c_str(),
              m.ok() ? m.value().shards.size() : size_t{0});
  return 0;
}

int show_shard(const fs::path& file) {
  auto f = store::read_shard_file(file, true);
  if (!f.ok())
    return fail(1, "ckpt show: " + f.message());
  const auto& meta = f.value().meta;
  std::printf("%s: rank %lld, step %lld, epoch %lld\n", file.c_str(),
              static_cast<long long>(meta.rank),
              static_cast<long long>(meta.step),
              static_cast<long long>(meta.epoch));
  for (const auto& [k, v] : meta.ints)
    std::printf("  %s = %lld\n", k.c_str(), static_cast<long long>(v));
  for (const auto& [k, v] : meta.strings)
    std::printf("  %s = %s\n", k.c_str(), v.c_str());
  std::printf("  %-64s %-18s %-5s %s\n", "tensor", "shape", "dtype", "xxh64");
  for (const auto& t : f.value().tensors) {
    std::string shape = "[";
    for (size_t i = 0; i < t.shape.size(); ++i)
      shape += (i ? "," : "") + std::to_string(t.shape[i]);
    shape += "]";
    std::printf("  %-64s %-18s %-5s %016llx\n", t.name.c_str(), shape.c_str(),
                t.dtype.c_str(), static_cast<unsigned long long>(t.xxh64));
  }
  return 0;
}

const char* ckpt_usage =
  "list RUN_DIR | verify CHECKPOINT_DIR | show CHECKPOINT_DIR|SHARD_FILE";

int show(const fs::path& target) {
  if (!fs::is_directory(target))
    return show_shard(target);
  auto m = store::read_manifest(target);
  if (!m.ok())
    return fail(1, "ckpt show: " + m.message());
  int status = 0;
  for (const auto& s : m.value().shards)
    status |= show_shard(target / s.file);
  return status;
}

struct subcommand {
  const char* name;
  const char* operand;
  const char* about;
  int (*act)(const fs::path&);
  bool must_exist;
};

const subcommand subcommands[] = {
  {"list", "RUN_DIR", "committed checkpoints (step, size, time)", list, false},
  {"verify", "CHECKPOINT_DIR", "check every hash of a checkpoint", verify,
   true},
  {"show", "CHECKPOINT_DIR|SHARD_FILE",
   "a shard's tensors (name, shape, dtype, hash)", show, true},
};

std::string ckpt_about() {
  std::string out = "subcommands:\n";
  for (const auto& sub : subcommands)
    out += std::string("  ") + sub.name + " " + sub.operand + "\n      "
           + sub.about + "\n";
  return out + "'tutti ckpt SUBCOMMAND --help' describes each.";
}

} // namespace

int ckpt_command(const std::vector<std::string>& args) {
  const std::string usage_error = std::string("ckpt: usage: tutti ckpt ")
                                  + ckpt_usage;
  if (args.empty())
    return fail(2, usage_error);
  if (args[0] == "--help" || args[0] == "-h") {
    command_line cl("ckpt", ckpt_usage, ckpt_about());
    po::variables_map vm;
    return cl.parse(args, vm).value_or(0);
  }
  for (const auto& sub : subcommands) {
    if (args[0] != sub.name)
      continue;
    command_line cl(std::string("ckpt ") + sub.name, sub.operand, sub.about);
    cl.positional("target");
    po::variables_map vm;
    if (auto done = cl.parse({args.begin() + 1, args.end()}, vm))
      return *done;
    if (!vm.count("target"))
      return fail(2, usage_error);
    const fs::path target = vm["target"].as<std::string>();
    if (sub.must_exist && !fs::exists(target))
      return fail(2, "ckpt " + args[0] + ": " + target.string()
                       + ": no such file or directory");
    return sub.act(target);
  }
  if (!args[0].empty() && args[0][0] == '-')
    return fail(2, "ckpt: unknown option '" + args[0] + "' ("
                     + usage_error.substr(6) + ")");
  return fail(2, "ckpt: unknown subcommand '" + args[0]
                   + "' (list, verify or show)");
}

} // namespace tutti::cli
