// tutti report RUN_DIR --out FILE: a finished run as one HTML file that
// opens offline (the dashboard's page with the run written into it): its
// curves from RUN_DIR/metrics.jsonl, its experts, its events from the job
// store, its shape from the config version it last ran with.

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "command_line.hpp"
#include "commands.hpp"
#include "tutti/dashboard/report.hpp"
#include "tutti/store/atomic_file.hpp"
#include "tutti/store/job_store.hpp"
#include "tutti/train/job_dashboard.hpp"

namespace tutti::cli {

int report_command(const std::vector<std::string>& args) {
  command_line cl("report", "RUN_DIR --out FILE",
                  "writes one self-contained HTML file of a run: loss, "
                  "throughput, step time,\ntraffic, the expert heatmap and "
                  "the events; it needs no server or network");
  cl.options()("out", po::value<std::string>(), "the HTML file to write");
  cl.required("run_dir", "RUN_DIR");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (!vm.count("out"))
    return cl.bad("missing --out FILE (usage: " + cl.usage_line() + ")");
  const std::filesystem::path run_dir = vm["run_dir"].as<std::string>();
  const auto steps = run_dir / "metrics.jsonl";
  if (!std::filesystem::exists(steps))
    return fail(2, "report: " + steps.string()
                     + ": no such file (is RUN_DIR a run's run.dir?)");
  auto db = store::job_store::open_read_only(run_dir / "state");
  if (!db)
    return fail(2, "report: " + db.message());
  auto versions = (*db)->config_versions();
  if (!versions || versions->empty())
    return fail(1,
                "report: no config version in " + (run_dir / "state").string());
  auto cfg = parse_job_config(versions->back().config_yaml,
                              (run_dir / "state").string() + " config");
  if (!cfg)
    return fail(1, "report: the run's config: " + cfg.message());
  cfg->run.dir = run_dir.string();
  auto about = job_overview(*cfg);
  about.title = "run " + run_dir.string();
  std::vector<std::string> coactivation;
  try {
    for (int64_t l = 0; l < about.layers; ++l) {
      auto layer = newest_coactivation(**db, l);
      if (layer.empty())
        break; // no routing window kept
      coactivation.push_back(std::move(layer));
    }
  } catch (const std::exception& e) {
    return fail(1, std::string("report: ") + e.what());
  }
  auto page = dashboard::report_html(about, steps, job_events(**db, 0),
                                     coactivation);
  const auto out = vm["out"].as<std::string>();
  if (auto written = store::write_file_atomic(out, page); !written)
    return fail(1, "report: " + written.message());
  std::printf("wrote %s (%zu bytes)\n", out.c_str(), page.size());
  return 0;
}

} // namespace tutti::cli
