// A fault test under mutual TLS: node 1's daemon killed with kill -9 is
// detected, a new daemon (a new TLS connection with the same node
// certificate) rejoins, and the job finishes with the fault-free run's
// losses, bit for bit, like the same test without TLS (test_faults).

#include <catch2/catch.hpp>

#include "fault_support.hpp"
#include "security_support.hpp"

using namespace tutti::testing;

TEST_CASE("under mutual TLS, a killed daemon is detected, rejoins and "
          "training resumes",
          "[security]") {
  auto pki = make_pki(scratch("security_faults_pki"));
  const auto d = pki.dir.string();
  const std::string tls = "security:\n  required: true\n  tls:\n    ca: " + d
                          + "/ca.crt\n    cert: " + d
                          + "/node-{node}.crt\n    key: " + d
                          + "/node-{node}.key\n";
  fault_job job("security_fault_node_loss", 100, 86, tls);
  job.edit_config("max_wait_s: 60", "max_wait_s: 1");
  auto nodes = job.start_after_reference();
  job.wait_for_random_step(12, 60);
  nodes.node1->kill_and_reap(); // kill -9
  double detect = job.seconds_until("node0.log", "job interrupted", 5);
  INFO("detected after " << detect << " s");
  CHECK(detect >= 0);
  CHECK(job.seconds_until("node0.log", "job paused: waiting for node 1", 5)
        >= 0);
  // The status over TLS, as a viewer.
  auto status = run("env TUTTI_TLS_CA=" + d + "/ca.crt TUTTI_TLS_CERT=" + d
                      + "/user-vera.crt TUTTI_TLS_KEY=" + d + "/user-vera.key "
                      + tutti_bin() + " status " + job.config.string()
                      + " --json",
                    30);
  INFO(status.output);
  CHECK(status.status == 0);
  CHECK(status.output.find("\"state\":\"paused\"") != std::string::npos);
  nodes.node1 = job.daemon(1, "node1-again.log");
  double back = job.seconds_until("job/tuttid-0.log.jsonl", "training resumed",
                                  30);
  INFO("training again " << back << " s after the daemon's return");
  CHECK(back >= 0);
  fault_job::check_finished(nodes);
  job.check_losses();
  check_event_counts(
    job.events(),
    {{"node_lost", 1}, {"node_joined", 1}, {"recovery", 1}, {"resumed", 1}});
}
