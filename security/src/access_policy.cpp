#include "tutti/security/access_policy.hpp"

#include "tutti/security/api_keys.hpp"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>

namespace tutti::security {

struct access_policy::rules {
  std::map<std::string, std::string> users; // user -> most role
  std::set<std::string> revoked;
  std::map<std::string, identity> tokens; // SHA-256 hex -> who
};

namespace {

std::string stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return "-";
  return std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec)
         + "." + std::to_string(st.st_mtim.tv_nsec);
}

} // namespace

int role_rank(const std::string& role) {
  if (role == "viewer")
    return 1;
  if (role == "operator")
    return 2;
  if (role == "admin")
    return 3;
  return 0;
}

std::string required_role(const std::string& command) {
  static const std::set<std::string> viewer = {
    "status", "nodes", "actors", "experts", "metrics",
    "events", "logs",  "audit",  "diag",    "help",  "config"};
  // rollback: a job's config (the shell) or a gateway's canary; promote: a
  // gateway's canary to its next step.
  static const std::set<std::string> operator_ = {
    "pause", "resume", "checkpoint", "kill",    "restart",
    "drain", "stop",   "chaos",      "rollback", "promote"};
  if (viewer.count(command))
    return "viewer";
  if (operator_.count(command))
    return "operator";
  return "admin";
}

expected<std::shared_ptr<access_policy>> access_policy::open(
  const std::string& path) {
  std::shared_ptr<access_policy> out(new access_policy(path));
  if (!path.empty())
    TUTTI_RETURN_IF_ERROR(out->reload_if_changed());
  return out;
}

status access_policy::reload_if_changed() {
  const auto stamp = stamp_of(path_);
  if (stamp == stamp_ && rules_)
    return {};
  auto next = std::make_shared<rules>();
  try {
    YAML::Node root = YAML::LoadFile(path_);
    if (auto users = root["users"]) {
      if (!users.IsMap())
        return status::error(path_ + ": users must map a user to a role");
      for (const auto& entry : users) {
        const auto user = entry.first.as<std::string>();
        const auto role = entry.second.as<std::string>();
        if (!known_role(role))
          return status::error(path_ + ": users." + user + ": '" + role
                               + "' is not viewer, operator or admin");
        next->users[user] = role;
      }
    }
    if (auto revoked = root["revoked"]) {
      if (!revoked.IsSequence())
        return status::error(path_ + ": revoked must be a list of users");
      for (const auto& user : revoked)
        next->revoked.insert(user.as<std::string>());
    }
    if (auto tokens = root["tokens"]) {
      if (!tokens.IsMap())
        return status::error(path_
                             + ": tokens must map a SHA-256 to "
                               "{user, role}");
      for (const auto& entry : tokens) {
        identity who;
        who.user = entry.second["user"] ? entry.second["user"].as<std::string>()
                                        : "";
        who.role = entry.second["role"] ? entry.second["role"].as<std::string>()
                                        : "";
        if (who.user.empty() || !known_role(who.role))
          return status::error(path_
                               + ": tokens: each needs a user and a "
                                 "role (viewer, operator or admin)");
        next->tokens[entry.first.as<std::string>()] = who;
      }
    }
  } catch (const YAML::Exception& ex) {
    return status::error(path_ + ": " + ex.what());
  }
  rules_ = std::move(next);
  stamp_ = stamp;
  return {};
}

std::optional<identity> access_policy::token_identity(const secret& token) {
  if (path_.empty() || token.empty())
    return std::nullopt;
  std::shared_ptr<const rules> now;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    (void)reload_if_changed();
    now = rules_;
  }
  if (!now)
    return std::nullopt;
  auto found = now->tokens.find(sha256_hex(token.reveal()));
  if (found == now->tokens.end())
    return std::nullopt;
  return found->second;
}

expected<secret> issue_token(const std::string& path, const std::string& user,
                             const std::string& role) {
  if (!known_role(role))
    return status::error("role '" + role
                         + "' is not one of viewer, operator, admin");
  if (user.empty() || user.find_first_of(" \t\n:") != std::string::npos)
    return status::error("user name '" + user
                         + "' must be non-empty, without spaces or ':'");
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1)
    return status::error("no random bytes for a token");
  static const char* hex = "0123456789abcdef";
  std::string token = "tutti_";
  for (unsigned char b : bytes) {
    token += hex[b >> 4];
    token += hex[b & 15];
  }
  YAML::Node root;
  try {
    if (::access(path.c_str(), F_OK) == 0)
      root = YAML::LoadFile(path);
  } catch (const YAML::Exception& ex) {
    return status::error(path + ": " + ex.what());
  }
  if (!root.IsMap() && !root.IsNull())
    return status::error(path + ": not a policy file (a mapping)");
  if (!root["users"] || !root["users"][user])
    root["users"][user] = role;
  YAML::Node entry;
  entry["user"] = user;
  entry["role"] = role;
  root["tokens"][sha256_hex(token)] = entry;
  YAML::Emitter out;
  out << root;
  const auto temp = path + ".tmp";
  ::unlink(temp.c_str());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return status::error("cannot write " + temp + ": " + std::strerror(errno));
  std::string text = std::string(out.c_str()) + "\n";
  const bool written = ::write(fd, text.data(), text.size())
                         == static_cast<ssize_t>(text.size())
                       && ::fsync(fd) == 0;
  ::close(fd);
  if (!written || ::rename(temp.c_str(), path.c_str()) != 0) {
    ::unlink(temp.c_str());
    return status::error("cannot write " + path + ": " + std::strerror(errno));
  }
  return secret(std::move(token));
}

access_decision access_policy::decide(const identity& who,
                                      const std::string& command) {
  access_decision d;
  d.needed = required_role(command);
  if (who.kind != identity_kind::user) {
    d.why = "'" + command + "' needs a user with role " + d.needed + "; "
            + who.text() + " is not an operator";
    return d;
  }
  d.role = who.role;
  std::shared_ptr<const rules> now;
  if (!path_.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    // A policy that no longer parses keeps the last good one.
    (void)reload_if_changed();
    now = rules_;
  }
  if (now) {
    auto listed = now->users.find(who.user);
    if (now->revoked.count(who.user)) {
      d.role.clear();
      d.why = "user " + who.user + " is revoked by the policy";
      return d;
    }
    if (listed == now->users.end()) {
      d.role.clear();
      d.why = "user " + who.user + " is not in the policy (deny by default)";
      return d;
    }
    if (role_rank(listed->second) < role_rank(d.role))
      d.role = listed->second;
  }
  d.allowed = role_rank(d.role) >= role_rank(d.needed);
  if (!d.allowed)
    d.why = "'" + command + "' needs role " + d.needed + "; user " + who.user
            + " is " + (d.role.empty() ? std::string("no role") : d.role);
  return d;
}

} // namespace tutti::security
