// Operators' roles and the audit log on a live 2-daemon job with mutual
// TLS: a viewer's kill is refused (naming the role needed) and audited, an
// operator's succeeds and is audited; a client without a certificate does
// not get in; the policy file is re-read without a restart (a revoked user
// is cut off); editing, removing or reordering an audit record makes
// `tutti audit verify` name it. An admin-issued token (stored as a hash)
// stands in for a certificate, with its role enforced.

#include <catch2/catch.hpp>

#include <regex>

#include "security_support.hpp"
#include "test_support.hpp"
#include "tutti/security/api_keys.hpp"

using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

// `tutti shell -c COMMANDS --yes` as `user` (a certificate in pki.dir).
command_result shell_as(const test_pki& pki, const std::string& user, int port,
                        const std::string& commands) {
  const auto d = pki.dir.string();
  std::string env;
  if (!user.empty())
    env = "env TUTTI_TLS_CA=" + d + "/ca.crt TUTTI_TLS_CERT=" + d + "/user-"
          + user + ".crt TUTTI_TLS_KEY=" + d + "/user-" + user + ".key ";
  return run(env + tutti_bin() + " shell --connect 127.0.0.1:"
               + std::to_string(port) + " --yes -c '" + commands + "'",
             60);
}

std::vector<std::string> lines_of(const fs::path& path) {
  std::vector<std::string> out;
  std::istringstream in(read_text(path));
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

void write_lines(const fs::path& path, const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& l : lines)
    text += l + "\n";
  write_text(path, text);
}

} // namespace

TEST_CASE("roles are checked at the coordinator and every action and "
          "refusal is audited in a hash chain",
          "[security]") {
  auto [dir, data] = scratch_with_data("security_roles");
  auto pki = make_pki(dir);
  const int port = port_block(43);
  const auto policy = dir / "policy.yaml";
  write_text(policy, "users:\n  vera: viewer\n  otto: operator\n"
                     "  ada: admin\n");
  auto job = start_tls_job(pki, dir, data, port,
                           "  policy: " + policy.string() + "\n");
  const auto& run_dir = job.run_dir;

  // No certificate: the TLS guard does not let the shell in.
  auto r = shell_as(pki, "", port, "status");
  INFO(r.output);
  CHECK(r.status != 0);
  // A viewer sees, but may not kill.
  r = shell_as(pki, "vera", port, "status");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("running") != std::string::npos);
  r = shell_as(pki, "vera", port, "kill node1/expert_shard/3");
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.output.find("'kill' needs role operator; user vera is viewer")
        != std::string::npos);
  // An operator may.
  r = shell_as(pki, "otto", port, "kill node1/expert_shard/3");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("killed") != std::string::npos);
  // The policy is re-read: otto revoked, no restart.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100)); // new mtime
  write_text(policy, "users:\n  vera: viewer\n  otto: operator\n"
                     "  ada: admin\nrevoked: [otto]\n");
  r = shell_as(pki, "otto", port, "pause");
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.output.find("revoked") != std::string::npos);
  // Audit records are also events in the job's store.
  r = shell_as(pki, "vera", port, "events");
  INFO(r.output);
  CHECK(r.output.find("audit") != std::string::npos);
  CHECK(r.output.find("needs role operator; user vera is viewer")
        != std::string::npos);
  // The admin stops the job.
  r = shell_as(pki, "ada", port, "stop");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(job.node0->wait(120) == 0);
  CHECK(job.node1->wait(60) == 0);

  // The audit log: the refusals and actions, in order, chain intact.
  r = run(tutti_bin() + " audit verify " + run_dir.string(), 30);
  INFO(r.output);
  CHECK(r.status == 0);
  r = run(tutti_bin() + " audit " + run_dir.string(), 30);
  INFO(r.output);
  const auto listed = r.output;
  const auto vera_kill = listed.find("vera (viewer) from 127.0.0.1");
  const auto otto_kill = listed.find("otto (operator) from 127.0.0.1");
  CHECK(vera_kill != std::string::npos);
  CHECK(otto_kill != std::string::npos);
  CHECK(listed.find("kill node1/expert_shard/3 -> refused: 'kill' needs "
                    "role operator")
        != std::string::npos);
  CHECK(listed.find("kill node1/expert_shard/3 -> allowed: killed")
        != std::string::npos);
  CHECK(listed.find("otto (-) from 127.0.0.1") != std::string::npos); // revoked
  CHECK(listed.find("ada (admin)") != std::string::npos);
  const auto audit = run_dir / "audit.jsonl";
  auto original = lines_of(audit);
  REQUIRE(original.size() >= 4);

  auto verify = [&] {
    return run(tutti_bin() + " audit verify " + run_dir.string(), 30);
  };
  // Edited.
  auto edited = original;
  auto at = edited[1].find("\"result\":\"");
  REQUIRE(at != std::string::npos);
  edited[1].insert(at + 10, "nothing happened; ");
  write_lines(audit, edited);
  r = verify();
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("record 2 (line 2) was edited") != std::string::npos);
  // Removed.
  auto removed = original;
  removed.erase(removed.begin() + 1);
  write_lines(audit, removed);
  r = verify();
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("record 2 removed") != std::string::npos);
  // Reordered.
  auto swapped = original;
  std::swap(swapped[1], swapped[2]);
  write_lines(audit, swapped);
  r = verify();
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("record 2 removed: line 2 holds record 3")
        != std::string::npos);
  write_lines(audit, original);
  CHECK(verify().status == 0);
}

TEST_CASE("an admin-issued token stands in for a user certificate: stored "
          "only as a hash, its role enforced",
          "[security]") {
  auto [dir, data] = scratch_with_data("security_tokens");
  auto pki = make_pki(dir);
  const int port = port_block(51);
  const auto policy = dir / "policy.yaml";
  write_text(policy, "users:\n  ada: admin\n");
  auto issued = run(tutti_bin() + " token issue --policy " + policy.string()
                      + " --user tina --role viewer",
                    30);
  INFO(issued.output);
  REQUIRE(issued.status == 0);
  std::smatch printed;
  REQUIRE(std::regex_search(issued.output, printed,
                            std::regex("(^|\n)(tutti_[0-9a-f]{64})\n")));
  const auto token = printed[2].str();
  // The policy file holds its hash, not the token, and is 0600.
  const auto stored = read_text(policy);
  INFO(stored);
  CHECK(stored.find(token) == std::string::npos);
  CHECK(stored.find(tutti::security::sha256_hex(token)) != std::string::npos);
  CHECK((fs::status(policy).permissions() & fs::perms::others_read)
        == fs::perms::none);
  auto job = start_tls_job(pki, dir, data, port,
                           "  policy: " + policy.string() + "\n");
  const auto d = pki.dir.string();
  auto token_file = dir / "token";
  write_text(token_file, token + "\n");
  fs::permissions(token_file, fs::perms::owner_read | fs::perms::owner_write);
  auto shell_with = [&](const std::string& env, const std::string& commands) {
    return run("env TUTTI_TLS_CA=" + d + "/ca.crt " + env + " " + tutti_bin()
                 + " shell --connect 127.0.0.1:" + std::to_string(port)
                 + " --yes -c '" + commands + "'",
               60);
  };
  auto r = shell_with("TUTTI_TOKEN_FILE=" + token_file.string(), "status");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("running") != std::string::npos);
  r = shell_with("TUTTI_TOKEN_FILE=" + token_file.string(),
                 "kill node1/expert_shard/3");
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.output.find("'kill' needs role operator; user tina is viewer")
        != std::string::npos);
  // A wrong token does not get past the guard.
  r = shell_with("TUTTI_TOKEN=tutti_0000", "status");
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(read_text(job.run_dir / "tuttid-0.log.jsonl")
          .find("a token the policy does not hold")
        != std::string::npos);
  r = shell_with("TUTTI_TLS_CERT=" + d + "/user-ada.crt TUTTI_TLS_KEY=" + d
                   + "/user-ada.key",
                 "stop");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(job.node0->wait(120) == 0);
  CHECK(job.node1->wait(60) == 0);
  // Neither the token nor its file's contents reached a log or the audit.
  for (const auto& file :
       {dir / "node0.log", dir / "node1.log",
        job.run_dir / "tuttid-0.log.jsonl", job.run_dir / "audit.jsonl"})
    CHECK(read_text(file).find(token) == std::string::npos);
  r = run(tutti_bin() + " audit " + job.run_dir.string(), 30);
  CHECK(r.output.find("tina (viewer)") != std::string::npos);
}
