#pragma once
// metrics_writer: one JSON object per step to RUN_DIR/metrics.jsonl and a
// progress line on the terminal. Detached: it writes files.

#include "tutti/protocol/interfaces.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti {

// On resume (resume_step > 0) the lines of steps after resume_step are
// dropped, since those steps run again; from scratch the file starts empty.
// `alerts` gets alert_report{"slow_log_write", "normal", text} when a line
// takes longer than alerts.slow_log_write_ms to write, and the same with an
// empty text once writes are fast again.
metrics_writer_actor spawn_metrics_writer(caf::actor_system& sys,
                                          job_config cfg, bool quiet,
                                          int64_t resume_step,
                                          caf::actor alerts = {});

// The JSON line written for one (merged) step report, without newline.
std::string metrics_json(const step_report& r, int64_t experts_per_layer);

// "12.3k" style for the terminal.
std::string human_count(double value);

// Largest over layers of max/mean of the per-expert counts.
double load_imbalance(const std::vector<int64_t>& counts, int64_t experts);

} // namespace tutti
