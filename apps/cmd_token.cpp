// tutti token issue --policy FILE --user NAME --role ROLE: an admin issues
// an access token (for CLI and shell users without a certificate). The
// token is printed once; the policy file keeps only its SHA-256.

#include <cstdio>

#include "command_line.hpp"
#include "commands.hpp"
#include "tutti/security/access_policy.hpp"

namespace tutti::cli {

namespace {

int token_issue(const std::vector<std::string>& args) {
  command_line cl("token issue", "--policy FILE --user NAME --role ROLE",
                  "a new access token for NAME with ROLE: printed once; the "
                  "policy file\n(security.policy) keeps its SHA-256 only. "
                  "Clients present it with\nTUTTI_TLS_CA and TUTTI_TOKEN_FILE "
                  "(a 0600 file) or TUTTI_TOKEN.\nRevoke it by deleting its "
                  "line from the policy file.");
  cl.options()("policy", po::value<std::string>(), "the policy file")(
    "user", po::value<std::string>(), "who the token stands for")(
    "role", po::value<std::string>(), "viewer, operator or admin");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (!vm.count("policy") || !vm.count("user") || !vm.count("role"))
    return cl.bad("--policy, --user and --role are required");
  auto token = security::issue_token(vm["policy"].as<std::string>(),
                                     vm["user"].as<std::string>(),
                                     vm["role"].as<std::string>());
  if (!token)
    return fail(2, "token issue: " + token.message());
  // The one place a secret is shown: to the admin who asked for it, on
  // stdout, never in a log.
  std::printf("%s\n", token->reveal().c_str());
  std::fprintf(stderr,
               "token for %s (%s) stored as its SHA-256 in %s; it is not "
               "shown again\n",
               vm["user"].as<std::string>().c_str(),
               vm["role"].as<std::string>().c_str(),
               vm["policy"].as<std::string>().c_str());
  return 0;
}

} // namespace

int token_command(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::printf("usage: tutti token issue --policy FILE --user NAME --role "
                "ROLE\n'tutti token issue --help' describes it.\n");
    return 0;
  }
  if (args.empty() || args[0] != "issue")
    return fail(2, "token: usage: tutti token issue --policy FILE --user NAME "
                   "--role ROLE");
  return token_issue({args.begin() + 1, args.end()});
}

} // namespace tutti::cli
