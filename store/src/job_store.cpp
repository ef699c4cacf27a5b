#include "tutti/store/job_store.hpp"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "msgpack_util.hpp"
#include "rocksdb_check.hpp"
#include "tutti/store/atomic_file.hpp"

namespace tutti::store {
namespace {

// Order matches the cf_* indices below.
const char* const cf_names[] = {"job_spec", "job_state", "checkpoints",
                                "events", "config_versions", "routing_stats"};
enum cf_index {
  cf_spec,
  cf_state,
  cf_ckpt,
  cf_events,
  cf_versions,
  cf_routing,
  cf_count
};

// Numeric keys are zero-padded decimal: RocksDB's bytewise order is then
// numeric order, and `ldb scan` output stays readable.
std::string number_key(std::int64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%020lld", static_cast<long long>(n));
  return buf;
}

bool parse_number_key(const rocksdb::Slice& k, std::int64_t& out) {
  if (k.size() != 20)
    return false;
  out = 0;
  for (std::size_t i = 0; i < k.size(); ++i) {
    if (k[i] < '0' || k[i] > '9')
      return false;
    out = out * 10 + (k[i] - '0');
  }
  return true;
}

std::int64_t now_unix_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch())
    .count();
}

} // namespace

struct job_store::impl {
  std::filesystem::path dir;
  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles; // every family opened
  rocksdb::ColumnFamilyHandle* cf[cf_count] = {};
  rocksdb::WriteOptions commit; // sync = true: a commit survives power loss
  rocksdb::WriteOptions
    append;          // events: in the WAL at once, synced by the next commit
  std::mutex seq_mu; // orders event appends with their seq numbers
  std::int64_t next_seq = 1;

  ~impl() {
    // Nothing can report an error from a destructor; every commit was
    // already synced, so a failing Close loses nothing that was promised.
    for (auto* h : handles)
      (void)db->DestroyColumnFamilyHandle(h);
    if (db != nullptr) {
      (void)db->Close();
      delete db;
    }
  }

  // "job store <dir>: <what>: <error>" so a message names the database.
  std::string context(const char* what, const std::string& err) const {
    return "job store " + dir.string() + ": " + what + ": " + err;
  }

  status put(cf_index c, const std::string& key, const msgpack::sbuffer& v,
             const rocksdb::WriteOptions& wo) {
    TUTTI_ROCKSDB_CHECK(
      db->Put(wo, cf[c], key, rocksdb::Slice(v.data(), v.size())));
    return {};
  }

  // Reads one key: nullopt value when absent.
  expected<std::optional<std::string>> get(cf_index c, const std::string& key) {
    std::string v;
    bool found = false;
    TUTTI_ROCKSDB_GET(db->Get(rocksdb::ReadOptions(), cf[c], key, &v), found);
    if (!found)
      return std::nullopt;
    return v;
  }

  // Calls fn(key, value) for every record of a family in key order; fn
  // returns a status and the first error stops the scan.
  template <class F>
  status scan(rocksdb::ColumnFamilyHandle* h, F&& fn) {
    std::unique_ptr<rocksdb::Iterator> it(
      db->NewIterator(rocksdb::ReadOptions(), h));
    for (it->SeekToFirst(); it->Valid(); it->Next())
      if (auto err = fn(it->key(), it->value()); !err)
        return err;
    TUTTI_ROCKSDB_CHECK(it->status());
    return {};
  }

  // Decodes a stored msgpack map; the error names family and key.
  expected<msgpack::object_handle> decode(cf_index c, const rocksdb::Slice& key,
                                          const rocksdb::Slice& value) const {
    auto oh = detail::mp::unpack(value.data(), value.size());
    if (!oh.ok() || oh.value().get().type != msgpack::type::MAP)
      return status::error(
        "corrupt record " + std::string(cf_names[c]) + "/" + key.ToString()
        + ": " + (oh.ok() ? std::string("not a map") : oh.message()));
    return oh;
  }

  std::string bad_field(cf_index c, const rocksdb::Slice& key,
                        const char* field) const {
    return "corrupt record " + std::string(cf_names[c]) + "/" + key.ToString()
           + ": missing or mistyped field '" + field + "'";
  }

  status open(const rocksdb::DBOptions& opts, bool read_only = false) {
    auto hint = [this](const rocksdb::Status& s) {
      std::string m = s.ToString(), d = "job store " + dir.string();
      if (s.IsIOError()
          && m.find("lock hold by current process") != std::string::npos)
        return d + " is locked: it is already open in this process; ";
      if (s.IsIOError() && m.find("lock file") != std::string::npos)
        return d
               + " is locked by another process (another tutti or tuttid on "
                 "this data dir?); ";
      if (s.IsCorruption())
        return d + " is corrupt (move it aside to start over); ";
      return "cannot open " + d + ": ";
    };
    // Open every family present, not only ours: a store written by a newer
    // version with an extra family still opens.
    std::vector<std::string> names(cf_names, cf_names + cf_count);
    names.push_back(rocksdb::kDefaultColumnFamilyName);
    std::error_code ec;
    // Read-only opens only the families present (an older store may lack
    // some; those read as empty).
    if (read_only)
      names.clear();
    if (std::filesystem::exists(dir / "CURRENT", ec)) {
      std::vector<std::string> present;
      TUTTI_ROCKSDB_CHECK_HINT(
        rocksdb::DB::ListColumnFamilies(opts, dir.string(), &present), hint);
      for (auto& n : present)
        if (std::find(names.begin(), names.end(), n) == names.end())
          names.push_back(n);
    }
    std::vector<rocksdb::ColumnFamilyDescriptor> descs;
    for (auto& n : names)
      descs.emplace_back(n, rocksdb::ColumnFamilyOptions());
    if (read_only) {
      if (names.empty())
        return status::error("job store " + dir.string()
                             + " does not exist (no CURRENT file)");
      TUTTI_ROCKSDB_CHECK_HINT(rocksdb::DB::OpenForReadOnly(
                                 opts, dir.string(), descs, &handles, &db),
                               hint);
      for (int c = 0; c < cf_count; ++c)
        for (size_t i = 0; i < names.size(); ++i)
          if (names[i] == cf_names[c])
            cf[c] = handles[i];
      return {};
    }
    TUTTI_ROCKSDB_CHECK_HINT(
      rocksdb::DB::Open(opts, dir.string(), descs, &handles, &db), hint);
    for (int c = 0; c < cf_count; ++c)
      cf[c] = handles[c];
    // Sequence numbers continue after the newest stored event.
    std::unique_ptr<rocksdb::Iterator> it(
      db->NewIterator(rocksdb::ReadOptions(), cf[cf_events]));
    it->SeekToLast();
    std::int64_t last = 0;
    if (it->Valid() && !parse_number_key(it->key(), last))
      return status::error("job store " + dir.string() + ": corrupt event key "
                           + it->key().ToString(true));
    TUTTI_ROCKSDB_CHECK(it->status());
    next_seq = last + 1;
    return {};
  }
};

job_store::job_store(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
job_store::~job_store() = default;
const std::filesystem::path& job_store::dir() const { return impl_->dir; }

expected<std::unique_ptr<job_store>> job_store::open(
  const std::filesystem::path& dir) {
  using result = std::unique_ptr<job_store>;
  if (auto err = create_directories_durable(dir); !err)
    return status::error("cannot create job store: " + err.message());
  rocksdb::DBOptions opts;
  opts.create_if_missing = true;
  opts.create_missing_column_families = true;
  opts.keep_log_file_num = 4; // RocksDB's info LOGs: a daemon restarts often
  auto p = std::make_unique<impl>();
  p->dir = dir;
  p->commit.sync = true;
  TUTTI_RETURN_IF_ERROR(p->open(opts));
  return result(new job_store(std::move(p)));
}

expected<std::unique_ptr<job_store>> job_store::open_read_only(
  const std::filesystem::path& dir) {
  using result = std::unique_ptr<job_store>;
  rocksdb::DBOptions opts;
  auto p = std::make_unique<impl>();
  p->dir = dir;
  TUTTI_RETURN_IF_ERROR(p->open(opts, /*read_only=*/true));
  return result(new job_store(std::move(p)));
}

status job_store::put_routing_window(std::int64_t last_step,
                                     const std::string& json) {
  if (impl_->cf[cf_routing] == nullptr)
    return status::error(impl_->context("put_routing_window",
                                        "opened read-only"));
  msgpack::sbuffer buf;
  detail::mp::packer pk(buf);
  pk.pack_map(3);
  detail::mp::key(pk, "last_step"), pk.pack(last_step);
  detail::mp::key(pk, "time_unix_ms"), pk.pack(now_unix_ms());
  detail::mp::key(pk, "json"), pk.pack(json);
  // Like events: in the WAL at once, synced by the next commit.
  if (auto err = impl_->put(cf_routing, number_key(last_step), buf,
                            impl_->append);
      !err)
    return status::error(impl_->context("put_routing_window", err.message()));
  return {};
}

expected<std::vector<std::pair<std::int64_t, std::string>>>
job_store::routing_windows() {
  std::vector<std::pair<std::int64_t, std::string>> out;
  if (impl_->cf[cf_routing] == nullptr)
    return out;
  auto err = impl_->scan(
    impl_->cf[cf_routing],
    [&](const rocksdb::Slice& k, const rocksdb::Slice& v) -> status {
      auto oh = impl_->decode(cf_routing, k, v);
      if (!oh.ok())
        return status::error(oh.message());
      std::pair<std::int64_t, std::string> w;
      if (!detail::mp::get(oh.value().get(), "last_step", w.first)
          || !detail::mp::get(oh.value().get(), "json", w.second))
        return status::error(
          impl_->bad_field(cf_routing, k, "last_step/json"));
      out.push_back(std::move(w));
      return {};
    });
  if (!err)
    return status::error(impl_->context("routing_windows", err.message()));
  return out;
}

status job_store::put_job_spec(const std::string& fingerprint,
                               const std::string& config_yaml) {
  msgpack::sbuffer buf;
  detail::mp::packer pk(buf);
  pk.pack_map(3);
  detail::mp::key(pk, "fingerprint"), pk.pack(fingerprint);
  detail::mp::key(pk, "config_yaml"), pk.pack(config_yaml);
  detail::mp::key(pk, "time_unix_ms"), pk.pack(now_unix_ms());
  if (auto err = impl_->put(cf_spec, "spec", buf, impl_->commit); !err)
    return status::error(impl_->context("put_job_spec", err.message()));
  return {};
}

expected<std::optional<std::pair<std::string, std::string>>>
job_store::job_spec() {
  auto v = impl_->get(cf_spec, "spec");
  if (!v.ok())
    return status::error(impl_->context("job_spec", v.message()));
  if (!v.value())
    return std::nullopt;
  auto oh = impl_->decode(cf_spec, "spec", *v.value());
  if (!oh.ok())
    return status::error(impl_->context("job_spec", oh.message()));
  std::pair<std::string, std::string> out;
  if (!detail::mp::get(oh.value().get(), "fingerprint", out.first)
      || !detail::mp::get(oh.value().get(), "config_yaml", out.second))
    return status::error(
      impl_->context("job_spec", impl_->bad_field(cf_spec, "spec",
                                                  "fingerprint/config_yaml")));
  return out;
}

status job_store::put_job_state(const std::string& state, std::int64_t step) {
  msgpack::sbuffer buf;
  detail::mp::packer pk(buf);
  pk.pack_map(3);
  detail::mp::key(pk, "state"), pk.pack(state);
  detail::mp::key(pk, "step"), pk.pack(step);
  detail::mp::key(pk, "time_unix_ms"), pk.pack(now_unix_ms());
  if (auto err = impl_->put(cf_state, "state", buf, impl_->commit); !err)
    return status::error(impl_->context("put_job_state", err.message()));
  return {};
}

expected<std::optional<std::pair<std::string, std::int64_t>>>
job_store::job_state() {
  auto v = impl_->get(cf_state, "state");
  if (!v.ok())
    return status::error(impl_->context("job_state", v.message()));
  if (!v.value())
    return std::nullopt;
  auto oh = impl_->decode(cf_state, "state", *v.value());
  if (!oh.ok())
    return status::error(impl_->context("job_state", oh.message()));
  std::pair<std::string, std::int64_t> out;
  if (!detail::mp::get(oh.value().get(), "state", out.first)
      || !detail::mp::get(oh.value().get(), "step", out.second))
    return status::error(impl_->context(
      "job_state", impl_->bad_field(cf_state, "state", "state/step")));
  return out;
}

status job_store::commit_checkpoint(const checkpoint_record& r) {
  if (r.step < 0)
    return status::error(impl_->context(
      "commit_checkpoint", "negative step " + std::to_string(r.step)));
  msgpack::sbuffer buf;
  detail::mp::packer pk(buf);
  pk.pack_map(5);
  detail::mp::key(pk, "step"), pk.pack(r.step);
  detail::mp::key(pk, "dir"), pk.pack(r.dir);
  detail::mp::key(pk, "bytes"), pk.pack(r.bytes);
  detail::mp::key(pk, "time_unix_ms"),
    pk.pack(r.time_unix_ms != 0 ? r.time_unix_ms : now_unix_ms());
  detail::mp::key(pk, "epoch"), pk.pack(r.epoch);
  if (auto err = impl_->put(cf_ckpt, number_key(r.step), buf, impl_->commit);
      !err)
    return status::error(impl_->context("commit_checkpoint", err.message()));
  return {};
}

expected<std::vector<checkpoint_record>> job_store::checkpoints() {
  std::vector<checkpoint_record> out;
  auto err = impl_->scan(
    impl_->cf[cf_ckpt],
    [&](const rocksdb::Slice& k, const rocksdb::Slice& v) -> status {
      auto oh = impl_->decode(cf_ckpt, k, v);
      if (!oh.ok())
        return status::error(oh.message());
      const auto& m = oh.value().get();
      checkpoint_record r;
      if (!detail::mp::get(m, "step", r.step)
          || !detail::mp::get(m, "dir", r.dir)
          || !detail::mp::get(m, "bytes", r.bytes)
          || !detail::mp::get(m, "time_unix_ms", r.time_unix_ms)
          || !detail::mp::get(m, "epoch", r.epoch))
        return status::error(
          impl_->bad_field(cf_ckpt, k, "step/dir/bytes/time_unix_ms/epoch"));
      out.push_back(std::move(r));
      return {};
    });
  if (!err)
    return status::error(impl_->context("checkpoints", err.message()));
  return out;
}

status job_store::remove_checkpoint(std::int64_t step) {
  auto del = [&]() -> status {
    TUTTI_ROCKSDB_CHECK(
      impl_->db->Delete(impl_->commit, impl_->cf[cf_ckpt], number_key(step)));
    return {};
  };
  if (auto err = del(); !err)
    return status::error(impl_->context("remove_checkpoint", err.message()));
  return {};
}

expected<std::int64_t> job_store::append_event(const std::string& kind,
                                               const std::string& detail,
                                               double duration_s) {
  std::lock_guard<std::mutex> lock(impl_->seq_mu);
  std::int64_t seq = impl_->next_seq;
  msgpack::sbuffer buf;
  detail::mp::packer pk(buf);
  pk.pack_map(5);
  detail::mp::key(pk, "seq"), pk.pack(seq);
  detail::mp::key(pk, "time_unix_ms"), pk.pack(now_unix_ms());
  detail::mp::key(pk, "kind"), pk.pack(kind);
  detail::mp::key(pk, "detail"), pk.pack(detail);
  detail::mp::key(pk, "duration_s"), pk.pack_double(duration_s);
  if (auto err = impl_->put(cf_events, number_key(seq), buf, impl_->append);
      !err)
    return status::error(impl_->context("append_event", err.message()));
  ++impl_->next_seq;
  return seq;
}

expected<std::vector<event>> job_store::events(std::int64_t since_unix_ms) {
  std::vector<event> out;
  // A full scan rather than a time index: the log is small (events are rare)
  // and wall clocks can step backwards, so seq order is not time order.
  auto err = impl_->scan(
    impl_->cf[cf_events],
    [&](const rocksdb::Slice& k, const rocksdb::Slice& v) -> status {
      auto oh = impl_->decode(cf_events, k, v);
      if (!oh.ok())
        return status::error(oh.message());
      const auto& m = oh.value().get();
      event e;
      if (!detail::mp::get(m, "seq", e.seq)
          || !detail::mp::get(m, "time_unix_ms", e.time_unix_ms)
          || !detail::mp::get(m, "kind", e.kind)
          || !detail::mp::get(m, "detail", e.detail)
          || !detail::mp::get(m, "duration_s", e.duration_s))
        return status::error(impl_->bad_field(
          cf_events, k, "seq/time_unix_ms/kind/detail/duration_s"));
      if (e.time_unix_ms >= since_unix_ms)
        out.push_back(std::move(e));
      return {};
    });
  if (!err)
    return status::error(impl_->context("events", err.message()));
  return out;
}

status job_store::put_config_version(const config_version_record& r) {
  if (r.version < 1)
    return status::error(impl_->context(
      "put_config_version", "version " + std::to_string(r.version) + " < 1"));
  msgpack::sbuffer buf;
  detail::mp::packer pk(buf);
  pk.pack_map(7);
  detail::mp::key(pk, "version"), pk.pack(r.version);
  detail::mp::key(pk, "time_unix_ms"),
    pk.pack(r.time_unix_ms != 0 ? r.time_unix_ms : now_unix_ms());
  detail::mp::key(pk, "who"), pk.pack(r.who);
  detail::mp::key(pk, "reason"), pk.pack(r.reason);
  detail::mp::key(pk, "config_yaml"), pk.pack(r.config_yaml);
  detail::mp::key(pk, "values"), pk.pack(r.values);
  detail::mp::key(pk, "diff"), pk.pack(r.diff);
  if (auto err = impl_->put(cf_versions, number_key(r.version), buf,
                            impl_->commit);
      !err)
    return status::error(impl_->context("put_config_version", err.message()));
  return {};
}

expected<std::vector<config_version_record>> job_store::config_versions() {
  std::vector<config_version_record> out;
  auto err = impl_->scan(
    impl_->cf[cf_versions],
    [&](const rocksdb::Slice& k, const rocksdb::Slice& v) -> status {
      auto oh = impl_->decode(cf_versions, k, v);
      if (!oh.ok())
        return status::error(oh.message());
      const auto& m = oh.value().get();
      config_version_record r;
      if (!detail::mp::get(m, "version", r.version)
          || !detail::mp::get(m, "time_unix_ms", r.time_unix_ms)
          || !detail::mp::get(m, "who", r.who)
          || !detail::mp::get(m, "reason", r.reason)
          || !detail::mp::get(m, "config_yaml", r.config_yaml)
          || !detail::mp::get(m, "values", r.values)
          || !detail::mp::get(m, "diff", r.diff))
        return status::error(impl_->bad_field(
          cf_versions, k,
          "version/time_unix_ms/who/reason/config_yaml/values/diff"));
      out.push_back(std::move(r));
      return {};
    });
  if (!err)
    return status::error(impl_->context("config_versions", err.message()));
  return out;
}

status job_store::reset() {
  std::lock_guard<std::mutex> lock(impl_->seq_mu);
  auto drop = [&]() -> status {
    // One synced batch: after a crash the store is either untouched or empty.
    rocksdb::WriteBatch batch;
    for (auto* h : impl_->handles) {
      auto err = impl_->scan(
        h, [&](const rocksdb::Slice& k, const rocksdb::Slice&) -> status {
          TUTTI_ROCKSDB_CHECK(batch.Delete(h, k));
          return {};
        });
      if (!err)
        return err;
    }
    TUTTI_ROCKSDB_CHECK(impl_->db->Write(impl_->commit, &batch));
    return {};
  };
  if (auto err = drop(); !err)
    return status::error(impl_->context("reset", err.message()));
  impl_->next_seq = 1;
  return {};
}

} // namespace tutti::store
