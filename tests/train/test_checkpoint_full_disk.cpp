// A checkpoint directory on a full file system (a tiny tmpfs; where the
// machine does not allow mounting, the test says so and is skipped): each
// checkpoint fails with an event and a critical alert, and training goes on
// to the end.

#include <catch2/catch.hpp>

#include <cerrno>
#include <cstring>
#include <sys/mount.h>
#include <unistd.h>

#include "test_support.hpp"
#include "tutti/store/job_store.hpp"

using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

// Mounts a 64 KiB tmpfs; unmounts it at the end of the test.
struct tiny_fs {
  fs::path where;
  bool mounted = false;
  explicit tiny_fs(fs::path p) : where(std::move(p)) {
    fs::create_directories(where);
    mounted = ::mount("tmpfs", where.c_str(), "tmpfs", 0, "size=64k") == 0;
  }
  ~tiny_fs() {
    if (mounted)
      ::umount2(where.c_str(), MNT_DETACH);
  }
};

} // namespace

TEST_CASE("a full disk fails checkpoints, not the job", "[fault]") {
  auto dir = scratch("full_disk");
  tiny_fs disk(dir / "tiny");
  if (!disk.mounted) {
    std::printf("SKIPPED: cannot mount a tmpfs here (%s); the full-disk "
                "drill needs root and mount(2)\n",
                std::strerror(errno));
    std::exit(77);
  }
  auto data = dir / "data";
  REQUIRE(synth_data(data));
  auto cfg = dir / "c.yaml";
  write_text(cfg, small_config(data.string(), (dir / "run").string(), 2, 12)
                    + "checkpoint:\n  interval_steps: 4\n  dir: "
                    + (disk.where / "ckpt").string() + "\n");
  auto r = run(tutti_bin() + " run " + cfg.string() + " --quiet", 300);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("ALERT critical: checkpoint step 4")
        != std::string::npos);
  CHECK(metric_series(dir / "run" / "metrics.jsonl", "step").size() == 12);

  auto db = tutti::store::job_store::open(dir / "run" / "state");
  REQUIRE(db.ok());
  auto events = db.value()->events();
  REQUIRE(events.ok());
  int failed = 0;
  for (const auto& e : events.value())
    if (e.kind == "checkpoint_failed")
      ++failed;
  CHECK(failed >= 3); // steps 4, 8 and 12
  auto committed = db.value()->checkpoints();
  REQUIRE(committed.ok());
  CHECK(committed.value().empty());
}
