// Secrets stay secret: a canary passphrase on every node key (read from a
// 0600 file named in the config) appears nowhere in the daemons' logs, the
// job's events, metrics (metrics.jsonl and /metrics), `status`, error
// messages or /proc/PID/cmdline; a wrong passphrase is refused without
// being echoed.

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include "security_support.hpp"
#include "test_support.hpp"

using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

const std::string canary = "canary-5e3c9b-do-not-print";

std::string cmdline_of(pid_t pid) {
  auto text = read_text("/proc/" + std::to_string(pid) + "/cmdline");
  for (auto& c : text)
    if (c == '\0')
      c = ' ';
  return text;
}

std::string http_get(int port, const std::string& path) {
  int fd = tcp_connect("127.0.0.1", port);
  if (fd < 0)
    return "";
  send_bytes(fd, "GET " + path + " HTTP/1.0\r\nHost: x\r\n\r\n");
  auto out = recv_for(fd, 2000);
  close(fd);
  return out;
}

std::string every_file_under(const fs::path& dir) {
  std::string all;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() != ".tok")
      all += read_text(e.path());
  return all;
}

} // namespace

TEST_CASE("a canary secret appears in no log, event, metric, status, error "
          "or command line",
          "[security]") {
  using namespace tutti::security;
  auto [dir, data] = scratch_with_data("security_secrets");
  auto pki = make_pki(dir);
  const auto enc = dir / "encrypted";
  for (int64_t n : {0, 1}) {
    identity node;
    node.kind = identity_kind::node;
    node.node_rank = n;
    REQUIRE(issue_certificate(pki.dir.string(), node, 86400, enc.string(), -60,
                              secret(canary))
              .ok());
  }
  CHECK(read_text(enc / "node-0.key").find(canary) == std::string::npos);
  const auto pass = dir / "passphrase";
  write_text(pass, canary + "\n");
  ::chmod(pass.c_str(), 0600);
  const int port = port_block(44);
  const int metrics_port = port + 5;
  const auto run_dir = dir / "run";
  auto text = tls_daemon_config(pki, data.string(), run_dir.string(), port,
                                100000);
  for (const std::string from :
       {"/pki/node-{node}.crt", "/pki/node-{node}.key"})
    text = replace_once(
      text, from, "/encrypted/node-{node}." + from.substr(from.size() - 3));
  text += "    key_passphrase_file: " + pass.string() + "\n";
  text += "metrics:\n  port: " + std::to_string(metrics_port) + "\n";
  auto config = dir / "job.yaml";
  write_text(config, text);

  // A wrong passphrase: refused, and not echoed.
  const auto wrong = dir / "wrong";
  write_text(wrong, "wrong-" + canary + "\n");
  ::chmod(wrong.c_str(), 0600);
  auto bad = dir / "bad.yaml";
  auto bad_text = text;
  bad_text.replace(bad_text.find(pass.string()), pass.string().size(),
                   wrong.string());
  write_text(bad, bad_text);
  auto r = run(tuttid_bin() + " --config " + bad.string() + " --node-rank 1",
               30);
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(r.output.find("wrong passphrase") != std::string::npos);
  CHECK(r.output.find(canary) == std::string::npos);

  auto node0 = start_daemon(config, 0, dir / "node0.log");
  auto node1 = start_daemon(config, 1, dir / "node1.log");
  REQUIRE(wait_until(
    [&] {
      return count_lines(run_dir / "metrics.jsonl") >= 3 || !node0->running()
             || !node1->running();
    },
    120));
  INFO(tail(read_text(run_dir / "tuttid-0.log.jsonl")));
  REQUIRE(node0->running());
  REQUIRE(node1->running());
  std::string seen = cmdline_of(node0->pid()) + cmdline_of(node1->pid());
  CHECK(seen.find("--config") != std::string::npos); // it did read them
  const auto d = pki.dir.string();
  const auto as_admin = "env TUTTI_TLS_CA=" + d + "/ca.crt TUTTI_TLS_CERT=" + d
                        + "/user-ada.crt TUTTI_TLS_KEY=" + d + "/user-ada.key ";
  auto shell = [&](const std::string& commands, const std::string& flags = "") {
    auto out = run(as_admin + tutti_bin() + " shell " + flags
                     + " --connect 127.0.0.1:" + std::to_string(port) + " -c '"
                     + commands + "'",
                   60);
    INFO(out.output);
    CHECK(out.status == 0);
    return out.output;
  };
  seen += shell("status; nodes; events; metrics; logs --lines 1000");
  seen += shell("status; events", "--json");
  const auto scraped = http_get(metrics_port, "/metrics")
                       + http_get(metrics_port + 1, "/metrics");
  CHECK(scraped.find("tutti_") != std::string::npos);
  seen += scraped;
  shell("stop");
  CHECK(node0->wait(120) == 0);
  CHECK(node1->wait(60) == 0);
  seen += read_text(dir / "node0.log") + read_text(dir / "node1.log");
  seen += every_file_under(run_dir);
  CHECK(seen.size() > 10000);
  CHECK(seen.find(canary) == std::string::npos);
}
