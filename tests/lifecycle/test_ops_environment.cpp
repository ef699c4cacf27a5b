// Environment consistency before a job starts: a daemon whose build id
// differs (TUTTI_BUILD_ID), that runs in another image (TUTTI_IMAGE_DIGEST,
// as the image's digest file would say) or that lacks a data file is
// refused, named with the component, and the job does not start; with
// diag.environment: warn it joins and the job runs, with a warning naming
// it.

#include <catch2/catch.hpp>

#include "daemon_support.hpp"
#include "tutti/lifecycle/environment.hpp"

using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

struct two_daemons {
  fs::path dir, data;
  int port = 0;

  two_daemons(const std::string& name, int salt)
    : dir(scratch(name)), data(dir / "data") {
    REQUIRE(synth_data(data));
    port = port_block(salt);
  }

  // The job's config, as node `n` reads it.
  fs::path config(const std::string& name, const fs::path& data_dir,
                  const std::string& extra = "", int steps = 6) {
    auto path = dir / (name + ".yaml");
    write_text(path, daemon_config(data_dir.string(), (dir / "job").string(),
                                   port, steps, {"127.0.0.1", "127.0.0.1"}, 8)
                       + extra);
    return path;
  }

  // Node 1 (`config1`, behind `prefix1`) is refused when it joins: both
  // daemons exit non-zero and the job never starts. Their logs, node 0's
  // first.
  std::pair<std::string, std::string> check_refused(
    const fs::path& config0, const fs::path& config1,
    const std::vector<std::string>& prefix1 = {},
    const std::vector<std::string>& prefix0 = {}) {
    auto node0 = start_daemon(config0, 0, dir / "node0.log", prefix0);
    auto node1 = start_daemon(config1, 1, dir / "node1.log", prefix1);
    const int s1 = node1->wait(60), s0 = node0->wait(60);
    const auto log0 = read_text(dir / "node0.log"),
               log1 = read_text(dir / "node1.log");
    INFO("node0: " << tail(log0) << "\nnode1: " << tail(log1));
    CHECK(s1 != 0);
    CHECK(s0 != 0);
    CHECK(count_lines(dir / "job" / "metrics.jsonl") == 0);
    return {log0, log1};
  }
};

} // namespace

TEST_CASE("the environment table, and its first difference",
          "[ops][environment]") {
  auto dir = scratch("ops_environment_unit");
  REQUIRE(synth_data(dir / "data"));
  tutti::job_config cfg;
  cfg.data.dir = (dir / "data").string();
  cfg.run.dir = (dir / "run").string();
  auto env = tutti::lifecycle::node_environment(cfg, "Haswell");
  auto names = [&] {
    std::string out;
    for (const auto& [k, v] : env)
      out += k + "\n";
    return out;
  }();
  for (const char* component :
       {"build_id", "image", "caf", "gloo", "nccl", "cuda_runtime",
        "cuda_driver", "blas", "blas_core", "os", "data/meta.json",
        "data/train-00000.tok", "free_disk.data", "free_disk.checkpoints"})
    CHECK(has(names, component));
  CHECK(tutti::lifecycle::environment_difference(env, "a", env, "b").empty());
  auto other = env;
  other[0].second = "elsewhere";
  other.back().second = "0.0 GB"; // free disk is not compared
  CHECK(tutti::lifecycle::environment_difference(env, "node 0", other, "node 1")
        == "build_id: " + env[0].second + " on node 0, elsewhere on node 1");
  auto table = tutti::lifecycle::environment_table(
    {{"node 0", env}, {"node 1", other}});
  CHECK(has(table, "elsewhere"));
  CHECK(has(table, "blas_core"));
}

TEST_CASE("a daemon with another build id is refused, the job does not start",
          "[ops][environment]") {
  two_daemons job("ops_environment_build", 81);
  auto config = job.config("job", job.data);
  const auto [log0, log1] = job.check_refused(
    config, config, {"env", "TUTTI_BUILD_ID=built-elsewhere"});
  INFO("node0: " << tail(log0) << "\nnode1: " << tail(log1));
  CHECK(has(log1, "node 1 (127.0.0.1) differs in build_id"));
  CHECK(has(log1, "built-elsewhere on node 1"));
  CHECK(has(log0, "differs in build_id"));
}

// What the image build writes beside the programs, for two builds.
const std::vector<std::string> image_here = {
  "env", "TUTTI_IMAGE_DIGEST=sha256:1111 (tutti:here)"};
const std::vector<std::string> image_elsewhere = {
  "env", "TUTTI_IMAGE_DIGEST=sha256:2222 (tutti:elsewhere)"};

TEST_CASE("a daemon in another image is refused, naming the image",
          "[ops][environment]") {
  two_daemons job("ops_environment_image", 87);
  auto config = job.config("job", job.data);
  const auto [log0, log1] = job.check_refused(config, config, image_elsewhere,
                                              image_here);
  INFO("node0: " << tail(log0) << "\nnode1: " << tail(log1));
  CHECK(has(log1, "node 1 (127.0.0.1) differs in image: sha256:1111 "
                  "(tutti:here) on node 0 (the coordinator's), sha256:2222 "
                  "(tutti:elsewhere) on node 1"));
  CHECK(has(log0, "differs in image"));
}

TEST_CASE("with diag.environment: warn a daemon in another image joins",
          "[ops][environment]") {
  two_daemons job("ops_environment_image_warn", 89);
  auto config = job.config("job", job.data, "diag:\n  environment: warn\n", 4);
  auto node0 = start_daemon(config, 0, job.dir / "node0.log", image_here);
  auto node1 = start_daemon(config, 1, job.dir / "node1.log", image_elsewhere);
  const int s0 = node0->wait(180), s1 = node1->wait(60);
  const auto log0 = read_text(job.dir / "node0.log");
  INFO("node0: " << tail(log0));
  CHECK(s0 == 0);
  CHECK(s1 == 0);
  CHECK(has(log0, "differs in image"));
  CHECK(has(log0, "joining anyway (diag.environment: warn)"));
}

TEST_CASE("a daemon missing a data file is refused, naming the file",
          "[ops][environment]") {
  two_daemons job("ops_environment_data", 83);
  // Node 1's copy of the data lacks a shard.
  const auto partial = job.dir / "data_partial";
  fs::copy(job.data, partial, fs::copy_options::recursive);
  REQUIRE(fs::remove(partial / "train-00000.tok"));
  const auto [log0, log1] = job.check_refused(job.config("node0", job.data),
                                              job.config("node1", partial));
  INFO("node0: " << tail(log0) << "\nnode1: " << tail(log1));
  CHECK(has(log1, "node 1 (127.0.0.1) differs in data/train-00000.tok"));
  CHECK(has(log1, "missing on node 1"));
}

TEST_CASE("with diag.environment: warn the node joins and the job runs",
          "[ops][environment]") {
  two_daemons job("ops_environment_warn", 85);
  auto config = job.config("job", job.data, "diag:\n  environment: warn\n", 4);
  auto node0 = start_daemon(config, 0, job.dir / "node0.log");
  auto node1 = start_daemon(config, 1, job.dir / "node1.log",
                            {"env", "TUTTI_BUILD_ID=built-elsewhere"});
  const int s0 = node0->wait(180), s1 = node1->wait(60);
  const auto log0 = read_text(job.dir / "node0.log");
  INFO("node0: " << tail(log0)
                 << "\nnode1: " << tail(read_text(job.dir / "node1.log")));
  CHECK(s0 == 0);
  CHECK(s1 == 0);
  CHECK(has(log0, "differs in build_id"));
  CHECK(has(log0, "joining anyway (diag.environment: warn)"));
  CHECK(count_lines(job.dir / "job" / "metrics.jsonl") == 4);
}
