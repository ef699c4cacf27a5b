#include "coordinator/metrics_writer.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tutti/runtime/log.hpp"
#include "tutti/store/atomic_file.hpp"

namespace tutti {

std::string human_count(double value) {
  char buf[32];
  if (value >= 1e6)
    std::snprintf(buf, sizeof(buf), "%.2fM", value / 1e6);
  else if (value >= 1e3)
    std::snprintf(buf, sizeof(buf), "%.1fk", value / 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%.0f", value);
  return buf;
}

double load_imbalance(const std::vector<int64_t>& counts, int64_t experts) {
  double worst = 0;
  for (size_t l = 0; l + experts <= counts.size(); l += experts) {
    double sum = 0, max = 0;
    for (int64_t e = 0; e < experts; ++e) {
      sum += counts[l + e];
      max = std::max(max, static_cast<double>(counts[l + e]));
    }
    if (sum > 0)
      worst = std::max(worst, max / (sum / experts));
  }
  return worst;
}

namespace {

std::string duration_text(double seconds) {
  char buf[32];
  auto s = static_cast<long long>(seconds + 0.5);
  if (s >= 3600)
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", s / 3600, (s / 60) % 60);
  else
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
  return buf;
}

} // namespace

std::string metrics_json(const step_report& r, int64_t experts) {
  // Doubles round-trip exactly (resumed runs are compared bit for bit);
  // NaN and infinities are null. "step" first: readers look for it there.
  nlohmann::ordered_json j;
  j["step"] = r.step;
  j["loss"] = r.loss;
  j["aux_loss"] = r.aux_loss;
  j["z_loss"] = r.z_loss;
  j["lr"] = r.lr;
  j["grad_norm"] = r.grad_norm;
  j["tokens"] = r.tokens;
  j["tokens_per_s"] = r.tokens / r.step_time_s;
  j["dropped_tokens"] = r.dropped_tokens;
  j["alltoall_bytes"] = r.alltoall_bytes;
  if (r.alltoall_bytes_by_link.size() == 4) {
    // All ranks' bytes this step by the link they crossed.
    auto& links = j["alltoall_bytes_by_link"];
    links["same_rank"] = r.alltoall_bytes_by_link[0];
    links["intra_node"] = r.alltoall_bytes_by_link[1];
    links["intra_rack"] = r.alltoall_bytes_by_link[2];
    links["inter_rack"] = r.alltoall_bytes_by_link[3];
  }
  j["load_imbalance"] = load_imbalance(r.expert_counts, experts);
  auto& counts = j["expert_counts"] = nlohmann::ordered_json::array();
  for (size_t l = 0; l < r.expert_counts.size(); l += experts)
    counts.push_back(std::vector<int64_t>(
      r.expert_counts.begin() + static_cast<std::ptrdiff_t>(l),
      r.expert_counts.begin() + static_cast<std::ptrdiff_t>(l + experts)));
  j["step_time_s"] = r.step_time_s;
  j["time_compute_s"] = r.time_compute_s;
  j["time_alltoall_s"] = r.time_alltoall_s;
  j["time_alltoall_wait_s"] = r.time_alltoall_wait_s;
  j["time_overlap_s"] = r.time_overlap_s;
  j["time_allreduce_s"] = r.time_allreduce_s;
  j["time_other_s"] = r.time_other_s;
  j["time_data_s"] = r.time_data_s;
  if (r.time_lent_s > 0)
    j["time_lent_s"] = r.time_lent_s;
  if (r.time_pipeline_s > 0)
    j["time_pipeline_s"] = r.time_pipeline_s;
  if (r.time_pipeline_schedule_s > 0) {
    j["time_pipeline_schedule_s"] = r.time_pipeline_schedule_s;
    j["pipeline_bubble"] = r.pipeline_bubble;
  }
  if (r.replica_step > 0 || r.time_replica_s > 0) {
    j["replica_step"] = r.replica_step;
    j["replica_lag_steps"] = r.step - r.replica_step;
    j["replica_bytes"] = r.replica_bytes;
    j["time_replica_copy_s"] = r.time_replica_copy_s;
    j["time_replica_s"] = r.time_replica_s;
  }
  if (r.evaluated)
    j["eval_loss"] = r.eval_loss;
  return j.dump();
}

namespace {

struct metrics_writer_state {
  static inline const char* name = "metrics_writer";
  job_config cfg;
  bool quiet = false;
  std::FILE* file = nullptr;
  caf::actor alerts;
  bool slow_writes = false;
  double elapsed = 0;
  int64_t steps_seen = 0;

  ~metrics_writer_state() {
    if (file)
      std::fclose(file);
  }

  void print(const step_report& r) {
    const auto& t = cfg.train;
    const bool last = r.step == t.steps;
    if (quiet || (r.step % t.log_interval != 0 && !last && !r.evaluated))
      return;
    const double eta = elapsed / steps_seen * (t.steps - r.step);
    std::printf("step %*lld/%lld  loss %.4f", 5, static_cast<long long>(r.step),
                static_cast<long long>(t.steps), r.loss);
    if (r.evaluated)
      std::printf("  eval %.4f", r.eval_loss);
    std::printf("  tok/s %s  load max/mean %.2f  dropped %lld  eta %s\n",
                human_count(r.tokens / r.step_time_s).c_str(),
                load_imbalance(r.expert_counts, cfg.moe.num_experts),
                static_cast<long long>(r.dropped_tokens),
                duration_text(eta).c_str());
    std::fflush(stdout);
  }
};

using writer_pointer =
  metrics_writer_actor::stateful_pointer<metrics_writer_state>;

// The lines of steps up to `keep_until` of an existing metrics file.
std::string kept_lines(const std::filesystem::path& path, int64_t keep_until) {
  std::string out, line;
  std::ifstream in(path);
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line, nullptr, false);
    const auto step = record.is_object() ? record.find("step") : record.end();
    if (step != record.end() && step->is_number_integer()
        && step->get<int64_t>() <= keep_until)
      out += line + "\n";
  }
  return out;
}

// Keeps the lines up to `step` (0: none) and appends from there. Rewritten
// atomically, so a crash here loses no line already kept.
void rewind(metrics_writer_state& st, int64_t step) {
  auto path = std::filesystem::path(st.cfg.run.dir) / "metrics.jsonl";
  if (st.file) {
    std::fclose(st.file);
    st.file = nullptr;
  }
  auto kept = step > 0 ? kept_lines(path, step) : std::string();
  if (auto err = store::write_file_atomic(path, kept); !err)
    log_error("metrics_writer", err.message());
  st.file = std::fopen(path.c_str(), "a");
  if (!st.file)
    log_error("metrics_writer", "cannot write " + path.string());
}

metrics_writer_actor::behavior_type metrics_writer(writer_pointer self,
                                                   job_config cfg, bool quiet,
                                                   int64_t resume_step,
                                                   caf::actor alerts) {
  auto& st = self->state;
  st.alerts = std::move(alerts);
  st.cfg = std::move(cfg);
  st.quiet = quiet;
  rewind(st, resume_step);
  return {
    [self](rewind_atom, int64_t step) { rewind(self->state, step); },
    [self](const step_report& r) {
      auto& st = self->state;
      st.elapsed += r.step_time_s;
      st.steps_seen += 1;
      if (st.file) {
        auto line = metrics_json(r, st.cfg.moe.num_experts);
        const auto t0 = std::chrono::steady_clock::now();
        std::fprintf(st.file, "%s\n", line.c_str());
        std::fflush(st.file);
        const double ms = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - t0)
                            .count();
        const double limit = st.cfg.alerts.slow_log_write_ms;
        const bool slow = limit > 0 && ms > limit;
        if (st.alerts && slow != st.slow_writes)
          caf::anon_send(
            st.alerts,
            alert_report{"slow_log_write", "normal",
                         slow ? "a metrics line took " + std::to_string(ms)
                                  + " ms to write (alerts.slow_log_write_ms "
                                  + std::to_string(limit) + ")"
                              : std::string()});
        st.slow_writes = slow;
      }
      st.print(r);
    },
  };
}

} // namespace

metrics_writer_actor spawn_metrics_writer(caf::actor_system& sys,
                                          job_config cfg, bool quiet,
                                          int64_t resume_step,
                                          caf::actor alerts) {
  return sys.spawn<caf::detached>(metrics_writer, std::move(cfg), quiet,
                                  resume_step, std::move(alerts));
}

} // namespace tutti
