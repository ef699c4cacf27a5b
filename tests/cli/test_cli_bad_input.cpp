// The `tutti` command line on bad input: exit status 2, exactly one line
// "tutti: ..." naming what is wrong, and nothing written (no run dir, no
// output dir). Plus the `data prepare` happy path, and --help on every
// command.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "test_support.hpp"
#include "tutti/data/dataset.hpp"
#include "tutti/data/shard_format.hpp"
#include "tutti/kernels/device_memory.hpp"

namespace fs = std::filesystem;
using namespace tutti::testing;

namespace {

// A shell-quoted path.
std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

// Runs a tutti command line that must be refused as bad input: status 2,
// one line that starts with "tutti: " and contains each of `needles`.
std::string expect_refusal(const std::string& args,
                           const std::vector<std::string>& needles) {
  auto r = run(tutti_bin() + " " + args, 60);
  INFO("tutti " << args << "\n---\n" << r.output << "---");
  CHECK(r.status == 2);
  CHECK(r.output.rfind("tutti: ", 0) == 0);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  CHECK((!r.output.empty() && r.output.back() == '\n'));
  for (const auto& n : needles)
    CHECK_THAT(r.output, Catch::Matchers::Contains(n));
  return r.output;
}

// A synthetic dataset in `dir` (train-00000/1.tok, val-00000.tok).
void synth(const fs::path& dir) {
  auto r = run(tutti_bin() + " data synth --out " + q(dir)
                 + " --vocab 32 --seed 5 --tokens 20000",
               60);
  INFO(r.output);
  REQUIRE(r.status == 0);
}

// One synthetic dataset for the whole process (a Catch2 test case re-runs
// its body for each section; tests copy it before damaging it).
const fs::path& pristine_data() {
  static const fs::path data = [] {
    auto d = scratch("cli_bad_input/pristine") / "data";
    synth(d);
    return d;
  }();
  return data;
}

void copy_dir(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  fs::copy(from, to, fs::copy_options::recursive);
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
  REQUIRE(out.good());
}

} // namespace

TEST_CASE("bad configs: status 2, one line, no run dir", "[unit]") {
  auto dir = scratch("cli_bad_input/configs");
  const auto& data = pristine_data();
  auto run_dir = dir / "run";
  const auto good = small_config(data.string(), run_dir.string(), 2, 3);

  struct bad {
    std::string name, from, to;
    std::vector<std::string> needles;
  };
  const std::vector<bad> cases = {
    {"unknown key",
     "  hidden_size: 32",
     "  hidden_size: 32\n  hiden_size: 32",
     {"model.hiden_size", "unknown"}},
    {"wrong type",
     "  hidden_size: 32",
     "  hidden_size: abc",
     {"model.hidden_size", "integer"}},
    {"top_k > experts",
     "  router_top_k: 2",
     "  router_top_k: 5",
     {"moe_config.router_top_k"}},
    {"world mismatch",
     "  nproc_per_node: 2",
     "  nproc_per_node: 3",
     {"cluster_config.world_size"}},
    {"unknown section",
     "data:",
     "optimizer:\n  lr: 1\ndata:",
     {"optimizer", "unknown section"}},
    {"missing key", "  num_experts: 4", "", {"moe_config.num_experts"}},
    {"invalid YAML", "  vocab_size: 32", "  vocab_size: [32", {"YAML"}},
  };
  for (const auto& c : cases) {
    SECTION(c.name) {
      auto cfg = dir / "bad.yaml";
      write_text(cfg, replace_line(good, c.from, c.to));
      auto out = expect_refusal("run " + q(cfg), c.needles);
      CHECK_THAT(out, Catch::Matchers::Contains("config"));
      CHECK_FALSE(fs::exists(run_dir));
    }
  }
}

TEST_CASE("a GPU job where no GPU answers: status 2, one line, no run dir",
          "[unit]") {
  if (tutti::kernels::cuda_device_available()) {
    WARN("a GPU answers here: the refusal is not exercised");
    return;
  }
  auto dir = scratch("cli_bad_input/no_gpu");
  auto run_dir = dir / "run";
  auto cfg = dir / "gpu.yaml";
  write_text(cfg, replace_line(small_config(pristine_data().string(),
                                            run_dir.string(), 2, 3),
                               "  ep_size: 2", "  ep_size: 2\n  device: cuda"));
  expect_refusal("run " + q(cfg), {"cluster_config.device", "cuda"});
  CHECK_FALSE(fs::exists(run_dir));
}

TEST_CASE("command line misuse: status 2, one line", "[unit]") {
  auto dir = scratch("cli_bad_input/misuse");
  SECTION("missing config file") {
    auto missing = dir / "no-such.yaml";
    expect_refusal("run " + q(missing), {missing.string()});
  }
  SECTION("unknown command") { expect_refusal("trian", {"trian"}); }
  SECTION("run without a config") { expect_refusal("run", {"CONFIG"}); }
  SECTION("report without --out, or of a directory that is no run") {
    expect_refusal("report " + q(dir), {"--out"});
    expect_refusal("report " + q(dir) + " --out " + q(dir / "r.html"),
                   {(dir / "metrics.jsonl").string()});
    CHECK_FALSE(fs::exists(dir / "r.html"));
  }
  SECTION("run with an unknown option") {
    expect_refusal("run x.yaml --fast", {"--fast"});
  }
  SECTION("unknown data subcommand") {
    expect_refusal("data shuffle", {"shuffle"});
  }
  SECTION("data synth without --out") {
    expect_refusal("data synth --vocab 32 --seed 1 --tokens 100", {"out"});
  }
  SECTION("data synth with order 3") {
    auto out = dir / "synth3";
    expect_refusal("data synth --out " + q(out)
                     + " --vocab 32 --seed 1 --tokens 1000 --order 3",
                   {"order"});
    CHECK_FALSE(fs::exists(out / "meta.json"));
  }
  SECTION("data synth with a vocabulary of 1") {
    auto out = dir / "synth-v1";
    expect_refusal("data synth --out " + q(out)
                     + " --vocab 1 --seed 1 --tokens 1000",
                   {"vocab"});
    CHECK_FALSE(fs::exists(out / "meta.json"));
  }
  SECTION("data synth with a held-out share of 1.5") {
    auto out = dir / "synth-val";
    expect_refusal("data synth --out " + q(out)
                     + " --vocab 32 --seed 1 --tokens 1000 --val-fraction 1.5",
                   {"val_fraction"});
    CHECK_FALSE(fs::exists(out / "meta.json"));
  }
  SECTION("data synth with a non-number") {
    expect_refusal("data synth --out " + q(dir / "synth-nan")
                     + " --vocab many --seed 1 --tokens 1000",
                   {"vocab"});
  }
  SECTION("data prepare with a missing input") {
    auto out = dir / "prepared";
    auto present = dir / "present.txt";
    write_text(present, "some text that exists\n");
    auto missing = dir / "absent.txt";
    expect_refusal("data prepare --input " + q(present) + " " + q(missing)
                     + " --out " + q(out),
                   {missing.string()});
    CHECK_FALSE(fs::exists(out / "meta.json"));
  }
  SECTION("an affinity plan for a model it cannot predict") {
    auto cfg = dir / "deepseek.yaml";
    fs::copy_file(fs::path(source_dir()) / "configs" / "medium-deepseek.yaml", cfg,
                  fs::copy_options::overwrite_existing);
    expect_refusal("placement plan " + q(cfg) + " --stats " + q(dir / "s.json")
                     + " --method affinity --model " + q(dir),
                   {"model.kv_lora_rank", "--method affinity"});
  }
  SECTION("no command at all") {
    auto r = run(tutti_bin(), 60);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Catch::Matchers::Contains("usage"));
  }
}

TEST_CASE("bad data: status 2, names the shard and offset, no run dir",
          "[unit]") {
  auto dir = scratch("cli_bad_input/data");
  const auto& pristine = pristine_data();

  // Each case gets its own copy of the data with one defect.
  auto attempt = [&](const std::string& name, auto&& damage,
                     const std::vector<std::string>& needles) {
    auto data = dir / name;
    copy_dir(pristine, data);
    damage(data);
    auto run_dir = dir / (name + "-run");
    auto cfg = dir / (name + ".yaml");
    write_text(cfg, small_config(data.string(), run_dir.string(), 2, 3));
    auto out = expect_refusal("run " + q(cfg), needles);
    CHECK_FALSE(fs::exists(run_dir));
    return out;
  };

  SECTION("truncated train shard body") {
    auto shard = [](const fs::path& d) { return d / "train-00001.tok"; };
    attempt("truncated",
            [&](const fs::path& d) {
              auto bytes = read_bytes(shard(d));
              REQUIRE(bytes.size() > 1000);
              write_bytes(shard(d), bytes.substr(0, 1000));
            },
            {"train-00001.tok", "truncated", "offset 1000"});
  }
  SECTION("train shard truncated inside the header") {
    attempt("truncated-header",
            [](const fs::path& d) {
              auto p = d / "train-00000.tok";
              write_bytes(p, read_bytes(p).substr(0, 20));
            },
            {"train-00000.tok", "truncated", "offset 20"});
  }
  SECTION("flipped byte in the tokens") {
    attempt("flipped-body",
            [](const fs::path& d) {
              auto p = d / "train-00000.tok";
              auto bytes = read_bytes(p);
              bytes[tutti::data::shard_header_size + 101] ^= 0x10;
              write_bytes(p, bytes);
            },
            {"train-00000.tok", "checksum", "offset"});
  }
  SECTION("flipped byte in the header") {
    attempt("flipped-header",
            [](const fs::path& d) {
              auto p = d / "train-00001.tok";
              auto bytes = read_bytes(p);
              bytes[26] ^= 0x01; // token_count
              write_bytes(p, bytes);
            },
            {"train-00001.tok", "checksum", "offset"});
  }
  SECTION("corrupt held-out shard") {
    // small_config evaluates (eval_sequences 8), so val is read too.
    attempt("flipped-val",
            [](const fs::path& d) {
              auto p = d / "val-00000.tok";
              auto bytes = read_bytes(p);
              bytes[bytes.size() - 1] ^= 0x01;
              write_bytes(p, bytes);
            },
            {"val-00000.tok", "offset"});
  }
  SECTION("missing shard") {
    attempt("missing-shard",
            [](const fs::path& d) { fs::remove(d / "train-00001.tok"); },
            {"train-00001.tok"});
  }
  SECTION("missing data dir") {
    auto run_dir = dir / "nodata-run";
    auto cfg = dir / "nodata.yaml";
    write_text(cfg, small_config((dir / "no-such-data").string(),
                                 run_dir.string(), 2, 3));
    expect_refusal("run " + q(cfg), {"data.dir", "no-such-data"});
    CHECK_FALSE(fs::exists(run_dir));
  }
  SECTION("data vocabulary larger than the model's") {
    auto run_dir = dir / "vocab-run";
    auto cfg = dir / "vocab.yaml";
    write_text(
      cfg, replace_line(small_config(pristine.string(), run_dir.string(), 2, 3),
                        "  vocab_size: 32", "  vocab_size: 16"));
    expect_refusal("run " + q(cfg), {"model.vocab_size"});
    CHECK_FALSE(fs::exists(run_dir));
  }
}

TEST_CASE("data prepare turns text into byte tokens", "[unit]") {
  auto dir = scratch("cli_bad_input/prepare");
  // A fortune-style file of 300 documents separated by "%" lines, and a
  // plain file that is one document; each document lands whole in train
  // or held-out, followed by a blank line.
  std::string a, b;
  std::vector<std::string> docs;
  for (int i = 0; i < 300; ++i) {
    docs.push_back("the quick brown fox " + std::to_string(i));
    a += docs.back() + "\n%\n";
  }
  for (int i = 0; i < 100; ++i)
    b += "jumps over the lazy dog\t\xc3\xa9\n";
  docs.push_back(b.substr(0, b.size() - 1));
  write_text(dir / "a.txt", a);
  write_text(dir / "b.txt", b);
  auto out = dir / "bytes";
  auto r = run(tutti_bin() + " data prepare --input " + q(dir / "a.txt") + " "
                 + q(dir / "b.txt") + " --out " + q(out)
                 + " --doc-delimiter % --val-fraction 0.1 --shard-mb 0.002",
               60);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Matchers::Contains("301 documents"));

  auto meta = tutti::data::read_meta(out);
  REQUIRE(meta.ok());
  CHECK(meta.value().vocab_size == 256);
  CHECK(meta.value().source == "bytes");
  CHECK_FALSE(meta.value().entropy_rate_nats.has_value());
  std::size_t all_bytes = 0;
  for (const auto& d : docs)
    all_bytes += d.size() + 2;
  CHECK(meta.value().tokens == all_bytes);
  CHECK(meta.value().train_tokens + meta.value().val_tokens
        == meta.value().tokens);
  CHECK(meta.value().train_shards >= 2);
  CHECK(meta.value().val_shards == 1);

  auto as_text = [](const std::vector<std::vector<int32_t>>& shards) {
    std::string s;
    for (const auto& shard : shards)
      for (auto t : shard)
        s.push_back(static_cast<char>(t));
    return s;
  };
  auto train = tutti::data::load_split(out, "train");
  REQUIRE(train.ok());
  auto val = tutti::data::load_split(out, "val");
  REQUIRE(val.ok());
  const std::string train_text = as_text(train.value()),
                    val_text = as_text(val.value());
  for (const auto& d : docs) {
    const bool in_train = train_text.find(d + "\n\n") != std::string::npos;
    const bool in_val = val_text.find(d + "\n\n") != std::string::npos;
    CHECK(in_train != in_val);
  }
  CHECK(val_text.size() > 0);

  // And a job trains on it.
  auto run_dir = dir / "run";
  auto cfg = dir / "bytes.yaml";
  auto text = small_config(out.string(), run_dir.string(), 1, 3);
  text = replace_line(text, "  vocab_size: 32", "  vocab_size: 256");
  text = replace_line(text, "  eval_sequences: 8", "  eval_sequences: 2");
  write_text(cfg, text);
  auto job = run(tutti_bin() + " run " + q(cfg) + " --quiet", 120);
  INFO(job.output);
  REQUIRE(job.status == 0);
  auto losses = metric_series(run_dir / "metrics.jsonl", "loss");
  REQUIRE(losses.size() == 3);
  // Untrained, the loss is near ln(256).
  CHECK(losses[0] == Approx(std::log(256.0)).margin(0.5));
}

TEST_CASE("chaos, status and drill on bad input: status 2, one line",
          "[unit]") {
  auto dir = scratch("cli_bad_input/faults");
  SECTION("an unknown fault") {
    expect_refusal("chaos 127.0.0.1:7100 unplug --rank 1", {"unplug"});
  }
  SECTION("a rank fault without --rank") {
    expect_refusal("chaos 127.0.0.1:7100 kill_expert", {"--rank"});
  }
  SECTION("a rank that is not a number") {
    expect_refusal("chaos 127.0.0.1:7100 kill_expert --rank one", {"--rank"});
  }
  SECTION("slow_rank without --seconds") {
    expect_refusal("chaos 127.0.0.1:7100 slow_rank --rank 0", {"--seconds"});
  }
  SECTION("status with an unknown option") {
    expect_refusal("status 127.0.0.1:7100 --yaml", {"--yaml"});
  }
  SECTION("a missing drill file") {
    auto missing = dir / "no-drill.yaml";
    expect_refusal("drill " + q(missing), {missing.string()});
  }
  SECTION("a drill with an unknown fault, a bad step, an unknown key") {
    write_text(dir / "job.yaml", small_config((dir / "data").string(),
                                              (dir / "run").string(), 2, 50));
    auto drill = [&](const std::string& fault_line) {
      write_text(dir / "drill.yaml",
                 "config: job.yaml\nfaults:\n  - " + fault_line + "\n");
      return "drill " + q(dir / "drill.yaml");
    };
    expect_refusal(drill("{fault: unplug, rank: 0, at_step: 5}"),
                   {"faults[0].fault", "unplug"});
    expect_refusal(drill("{fault: kill_expert, rank: 0, at_step: 50}"),
                   {"faults[0].at_step"});
    expect_refusal(drill("{fault: kill_expert, rank: 7, at_step: 5}"),
                   {"faults[0].rank"});
    expect_refusal(drill("{fault: kill_daemon, rank: 0, at_step: 5}"),
                   {"faults[0].node"});
    expect_refusal(drill("{fault: kill_expert, rank: 0, at_step: 5, when: 1}"),
                   {"faults[0].when", "unknown key"});
    expect_refusal(drill("{fault: kill_daemon, nodes: [0, 1], at_step: 5}"),
                   {"faults[0].nodes", "node 0"});
    expect_refusal(drill("{fault: kill_expert, rank: 0, at_step: 5, "
                         "during_checkpoint: true}"),
                   {"faults[0].during_checkpoint"});
    CHECK_FALSE(fs::exists(dir / "run"));
  }
}

TEST_CASE("every command tutti --help lists answers --help and -h", "[unit]") {
  auto dir = scratch("cli_bad_input/help");
  auto overview = run(tutti_bin() + " --help", 30);
  REQUIRE(overview.status == 0);
  // "  ckpt list RUN_DIR ..." names `ckpt` and `ckpt list`; continuation
  // lines are indented further.
  std::set<std::string> commands;
  std::istringstream lines(overview.output);
  std::string line;
  bool in_list = false;
  while (std::getline(lines, line)) {
    in_list = in_list || line == "commands:";
    if (!in_list || line.size() < 3 || line.compare(0, 2, "  ") != 0
        || !std::islower(static_cast<unsigned char>(line[2])))
      continue;
    std::istringstream words(line);
    std::string command, sub;
    words >> command >> sub;
    commands.insert(command);
    if (!sub.empty() && std::all_of(sub.begin(), sub.end(), [](char c) {
          return c >= 'a' && c <= 'z';
        }))
      commands.insert(command + " " + sub);
  }
  for (const char* c :
       {"run", "plan", "diag", "status", "chaos", "drill", "shell", "logs",
        "ckpt", "ckpt list", "ckpt verify", "ckpt show", "export", "data",
        "data synth", "data prepare"})
    CHECK(commands.count(c) == 1);
  for (const auto& command : commands)
    for (const char* flag : {"--help", "-h"}) {
      const auto out = dir / "stdout.txt";
      auto r = run(tutti_bin() + " " + command + " " + flag + " >" + q(out),
                   30);
      const auto usage = read_text(out);
      INFO("tutti " << command << " " << flag << "\n--- stdout\n"
                    << usage << "--- stderr\n"
                    << r.output << "---");
      CHECK(r.status == 0);
      CHECK(r.output.empty());
      CHECK(usage.rfind("usage: tutti " + command, 0) == 0);
      CHECK_THAT(usage, Catch::Matchers::Contains("--help"));
    }
}
