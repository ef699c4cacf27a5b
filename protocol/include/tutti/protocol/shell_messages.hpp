#pragma once
// The coordinator's answers to shell commands, as data: the client renders
// them as text for people or JSON for scripts (render/).

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "tutti/protocol/messages.hpp"

namespace tutti {

// The shell's `status`: the job, and figures of its recent steps.
struct status_view {
  job_status job;
  int64_t nnodes = 0;      // of the config
  double tokens_per_s = 0; // of the last step
  double eta_s = 0;        // at the mean step time so far
  // The last step's all-to-all bytes, every rank's, by link class
  // (same_rank, intra_node, intra_rack, inter_rack), and its tokens.
  std::vector<int64_t> alltoall_bytes_by_link;
  int64_t tokens = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, status_view& x) {
  return f(caf::meta::type_name("status_view"), x.job, x.nnodes, x.tokens_per_s,
           x.eta_s, x.alltoall_bytes_by_link, x.tokens);
}

// One node of the config, for `nodes`.
struct node_view {
  int64_t node = 0;
  std::string address; // host:port
  std::string rack;
  int64_t first_rank = 0;
  int64_t ranks = 0;
  double heartbeat_age_s = -1; // -1: not connected
  std::string state;           // up | lost | drained
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_view& x) {
  return f(caf::meta::type_name("node_view"), x.node, x.address, x.rack,
           x.first_rank, x.ranks, x.heartbeat_age_s, x.state);
}

// One expert's load, for `experts`.
struct expert_load {
  int64_t expert = 0;
  int64_t tokens = 0; // routed to it in the last step
  double average = 0; // tokens per step since the daemon started
  double bias = 0;    // its router bias
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, expert_load& x) {
  return f(caf::meta::type_name("expert_load"), x.expert, x.tokens, x.average,
           x.bias);
}

// One layer's expert loads in the last step, for `experts`.
struct layer_load {
  int64_t layer = 0;
  int64_t step = 0;
  double max_over_mean = 0;
  int64_t dropped = 0;       // tokens over capacity, this step
  int64_t dropped_total = 0; // since the daemon started
  std::vector<expert_load> experts;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, layer_load& x) {
  return f(caf::meta::type_name("layer_load"), x.layer, x.step, x.max_over_mean,
           x.dropped, x.dropped_total, x.experts);
}

// The answer to one shell command. Which field holds it follows from the
// command: status, nodes, actors, experts; lines for events and logs (JSON
// lines) and for metrics (Prometheus text lines); message for the
// commands that act (pause, resume, checkpoint, restart, kill, drain,
// stop). A refused command has ok = false and error says why.
struct shell_reply {
  bool ok = true;
  std::string error;
  status_view status;
  std::vector<node_view> nodes;
  std::vector<actor_info> actors;
  std::vector<layer_load> experts;
  std::vector<std::string> lines;
  std::string message;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shell_reply& x) {
  return f(caf::meta::type_name("shell_reply"), x.ok, x.error, x.status,
           x.nodes, x.actors, x.experts, x.lines, x.message);
}

} // namespace tutti
