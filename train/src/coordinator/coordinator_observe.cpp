// What the coordinator makes of each step: running figures for status,
// the shell and /metrics, and the alert rules of `alerts:` (each firing is
// an event, a log line, a metric and a line in status). A rule's
// condition is judged per step through its observability::alert_state:
// it fires after alerts.hold_steps in a row, resolves after
// alerts.clear_steps clear, and says once when it is flapping.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "coordinator/coordinator_state.hpp"
#include "tutti/runtime/log.hpp"
#include "coordinator/metrics_writer.hpp"
#include "tutti/observability/prometheus_text.hpp"

namespace tutti {

namespace {

constexpr size_t loss_window = 50; // steps the spike rule averages over
constexpr size_t comm_baseline_steps = 20;

double unix_now() {
  return std::chrono::duration<double>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

// The largest max/mean load over the layers, and which layer.
std::pair<double, int64_t> worst_imbalance(const std::vector<int64_t>& counts,
                                           int64_t experts) {
  double worst = 0;
  int64_t layer = 0;
  for (size_t l = 0; l * experts + experts <= counts.size(); ++l) {
    double sum = 0, max = 0;
    for (int64_t e = 0; e < experts; ++e) {
      sum += counts[l * experts + e];
      max = std::max(max, static_cast<double>(counts[l * experts + e]));
    }
    if (sum > 0 && max / (sum / experts) > worst) {
      worst = max / (sum / experts);
      layer = static_cast<int64_t>(l);
    }
  }
  return {worst, layer};
}

// This step's `condition` of the rule `name`: fires or resolves it as its
// alert_state says. `at_once`: fire without the hold.
void rule(coordinator_pointer self, bool condition, const std::string& name,
          const std::string& level, const std::string& text,
          bool at_once = false) {
  const auto& a = self->state.cfg.alerts;
  auto& rules = self->state.seen.rules;
  auto i = rules.find(name);
  if (i == rules.end())
    i = rules
          .emplace(name, observability::alert_state(
                           {a.hold_steps, a.clear_steps, a.flap_firings,
                            a.flap_window_steps}))
          .first;
  auto& state = i->second;
  switch (state.observe(condition, at_once)) {
  case observability::alert_change::fired:
    fire_alert(self, name, level, text);
    break;
  case observability::alert_change::flapping:
    fire_alert(self, name, level, text,
               "fired " + std::to_string(state.recent_firings()) + " times in "
                 + std::to_string(a.flap_window_steps)
                 + " steps; firing until clear for "
                 + std::to_string(std::max(a.flap_window_steps, a.clear_steps))
                 + " steps");
    break;
  case observability::alert_change::resolved:
    resolve_alert(self, name);
    break;
  case observability::alert_change::none:
    if (condition && state.firing()) // the latest numbers for status
      fire_alert(self, name, level, text);
    break;
  }
}

void evaluate_rules(coordinator_pointer self, const step_report& r) {
  auto& st = self->state;
  auto& seen = st.seen;
  const auto& a = st.cfg.alerts;
  const auto step = " at step " + std::to_string(r.step);

  auto [imbalance, layer] = worst_imbalance(r.expert_counts,
                                            st.cfg.moe.num_experts);
  rule(self, a.expert_imbalance > 0 && imbalance > a.expert_imbalance,
       "expert_imbalance", "important",
       "expert load max/mean " + std::to_string(imbalance) + " in layer "
         + std::to_string(layer) + " over alerts.expert_imbalance "
         + std::to_string(a.expert_imbalance) + step);

  const double mean_loss = seen.recent_losses.empty()
                             ? r.loss
                             : std::accumulate(seen.recent_losses.begin(),
                                               seen.recent_losses.end(), 0.0)
                                 / static_cast<double>(
                                   seen.recent_losses.size());
  const bool nan = !std::isfinite(r.loss);
  const bool spike = a.loss_spike_factor > 0 && seen.recent_losses.size() >= 10
                     && r.loss > a.loss_spike_factor * mean_loss;
  rule(self, nan || spike, "loss", "important",
       nan ? "loss is not finite" + step
           : "loss " + std::to_string(r.loss) + " over "
               + std::to_string(a.loss_spike_factor) + " x its recent mean "
               + std::to_string(mean_loss) + step,
       /*at_once=*/nan);
  if (!nan) {
    seen.recent_losses.push_back(r.loss);
    if (seen.recent_losses.size() > loss_window)
      seen.recent_losses.pop_front();
  }

  // The exchange itself: a slow link shows there, while waiting for a rank
  // whose experts got more tokens is load imbalance, not communication.
  const double exchange_s = r.time_alltoall_s - r.time_alltoall_wait_s;
  if (seen.comm_samples.size() < comm_baseline_steps) {
    seen.comm_samples.push_back(exchange_s);
    if (seen.comm_samples.size() == comm_baseline_steps) {
      auto v = seen.comm_samples;
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      seen.comm_baseline_s = v[v.size() / 2];
    }
  }
  rule(self,
       a.comm_time_factor > 0 && seen.comm_baseline_s > 0
         && exchange_s > a.comm_time_factor * seen.comm_baseline_s
         && exchange_s - seen.comm_baseline_s > 1e-3,
       "comm_time", "important",
       "all-to-all exchange " + std::to_string(exchange_s) + " s over "
         + std::to_string(a.comm_time_factor) + " x its baseline "
         + std::to_string(seen.comm_baseline_s) + " s" + step);

  const double cross = cross_rack_share(r.alltoall_bytes_by_link);
  rule(self, a.cross_rack_share > 0 && cross > a.cross_rack_share,
       "cross_rack_share", "important",
       "all-to-all bytes crossing racks " + std::to_string(cross)
         + " of those on links, over alerts.cross_rack_share "
         + std::to_string(a.cross_rack_share) + step);

  const double busy = r.step_time_s > 0 ? r.time_compute_s / r.step_time_s : 1;
  rule(self, a.low_utilisation > 0 && busy < a.low_utilisation,
       "low_utilisation", "normal",
       "compute is " + std::to_string(busy) + " of the step time, under "
         + std::to_string(a.low_utilisation) + step);

  // Ranks starved by their loaders: the data path does not keep up (the
  // hold keeps one late wake-up of a loader thread from being an alert).
  const bool starved = r.step_time_s > 0
                       && r.time_data_s > a.data_wait * r.step_time_s
                       && r.time_data_s > 0.01;
  rule(self, a.data_wait > 0 && starved, "data_wait", "important",
       "ranks waited " + std::to_string(r.time_data_s) + " s of a "
         + std::to_string(r.step_time_s)
         + " s step for data, over alerts.data_wait "
         + std::to_string(a.data_wait) + step);

  // Copies that do not keep up hold the steps back (a step is reported
  // once its copy has landed): a slow link between the nodes, or state
  // too large for elastic.replica_interval_steps.
  const bool stalled = r.step_time_s > 0
                       && r.time_replica_s > a.replica_stall * r.step_time_s
                       && r.time_replica_s > 0.01;
  rule(self,
       st.cfg.elastic.replica_interval_steps > 0 && a.replica_stall > 0
         && stalled,
       "replica_stall", "important",
       "ranks waited " + std::to_string(r.time_replica_s) + " s of a "
         + std::to_string(r.step_time_s)
         + " s step for their in-memory copies (the last took "
         + std::to_string(r.time_replica_copy_s)
         + " s), over alerts.replica_stall " + std::to_string(a.replica_stall)
         + step);

  int64_t worst_rss = 0;
  std::string worst_node;
  for (const auto& [node, m] : st.nodes)
    if (m.resident_bytes > worst_rss) {
      worst_rss = m.resident_bytes;
      worst_node = st.node_name(node);
    }
  rule(self,
       a.memory_watermark_gb > 0
         && static_cast<double>(worst_rss) > a.memory_watermark_gb * 1e9,
       "memory", "important",
       worst_node + " uses " + std::to_string(worst_rss / 1e9)
         + " GB, over alerts.memory_watermark_gb");

  // A checkpoint writer judges the disk once a checkpoint, not once a step:
  // the save it refused is the episode, so its alert does not wait.
  for (const auto& [name, c] : seen.reported)
    rule(self, c.raised, name, c.level, c.text,
         /*at_once=*/name == "checkpoint_disk");
}

} // namespace

void fire_alert(coordinator_pointer self, const std::string& name,
                const std::string& level, const std::string& text,
                const std::string& flapping) {
  auto& alerts = self->state.seen.alerts;
  auto i = alerts.find(name);
  if (i != alerts.end()) {
    i->second.text = text; // still firing: keep the latest numbers
    return;
  }
  alerts[name] = {level, text, self->state.last_step, !flapping.empty()};
  const auto said = name
                    + (flapping.empty() ? "" : " flapping (" + flapping + ")")
                    + ": " + text;
  const auto line = "ALERT " + level + ": " + said;
  if (level == "normal")
    log_info("coordinator", line);
  else
    log_warn("coordinator", line);
  record_event(self, "alert", level + " " + said, -1);
}

void resolve_alert(coordinator_pointer self, const std::string& name,
                   const std::string& why) {
  auto& alerts = self->state.seen.alerts;
  auto i = alerts.find(name);
  if (i == alerts.end())
    return;
  const auto text = name + ": fired at step "
                    + std::to_string(i->second.since_step)
                    + ", resolved at step "
                    + std::to_string(self->state.last_step)
                    + (why.empty() ? "" : " (" + why + ")");
  log_info("coordinator", "alert resolved: " + text);
  record_event(self, "alert_resolved", text, -1);
  alerts.erase(i);
}

void resolve_all_alerts(coordinator_pointer self, const std::string& why) {
  std::vector<std::string> firing;
  for (const auto& [name, a] : self->state.seen.alerts)
    firing.push_back(name);
  for (const auto& name : firing)
    resolve_alert(self, name, why);
}

void report_condition(coordinator_pointer self, const alert_report& report) {
  auto& c = self->state.seen.reported[report.name];
  c.raised = !report.text.empty();
  if (c.raised) {
    c.level = report.level;
    c.text = report.text;
  }
}

double cross_rack_share(const std::vector<int64_t>& by_link) {
  if (by_link.size() != 4)
    return 0;
  const double linked = double(by_link[1]) + double(by_link[2])
                        + double(by_link[3]);
  return linked > 0 ? double(by_link[3]) / linked : 0;
}

void observe_step(coordinator_pointer self, const step_report& merged) {
  auto& st = self->state;
  auto& seen = st.seen;
  seen.last = merged;
  seen.have_last = true;
  if (merged.evaluated) {
    seen.last_eval_loss = merged.eval_loss;
    seen.have_eval = true;
  }
  ++seen.steps_seen;
  seen.elapsed_s += merged.step_time_s;
  seen.dropped_total += merged.dropped_tokens;
  seen.expert_sum.resize(merged.expert_counts.size(), 0.0);
  for (size_t i = 0; i < merged.expert_counts.size(); ++i)
    seen.expert_sum[i] += static_cast<double>(merged.expert_counts[i]);
  ++seen.expert_steps;
  const auto& by_link = merged.alltoall_bytes_by_link;
  seen.alltoall_bytes_total.resize(std::max<size_t>(by_link.size(), 4), 0.0);
  for (size_t c = 0; c < by_link.size(); ++c)
    seen.alltoall_bytes_total[c] += static_cast<double>(by_link[c]);
  evaluate_rules(self, merged);
  publish_metrics(self);
}

void observe_commit(coordinator_pointer self, bool ok, double seconds) {
  auto& seen = self->state.seen;
  if (ok) {
    seen.last_commit_s = seconds;
    seen.last_commit_unix_s = unix_now();
    seen.checkpoint_failures_in_row = 0;
    resolve_alert(self, "checkpoint_failures");
  } else {
    ++seen.checkpoint_failures_in_row;
    const auto limit = self->state.cfg.alerts.checkpoint_failures;
    if (limit > 0 && seen.checkpoint_failures_in_row >= limit)
      fire_alert(self, "checkpoint_failures", "critical",
                 std::to_string(seen.checkpoint_failures_in_row)
                   + " checkpoints in a row failed");
  }
  publish_metrics(self);
}

void observe_restart(coordinator_pointer self, const std::string& text) {
  // "node 1: expert_shard/3 restarted after ...": the kind is before '/'.
  auto colon = text.find(": ");
  auto start = colon == std::string::npos ? 0 : colon + 2;
  auto slash = text.find_first_of("/ ", start);
  auto kind = text.substr(start, slash - start);
  ++self->state.seen.restarts_by_kind[kind];
  publish_metrics(self);
}

void publish_metrics(coordinator_pointer self) {
  auto& st = self->state;
  if (st.board)
    st.board->publish(render_metrics(st));
}

std::string render_metrics(const coordinator_state& st) {
  observability::prometheus_text m;
  const auto& seen = st.seen;
  const auto& r = seen.last;
  auto gauge = [&](const std::string& name, const std::string& help, double v) {
    m.metric(name, "gauge", help, {}, v);
  };
  gauge("tutti_job_step", "Last step every rank finished.",
        static_cast<double>(st.last_step));
  gauge("tutti_job_steps", "Steps of the job.",
        static_cast<double>(st.cfg.train.steps));
  gauge("tutti_job_epoch", "Membership epoch (+1 per recovery).",
        static_cast<double>(st.epoch));
  gauge("tutti_job_world_size",
        "Ranks training in this epoch (fewer than the config's while the "
        "job goes on without lost nodes).",
        static_cast<double>(st.epoch_world()));
  m.metric("tutti_job_state", "gauge", "1 for the job's current state.",
           {{"state", describe_job(st).state}}, 1);
  m.metric("tutti_recoveries_total", "counter",
           "Job-level recoveries (communicators rebuilt from a checkpoint).",
           {}, static_cast<double>(st.recoveries));
  m.family("tutti_restarts_total", "counter",
           "Actors restarted in place by their supervisors, by kind.");
  for (const char* kind :
       {"expert_shard", "data_loader", "checkpoint_writer"}) {
    auto i = seen.restarts_by_kind.find(kind);
    m.sample("tutti_restarts_total", {{"kind", kind}},
             i == seen.restarts_by_kind.end() ? 0.0
                                              : static_cast<double>(i->second));
  }
  if (seen.have_last) {
    gauge("tutti_loss", "Training loss of the last step (nats/token).", r.loss);
    gauge("tutti_grad_norm",
          "Gradient norm of the last step (before clipping).", r.grad_norm);
    gauge("tutti_learning_rate", "Learning rate of the last step.", r.lr);
    if (seen.have_eval)
      gauge("tutti_eval_loss", "The last held-out loss (nats/token).",
            seen.last_eval_loss);
    gauge("tutti_tokens_per_second", "Tokens per second of the last step.",
          r.step_time_s > 0 ? r.tokens / r.step_time_s : 0);
    m.metric("tutti_step_time_seconds", "gauge",
             "The last step's time, by part (mean over ranks; total: the "
             "slowest rank).",
             {{"part", "compute"}}, r.time_compute_s);
    m.sample("tutti_step_time_seconds", {{"part", "alltoall"}},
             r.time_alltoall_s);
    m.sample("tutti_step_time_seconds", {{"part", "alltoall_overlapped"}},
             r.time_overlap_s);
    m.sample("tutti_step_time_seconds", {{"part", "allreduce"}},
             r.time_allreduce_s);
    m.sample("tutti_step_time_seconds", {{"part", "other"}}, r.time_other_s);
    m.sample("tutti_step_time_seconds", {{"part", "total"}}, r.step_time_s);
    const auto experts = st.cfg.moe.num_experts;
    m.family("tutti_expert_tokens", "gauge",
             "Tokens routed to each expert in the last step (step: "
             "tutti_job_step).");
    m.family("tutti_expert_load_imbalance_ratio", "gauge",
             "Max over mean tokens per expert in the last step, per layer.");
    for (size_t l = 0; l * experts + experts <= r.expert_counts.size(); ++l) {
      double sum = 0, max = 0;
      for (int64_t e = 0; e < experts; ++e) {
        const double c = static_cast<double>(r.expert_counts[l * experts + e]);
        m.sample("tutti_expert_tokens",
                 {{"layer", std::to_string(l)}, {"expert", std::to_string(e)}},
                 c);
        sum += c;
        max = std::max(max, c);
      }
      m.sample("tutti_expert_load_imbalance_ratio",
               {{"layer", std::to_string(l)}},
               sum > 0 ? max / (sum / experts) : 0);
    }
    gauge("tutti_alltoall_cross_rack_share",
          "Of the last step's all-to-all bytes on links, the share that "
          "crossed racks.",
          cross_rack_share(r.alltoall_bytes_by_link));
    if (st.cfg.elastic.replica_interval_steps > 0) {
      gauge("tutti_replica_lag_steps",
            "Steps since the newest step whose in-memory copy every rank "
            "has on another node (what a lost node costs).",
            static_cast<double>(r.step - r.replica_step));
      gauge("tutti_replica_bytes",
            "Bytes the ranks sent for that copy, all ranks together.",
            static_cast<double>(r.replica_bytes));
      gauge("tutti_replica_copy_seconds",
            "How long that copy travelled (beside the next step; the "
            "slowest rank's).",
            r.time_replica_copy_s);
    }
    m.metric("tutti_dropped_tokens_total", "counter",
             "Tokens dropped over expert capacity, since the daemon started.",
             {}, static_cast<double>(seen.dropped_total));
  }
  m.family("tutti_alltoall_bytes_total", "counter",
           "All-to-all bytes every rank sent, by the link class they "
           "crossed, since the daemon started.");
  const char* links[] = {"same_rank", "intra_node", "intra_rack", "inter_rack"};
  for (size_t c = 1; c < 4; ++c) // a rank's copies to itself cross no link
    m.sample("tutti_alltoall_bytes_total", {{"link", links[c]}},
             c < seen.alltoall_bytes_total.size() ? seen.alltoall_bytes_total[c]
                                                  : 0.0);
  gauge("tutti_checkpoint_last_step",
        "Step of the newest committed checkpoint.",
        static_cast<double>(st.last_committed));
  gauge("tutti_checkpoint_commit_seconds",
        "How long the last checkpoint commit took.", seen.last_commit_s);
  gauge("tutti_checkpoint_last_success_timestamp_seconds",
        "Unix time of the last committed checkpoint (0: none yet).",
        seen.last_commit_unix_s);
  m.family("tutti_node_heartbeat_age_seconds", "gauge",
           "Seconds since each connected node's last heartbeat.");
  m.family("tutti_node_resident_memory_bytes", "gauge",
           "Resident memory of each node's daemon, from its heartbeat.");
  const auto now = coordinator_clock::now();
  for (const auto& [node, mem] : st.nodes) {
    observability::label_list l{{"node", std::to_string(node)}};
    m.sample("tutti_node_heartbeat_age_seconds", l,
             std::chrono::duration<double>(now - mem.last_heartbeat).count());
    m.sample("tutti_node_resident_memory_bytes", l,
             static_cast<double>(mem.resident_bytes));
  }
  m.family("tutti_alert_firing", "gauge", "1 for each alert rule firing now.");
  for (const auto& [name, a] : seen.alerts)
    m.sample("tutti_alert_firing", {{"alert", name}, {"level", a.level}}, 1);
  return m.str();
}

} // namespace tutti
