// tutti certs init DIR | issue --node N | issue --user NAME --role ROLE |
// show FILE: the cluster's certificate authority and the certificates it
// issues (OpenSSL; EC P-256 keys written 0600).

#include <cstdio>

#include "command_line.hpp"
#include "commands.hpp"
#include "tutti/security/certs.hpp"

namespace tutti::cli {

namespace {

const char* certs_usage = "init DIR | issue --ca DIR (--node N | --user NAME "
                          "--role ROLE) | show FILE |\n"
                          "  revoke --ca DIR (--node N | --user NAME | --cert "
                          "FILE)";

int certs_init(const std::vector<std::string>& args) {
  command_line cl("certs init", "DIR [--days D]",
                  "a new cluster CA: DIR/ca.crt and DIR/ca.key (0600)");
  cl.options()("days", po::value<int64_t>()->default_value(365),
               "how long the CA is valid");
  cl.required("dir", "DIR");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  const auto dir = vm["dir"].as<std::string>();
  if (auto s = security::init_ca(dir, vm["days"].as<int64_t>()); !s.ok())
    return fail(s.message().find("already") != std::string::npos ? 2 : 1,
                "certs init: " + s.message());
  std::printf("CA written: %s/ca.crt, %s/ca.key (keep ca.key offline)\n",
              dir.c_str(), dir.c_str());
  return 0;
}

int certs_issue(const std::vector<std::string>& args) {
  command_line cl("certs issue",
                  "--ca DIR (--node N | --user NAME --role ROLE) [--days D] "
                  "[--out DIR]",
                  "a certificate signed by the CA in --ca: a node's (serves "
                  "and connects;\nsubject CN=node-N) or a user's (CN=NAME, "
                  "OU=viewer|operator|admin)");
  cl.options()("ca", po::value<std::string>(),
               "the CA directory")("node", po::value<int64_t>(), "node rank")(
    "user", po::value<std::string>(),
    "user name")("role", po::value<std::string>(), "viewer, operator or admin")(
    "days", po::value<int64_t>()->default_value(7),
    "how long it is valid (short-lived: rotate)")(
    "out", po::value<std::string>(), "where to write (default: the CA dir)")(
    "passphrase-file", po::value<std::string>(),
    "encrypt the key with the passphrase in this 0600 file (else "
    "TUTTI_KEY_PASSPHRASE, if set; never a flag's value)");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (!vm.count("ca"))
    return cl.bad("--ca DIR is required");
  const bool node = vm.count("node") > 0, user = vm.count("user") > 0;
  if (node == user)
    return cl.bad("give exactly one of --node N or --user NAME");
  security::identity who;
  if (node) {
    who.kind = security::identity_kind::node;
    who.node_rank = vm["node"].as<int64_t>();
    if (who.node_rank < 0)
      return cl.bad("--node must be >= 0");
  } else {
    if (!vm.count("role"))
      return cl.bad("--user needs --role viewer|operator|admin");
    who.user = vm["user"].as<std::string>();
    who.role = vm["role"].as<std::string>();
    if (!security::known_role(who.role))
      return cl.bad("--role must be viewer, operator or admin, not '" + who.role
                    + "'");
  }
  const auto days = vm["days"].as<int64_t>();
  if (days < 1 || days > 397)
    return cl.bad("--days must be in 1..397");
  security::secret passphrase;
  if (vm.count("passphrase-file")) {
    auto read = security::secret_from_file(
      vm["passphrase-file"].as<std::string>());
    if (!read)
      return cl.bad("--passphrase-file: " + read.message());
    passphrase = *read;
  } else if (auto env = security::secret_from_env("TUTTI_KEY_PASSPHRASE")) {
    passphrase = *env;
  }
  auto issued = security::issue_certificate(
    vm["ca"].as<std::string>(), who, days * 86400,
    vm.count("out") ? vm["out"].as<std::string>() : "", -60, passphrase);
  if (!issued)
    return fail(1, "certs issue: " + issued.message());
  std::printf("issued %s for %lld days: %s, %s (0600%s)\n", who.text().c_str(),
              static_cast<long long>(days), issued->cert.c_str(),
              issued->key.c_str(), passphrase.empty() ? "" : ", encrypted");
  return 0;
}

int certs_show(const std::vector<std::string>& args) {
  command_line cl("certs show", "FILE", "what a PEM certificate holds");
  cl.required("file", "FILE");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  auto text = security::describe_certificate(vm["file"].as<std::string>());
  if (!text)
    return fail(2, "certs show: " + text.message());
  std::fputs(text->c_str(), stdout);
  return 0;
}

int certs_revoke(const std::vector<std::string>& args) {
  command_line cl("certs revoke",
                  "--ca DIR (--node N | --user NAME | --cert FILE)",
                  "adds a certificate to the CA's revocation list DIR/ca.crl;"
                  "\ndaemons whose security.tls.crl is that file refuse it "
                  "and close\nits open connections");
  cl.options()("ca", po::value<std::string>(), "the CA directory")(
    "node", po::value<int64_t>(), "revoke DIR/node-N.crt")(
    "user", po::value<std::string>(), "revoke DIR/user-NAME.crt")(
    "cert", po::value<std::string>(), "revoke this certificate file");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (!vm.count("ca"))
    return cl.bad("--ca DIR is required");
  const auto ca = vm["ca"].as<std::string>();
  if (vm.count("node") + vm.count("user") + vm.count("cert") != 1)
    return cl.bad("give exactly one of --node N, --user NAME or --cert FILE");
  std::string cert;
  if (vm.count("node"))
    cert = ca + "/node-" + std::to_string(vm["node"].as<int64_t>()) + ".crt";
  else if (vm.count("user"))
    cert = ca + "/user-" + vm["user"].as<std::string>() + ".crt";
  else
    cert = vm["cert"].as<std::string>();
  auto crl = security::revoke_certificate(ca, cert);
  if (!crl)
    return fail(2, "certs revoke: " + crl.message());
  std::printf("revoked %s: listed in %s\n", cert.c_str(), crl->c_str());
  return 0;
}

} // namespace

int certs_command(const std::vector<std::string>& args) {
  if (args.empty())
    return fail(2, std::string("certs: usage: tutti certs ") + certs_usage);
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "init")
    return certs_init(rest);
  if (args[0] == "issue")
    return certs_issue(rest);
  if (args[0] == "show")
    return certs_show(rest);
  if (args[0] == "revoke")
    return certs_revoke(rest);
  if (args[0] == "--help" || args[0] == "-h") {
    std::printf("usage: tutti certs %s\n'tutti certs SUB --help' describes "
                "each.\n",
                certs_usage);
    return 0;
  }
  return fail(2, "certs: unknown subcommand '" + args[0]
                   + "' (init, issue, show or revoke)");
}

} // namespace tutti::cli
