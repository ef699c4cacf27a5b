// The cluster CA and its certificates: what `tutti certs` writes, who each
// certificate names, key files 0600, and the TLS endpoint's refusal of bad
// files (wrong CA, expired, mismatched key).

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>

#include "test_support.hpp"
#include "tutti/security/certs.hpp"
#include "tutti/security/secret.hpp"
#include "tutti/security/tls.hpp"

using namespace tutti;
using namespace tutti::security;
namespace fs = std::filesystem;

namespace {

unsigned mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 0777;
}

fs::path fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path()
             / ("tutti-certs-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

identity node(int64_t rank) {
  identity who;
  who.kind = identity_kind::node;
  who.node_rank = rank;
  return who;
}

identity user(const std::string& name, const std::string& role) {
  identity who;
  who.user = name;
  who.role = role;
  return who;
}

} // namespace

TEST_CASE("a CA issues node and user certificates with 0600 keys",
          "[security]") {
  auto dir = fresh_dir("issue");
  REQUIRE(init_ca(dir.string(), 30).ok());
  CHECK(mode_of((dir / "ca.key").string()) == 0600);
  CHECK_FALSE(init_ca(dir.string(), 30).ok()); // never overwritten

  auto n1 = issue_certificate(dir.string(), node(1), 3600);
  REQUIRE(n1.ok());
  CHECK(mode_of(n1->key) == 0600);
  auto shown = describe_certificate(n1->cert);
  REQUIRE(shown.ok());
  CHECK(shown->find("CN = node-1") != std::string::npos);
  CHECK(shown->find("names:     node 1") != std::string::npos);
  CHECK(shown->find("server client") != std::string::npos);

  auto alice = issue_certificate(dir.string(), user("alice", "operator"), 60);
  REQUIRE(alice.ok());
  shown = describe_certificate(alice->cert);
  REQUIRE(shown.ok());
  CHECK(shown->find("user alice (operator)") != std::string::npos);

  CHECK_FALSE(issue_certificate(dir.string(), user("bob", "root"), 60).ok());
  CHECK_FALSE(issue_certificate(dir.string(), user("a/b", "viewer"), 60).ok());

  auto loaded = tls_endpoint::load(
    {(dir / "ca.crt").string(), n1->cert, n1->key, "", ""}, tls_role::server);
  REQUIRE(loaded.ok());
  CHECK((*loaded)->self().node_rank == 1);
  fs::remove_all(dir);
}

TEST_CASE("a TLS endpoint refuses another CA's, expired and mismatched files",
          "[security]") {
  auto dir = fresh_dir("refuse");
  auto other = fresh_dir("other");
  REQUIRE(init_ca(dir.string(), 30).ok());
  REQUIRE(init_ca(other.string(), 30).ok());
  const auto ca = (dir / "ca.crt").string();
  auto good = issue_certificate(dir.string(), node(0), 3600);
  REQUIRE(good.ok());
  auto foreign = issue_certificate(other.string(), node(0), 3600);
  REQUIRE(foreign.ok());
  auto expired = issue_certificate(dir.string(), node(0), 60,
                                   (dir / "expired").string(), -7200);
  REQUIRE(expired.ok());

  auto r = tls_endpoint::load({ca, foreign->cert, foreign->key, "", ""},
                              tls_role::server);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("unable to get local issuer") != std::string::npos);
  r = tls_endpoint::load({ca, expired->cert, expired->key, "", ""},
                         tls_role::server);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("expired") != std::string::npos);
  r = tls_endpoint::load({ca, good->cert, foreign->key, "", ""},
                         tls_role::server);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("does not belong") != std::string::npos);
  r = tls_endpoint::load({ca, good->cert, "/nonexistent.key", "", ""},
                         tls_role::server);
  REQUIRE_FALSE(r.ok());
  fs::remove_all(dir);
  fs::remove_all(other);
}

TEST_CASE("a secret prints as *** and comes from a 0600 file", "[security]") {
  secret s("canary-3f9a");
  std::ostringstream out;
  out << s;
  CHECK(out.str() == "***");
  CHECK(to_string(s) == "***");
  auto dir = fresh_dir("secret");
  fs::create_directories(dir);
  const auto path = (dir / "token").string();
  {
    std::ofstream f(path);
    f << "canary-3f9a\n";
  }
  ::chmod(path.c_str(), 0644);
  auto loose = secret_from_file(path);
  REQUIRE_FALSE(loose.ok());
  CHECK(loose.message().find("canary") == std::string::npos);
  ::chmod(path.c_str(), 0600);
  auto read = secret_from_file(path);
  REQUIRE(read.ok());
  CHECK(read->reveal() == "canary-3f9a");
  fs::remove_all(dir);
}
