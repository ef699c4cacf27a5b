// Turns every node's diag_row into the printed report and the straggler
// verdict.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "diag/diag_prober.hpp"
#include "tutti/placement/topology.hpp"

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

// A link class measured this many times above or below its configured
// figure is flagged: the placement planner and the capacity plan price
// traffic with the figures, so a wrong one misleads both.
constexpr double far_factor = 2;

// The node-to-node matrix by link class (nodes of one rack, or of two),
// the median of each next to the figure the config gives it.
std::string by_link_class(const job_config& cfg,
                          const std::vector<diag_row>& rows) {
  std::ostringstream out;
  out << "bandwidth by link class, GB/s (median over node pairs)\n"
      << "  class        pairs   measured  configured   ratio\n";
  auto topo = placement::topology::from_config(cfg);
  if (!topo)
    return out.str() + "  " + topo.message() + "\n";
  const auto& cl = cfg.cluster;
  for (auto c : {placement::link_class::intra_rack,
                 placement::link_class::inter_rack}) {
    std::vector<double> measured;
    for (const auto& r : rows)
      for (size_t j = 0; j < r.send_gbps.size(); ++j) {
        if (static_cast<int64_t>(j) == r.node_rank)
          continue;
        const bool same = cl.node(r.node_rank).rack
                          == cl.node(static_cast<int64_t>(j)).rack;
        if (same == (c == placement::link_class::intra_rack))
          measured.push_back(r.send_gbps[j]);
      }
    const bool given = c == placement::link_class::intra_rack
                         ? cl.intra_rack_gbps > 0
                             || !cl.intra_rack_backend.empty()
                         : cl.inter_rack_gbps > 0
                             || !cl.inter_rack_backend.empty();
    const double configured = topo->gbps(c) / 8; // Gb/s to GB/s
    char line[160];
    std::snprintf(line, sizeof(line), "  %-11s %6zu", placement::to_string(c),
                  measured.size());
    out << line;
    if (measured.empty()) {
      out << "          -  (no such pair of nodes)\n";
      continue;
    }
    const double m = median_of(measured);
    const double ratio = configured > 0 ? m / configured : 0;
    out << fmt("%11.3f", m) << fmt("%12.3f", configured) << fmt("%8.2f", ratio);
    if (!given)
      out << "  (default figure)";
    else if (ratio < 1 / far_factor || ratio > far_factor)
      out << "  FAR FROM CONFIGURED";
    out << "\n";
  }
  out << "  intra_node       -          -" << fmt("%12.3f",
                                                  topo->intra_node_gbps / 8)
      << "       -  (not probed: diag measures between nodes)\n";
  return out.str();
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

  out << by_link_class(cfg, rows);

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
