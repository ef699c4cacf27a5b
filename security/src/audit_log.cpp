#include "tutti/security/audit_log.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>

namespace tutti::security {

namespace {

const std::string genesis(64, '0');

std::string sha256_hex(const std::string& data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &n, EVP_sha256(), nullptr)
      != 1)
    return "";
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

nlohmann::ordered_json fields(const audit_record& r) {
  nlohmann::ordered_json j;
  j["seq"] = r.seq;
  j["time"] = r.time;
  j["user"] = r.user;
  j["role"] = r.role;
  j["source"] = r.source;
  j["command"] = r.command;
  j["target"] = r.target;
  j["decision"] = r.decision;
  j["result"] = r.result;
  j["prev"] = r.prev;
  return j;
}

std::string hash_of(const audit_record& r) {
  return sha256_hex(fields(r).dump());
}

std::string now_utc() {
  const auto now = std::chrono::system_clock::now();
  const auto t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    now.time_since_epoch())
                    .count()
                  % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[80];
  std::snprintf(text, sizeof(text), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return text;
}

expected<audit_record> parse_line(const std::string& line) {
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return status::error("not a JSON record");
  audit_record r;
  try {
    r.seq = j.at("seq").get<int64_t>();
    r.time = j.at("time").get<std::string>();
    r.user = j.at("user").get<std::string>();
    r.role = j.at("role").get<std::string>();
    r.source = j.at("source").get<std::string>();
    r.command = j.at("command").get<std::string>();
    r.target = j.at("target").get<std::string>();
    r.decision = j.at("decision").get<std::string>();
    r.result = j.at("result").get<std::string>();
    r.prev = j.at("prev").get<std::string>();
    r.hash = j.at("hash").get<std::string>();
  } catch (const nlohmann::json::exception&) {
    return status::error("a field is missing or of the wrong type");
  }
  return r;
}

} // namespace

std::string audit_record::json_line() const {
  auto j = fields(*this);
  j["hash"] = hash;
  return j.dump();
}

expected<std::vector<audit_record>> read_audit_log(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return status::error("cannot read " + path);
  std::vector<audit_record> out;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty())
      continue;
    auto r = parse_line(line);
    if (!r)
      return status::error(path + ": line " + std::to_string(number) + ": "
                           + r.message());
    out.push_back(std::move(*r));
  }
  return out;
}

status verify_audit_log(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return status::error("cannot read " + path);
  std::string line, prev = genesis;
  int64_t expected_seq = 1, number = 0;
  while (std::getline(in, line)) {
    ++number;
    const auto at = "line " + std::to_string(number);
    auto r = parse_line(line);
    if (!r)
      return status::error("the record at " + at
                           + " was edited: " + r.message());
    const auto name = "record " + std::to_string(r->seq) + " (" + at + ")";
    if (hash_of(*r) != r->hash)
      return status::error(name
                           + " was edited: its hash does not match its fields");
    if (r->seq > expected_seq)
      return status::error(
        "record" + std::string(r->seq - expected_seq > 1 ? "s " : " ")
        + std::to_string(expected_seq)
        + (r->seq - expected_seq > 1 ? ".." + std::to_string(r->seq - 1) : "")
        + " removed: " + at + " holds record " + std::to_string(r->seq));
    if (r->seq < expected_seq)
      return status::error(name + " is out of order: record "
                           + std::to_string(expected_seq)
                           + " was expected there (reordered)");
    if (r->prev != prev)
      return status::error(name + " does not chain to record "
                           + std::to_string(r->seq - 1)
                           + " (removed or reordered before it)");
    prev = r->hash;
    ++expected_seq;
  }
  return {};
}

expected<audit_log> audit_log::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                  0600);
  if (fd < 0)
    return status::error("cannot open the audit log " + path + ": "
                         + std::strerror(errno));
  ::close(fd);
  if (auto ok = verify_audit_log(path); !ok.ok())
    return status::error("the audit log " + path
                         + " does not verify; not extending it: "
                         + ok.message());
  auto records = read_audit_log(path);
  if (!records)
    return records.error();
  audit_log log;
  log.path_ = path;
  log.last_hash_ = records->empty() ? genesis : records->back().hash;
  log.last_seq_ = records->empty() ? 0 : records->back().seq;
  return log;
}

expected<audit_record> audit_log::append(audit_record record) {
  record.seq = last_seq_ + 1;
  if (record.time.empty())
    record.time = now_utc();
  record.prev = last_hash_;
  record.hash = hash_of(record);
  const auto line = record.json_line() + "\n";
  int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0)
    return status::error("cannot open the audit log " + path_ + ": "
                         + std::strerror(errno));
  const auto n = ::write(fd, line.data(), line.size());
  const bool ok = n == static_cast<ssize_t>(line.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok)
    return status::error("cannot append to the audit log " + path_);
  last_seq_ = record.seq;
  last_hash_ = record.hash;
  return record;
}

} // namespace tutti::security
