// Turns every node's diag_row into the printed report and the straggler
// verdict.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "diag/diag_prober.hpp"

namespace tutti {

namespace {

double median_of(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::string header(size_t n) {
  std::string out = "      ";
  for (size_t j = 0; j < n; ++j) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%9s",
                  ("node" + std::to_string(j)).c_str());
    out += buf;
  }
  return out + "\n";
}

std::string fmt(const char* f, double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), f, x);
  return buf;
}

} // namespace

diag_report make_diag_report(const job_config& cfg,
                             const std::vector<diag_row>& rows_in) {
  diag_report report;
  auto rows = rows_in;
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.node_rank < b.node_rank;
  });
  std::ostringstream out;
  for (const auto& r : rows)
    if (!r.error.empty()) {
      report.ok = false;
      out << "node " << r.node_rank << ": probe failed: " << r.error << "\n";
    }
  if (!report.ok) {
    report.text = out.str();
    return report;
  }
  const size_t n = rows.size();
  out << "point-to-point bandwidth, GB/s (row sends to column)\n" << header(n);
  for (const auto& r : rows) {
    out << fmt("node%-2.0f", static_cast<double>(r.node_rank));
    for (size_t j = 0; j < n; ++j)
      out << (static_cast<int64_t>(j) != r.node_rank
                ? fmt("%9.3f", r.send_gbps[j])
                : std::string("        -"));
    out << "\n";
  }
  out << "latency, us (one 1-byte exchange)\n" << header(n);
  for (const auto& r : rows) {
    out << fmt("node%-2.0f", static_cast<double>(r.node_rank));
    for (size_t j = 0; j < n; ++j)
      out << (static_cast<int64_t>(j) != r.node_rank
                ? fmt("%9.1f", r.latency_us[j])
                : std::string("        -"));
    out << "\n";
  }
  // All ranks of a collective see the same time; node 0's figures stand
  // for the exchange.
  const auto& r0 = rows.front();
  out << "all-to-all bus bandwidth (busbw = algbw * (n-1)/n)\n"
      << "  bytes/peer   tutti GB/s   raw gloo GB/s   ratio\n";
  for (size_t i = 0; i < r0.sizes.size(); ++i)
    out << fmt("%12.0f", static_cast<double>(r0.sizes[i]))
        << fmt("%13.3f", r0.busbw_gbps[i])
        << fmt("%16.3f", r0.raw_busbw_gbps[i])
        << fmt("%8.2f", r0.busbw_gbps[i] / r0.raw_busbw_gbps[i]) << "\n";

  // Each node's outgoing bandwidth: the median over its peers.
  std::vector<double> per_node;
  for (const auto& r : rows) {
    std::vector<double> peers;
    for (size_t j = 0; j < r.send_gbps.size(); ++j)
      if (static_cast<int64_t>(j) != r.node_rank)
        peers.push_back(r.send_gbps[j]);
    per_node.push_back(median_of(peers));
  }
  const bool expected = cfg.cluster.expected_bandwidth_gbps > 0;
  const double reference = expected ? cfg.cluster.expected_bandwidth_gbps
                                    : median_of(per_node);
  out << "reference " << fmt("%.3f", reference) << " GB/s ("
      << (expected ? "cluster_config.expected_bandwidth_gbps"
                   : "median of the cluster")
      << "), straggler below " << fmt("%.0f", cfg.diag.min_fraction * 100)
      << "%\n";
  for (size_t i = 0; i < n; ++i) {
    const double fraction = reference > 0 ? per_node[i] / reference : 0;
    const bool slow = fraction < cfg.diag.min_fraction;
    if (slow)
      report.stragglers.push_back(rows[i].node_rank);
    auto a = cfg.cluster.node(rows[i].node_rank);
    out << "  node " << rows[i].node_rank << " (" << a.host << ":" << a.port
        << (a.rack.empty() ? "" : ", rack " + a.rack)
        << "): " << fmt("%.3f", per_node[i])
        << " GB/s = " << fmt("%.0f", fraction * 100) << "% "
        << (slow ? "STRAGGLER" : "ok") << "\n";
  }
  report.text = out.str();
  return report;
}

} // namespace tutti
