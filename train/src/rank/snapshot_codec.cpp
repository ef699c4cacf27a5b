#include "rank/snapshot_codec.hpp"

#include <cstring>

namespace tutti {

namespace {

constexpr uint64_t magic = 0x314c504552545554; // "TUTREPL1"

class writer {
public:
  template <class T>
  void put(const T& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void text(const std::string& s) {
    put(static_cast<uint64_t>(s.size()));
    out += s;
  }
  std::string out;
};

class reader {
public:
  explicit reader(const std::string& in) : in_(in) {}
  template <class T>
  bool get(T& v) {
    if (in_.size() - at_ < sizeof(T))
      return false;
    std::memcpy(&v, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  bool text(std::string& s) {
    uint64_t n = 0;
    if (!get(n) || in_.size() - at_ < n)
      return false;
    s.assign(in_.data() + at_, n);
    at_ += n;
    return true;
  }
  bool done() const { return at_ == in_.size(); }

private:
  const std::string& in_;
  size_t at_ = 0;
};

} // namespace

std::vector<const owned_tensor*> snapshot_tensors(const rank_snapshot& snap) {
  std::vector<const owned_tensor*> out;
  snap.for_each_tensor([&](const owned_tensor& t) { out.push_back(&t); });
  return out;
}

std::string encode_snapshot_header(const rank_snapshot& snap) {
  writer w;
  w.put(magic);
  w.put(snap.step), w.put(snap.rank), w.put(snap.epoch);
  w.put(static_cast<uint64_t>(snap.ints.size()));
  for (const auto& [k, v] : snap.ints)
    w.text(k), w.put(v);
  w.put(static_cast<uint64_t>(snap.strings.size()));
  for (const auto& [k, v] : snap.strings)
    w.text(k), w.text(v);
  const auto tensors = snapshot_tensors(snap);
  w.put(static_cast<uint64_t>(tensors.size()));
  for (const auto* t : tensors) {
    w.text(t->name);
    w.put(static_cast<uint64_t>(t->shape.size()));
    for (auto d : t->shape)
      w.put(d);
    w.put(static_cast<uint64_t>(t->data.size()));
  }
  return std::move(w.out);
}

expected<std::shared_ptr<rank_snapshot>> decode_snapshot_header(
  const std::string& bytes) {
  auto bad = [](const std::string& what) {
    return status::error("replica of a rank's state: " + what);
  };
  reader r(bytes);
  uint64_t m = 0;
  if (!r.get(m) || m != magic)
    return bad("not a replica (bad magic)");
  auto snap = std::make_shared<rank_snapshot>();
  if (!r.get(snap->step) || !r.get(snap->rank) || !r.get(snap->epoch))
    return bad("truncated header");
  uint64_t n = 0;
  if (!r.get(n))
    return bad("truncated ints");
  for (uint64_t i = 0; i < n; ++i) {
    std::string k;
    int64_t v = 0;
    if (!r.text(k) || !r.get(v))
      return bad("truncated ints");
    snap->ints[k] = v;
  }
  if (!r.get(n))
    return bad("truncated strings");
  for (uint64_t i = 0; i < n; ++i) {
    std::string k, v;
    if (!r.text(k) || !r.text(v))
      return bad("truncated strings");
    snap->strings[k] = std::move(v);
  }
  if (!r.get(n) || n > bytes.size())
    return bad("bad tensor count");
  for (uint64_t i = 0; i < n; ++i) {
    owned_tensor t;
    uint64_t dims = 0, numel = 0;
    if (!r.text(t.name) || !r.get(dims) || dims > 8)
      return bad("tensor " + std::to_string(i) + ": bad name or rank");
    t.shape.resize(dims);
    uint64_t product = 1;
    for (auto& d : t.shape) {
      if (!r.get(d) || d < 0)
        return bad("tensor '" + t.name + "': bad shape");
      product *= static_cast<uint64_t>(d);
    }
    if (!r.get(numel) || numel != product)
      return bad("tensor '" + t.name + "': size and shape disagree");
    t.data.resize(numel);
    snap->tensors.push_back(std::move(t));
  }
  if (!r.done())
    return bad("trailing bytes");
  return snap;
}

} // namespace tutti
