#include "proxy.hpp"

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <thread>

#include "tutti/gateway/fleet.hpp"
#include "tutti/net/http_client.hpp"

namespace tutti::gateway {

namespace {

const char* json_type = "application/json";

std::string error_json(const std::string& message, const std::string& type,
                       int code) {
  nlohmann::json j;
  j["error"] = {{"message", message}, {"type", type}, {"code", code}};
  return j.dump();
}

std::string where(const replica& r) {
  return r.id + " (" + r.address.host + ":" + std::to_string(r.address.port)
         + ")";
}

// A client for one call to replica `a`: `read` is what is left of the
// request's time (at least a millisecond).
template <class Duration>
net::client_options replica_call(const replica_address& a, double connect_s,
                                 Duration read) {
  using std::chrono::microseconds;
  net::client_options o;
  o.host = a.host;
  o.port = static_cast<uint16_t>(a.port);
  o.connect_timeout = std::chrono::duration_cast<microseconds>(
    std::chrono::duration<double>(connect_s));
  o.read_timeout = o.write_timeout = std::max(
    std::chrono::duration_cast<microseconds>(read), microseconds(1000));
  return o;
}

// Replica answers worth another replica: it is not ready or stopping (503),
// its queue is full (429), a gateway in between failed (502).
bool retryable_status(int s) { return s == 503 || s == 429 || s == 502; }

// A streaming call to one replica, on its own thread: the bytes it sends
// wait here for the gateway's client, with what they say (first token,
// tokens, an error event, the end).
struct upstream_stream {
  std::mutex m;
  std::condition_variable cv;
  int status = 0; // 0 until the replica's headers came
  std::string retry_after;
  std::string pending; // complete events not yet forwarded
  std::string partial; // an event still arriving
  std::string body;    // the whole body of a non-200 answer
  bool returned = false; // the call is over
  std::string error;     // why the call failed; "" when it did not
  bool cancel = false;
  bool done_seen = false, error_seen = false;
  int64_t tokens = 0; // events with choices
  clock::time_point first{}, last{};
  std::thread thread;

  // Complete events out of `partial` into `pending`, noting what they say.
  void take_events() {
    size_t end;
    while ((end = partial.find("\n\n")) != std::string::npos) {
      const auto ev = partial.substr(0, end + 2);
      partial.erase(0, end + 2);
      if (ev.rfind(":", 0) == 0)
        continue; // the replica's keep-alive comment
      if (ev.find("data: [DONE]") != std::string::npos)
        done_seen = true;
      else if (ev.find("\"error\"") != std::string::npos)
        error_seen = true;
      else if (ev.find("\"choices\"") != std::string::npos) {
        last = clock::now();
        if (tokens++ == 0)
          first = last;
      }
      pending += ev;
    }
  }
};

void run_stream(std::shared_ptr<upstream_stream> up, replica_address a,
                std::string path, std::string body, double connect_s,
                clock::duration read) {
  net::http_client cli(replica_call(a, connect_s, read));
  net::reply_stream events;
  events.on_head = [up](int status, const net::header_map& headers) {
    std::lock_guard<std::mutex> lock(up->m);
    up->status = status;
    auto retry_after = headers.find("Retry-After");
    if (retry_after != headers.end())
      up->retry_after = retry_after->second;
    up->cv.notify_all();
    return !up->cancel;
  };
  events.on_body = [up](const char* data, size_t n) {
    std::lock_guard<std::mutex> lock(up->m);
    if (up->status != 200) {
      up->body.append(data, n);
    } else {
      up->partial.append(data, n);
      up->take_events();
    }
    up->cv.notify_all();
    return !up->cancel;
  };
  auto result = cli.post_streamed(path, body, json_type, events);
  std::lock_guard<std::mutex> lock(up->m);
  up->error = result ? std::string() : result.message();
  up->returned = true;
  up->cv.notify_all();
}

// What the client has been sent when a stream ends without its [DONE].
std::string stream_failure(const upstream_stream& up, const replica& r) {
  const auto msg = "replica " + where(r) + " failed mid-stream ("
                   + (!up.error.empty() ? up.error
                                        : std::string("stream ended early"))
                   + ")";
  return "data: " + error_json(msg, "server_error", 502)
         + "\n\ndata: [DONE]\n\n";
}

struct stream_session {
  fleet* f;
  std::shared_ptr<replica> r;
  std::shared_ptr<upstream_stream> up;
  clock::time_point begun, deadline;
  bool finished = false, failed = false;
};

double seconds_between(clock::time_point a, clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

request_outcome outcome_of(const stream_session& s) {
  request_outcome o;
  const auto& up = *s.up;
  if (s.failed || up.error_seen)
    o.what = request_outcome::failed;
  else if (!up.done_seen)
    o.what = request_outcome::abandoned; // the client left
  if (up.tokens > 0)
    o.ttft_s = seconds_between(s.begun, up.first);
  if (up.tokens > 1)
    o.tpot_s = seconds_between(up.first, up.last) / (up.tokens - 1);
  return o;
}

// True when the stream was handed to the client: its release leaves the
// gateway's concurrency slot.
bool proxy_stream(fleet& f, const std::string& path, const std::string& body,
                  net::http_response& res, clock::time_point begun,
                  clock::time_point deadline) {
  std::set<std::string> tried;
  std::string last_error = "no replica is available";
  int last_status = 503;
  for (int64_t attempt = 0; attempt <= f.cfg.max_retries; ++attempt) {
    bool saturated = false;
    auto r = f.lease(tried, saturated);
    if (!r) {
      if (tried.empty()) {
        if (saturated)
          res.set_header("Retry-After", "1");
        send_error(res, saturated ? 429 : 503,
                          saturated ? "every replica is at its limit of "
                                      "outstanding requests"
                                    : "no replica is available",
                          saturated ? "rate_limit_exceeded"
                                    : "service_unavailable");
        return false;
      }
      break;
    }
    tried.insert(r->id);
    if (attempt > 0) {
      std::lock_guard<std::mutex> lock(f.mutex);
      ++f.retries;
    }
    auto up = std::make_shared<upstream_stream>();
    up->thread = std::thread(run_stream, up, r->address, path, body,
                             f.cfg.connect_timeout_s, deadline - clock::now());
    bool started = false;
    {
      // Started: the first token is here. Until then nothing has gone to
      // the client and the request may go elsewhere.
      std::unique_lock<std::mutex> lock(up->m);
      up->cv.wait_until(lock, deadline, [&] {
        return up->returned || up->tokens > 0 || up->error_seen
               || (up->status != 0 && up->status != 200);
      });
      started = up->tokens > 0 || up->error_seen || up->done_seen;
      if (!started && up->status != 0 && up->status != 200
          && !up->returned) {
        // A refusal: let its body arrive (bounded by the read timeout).
        up->cv.wait_until(lock, deadline, [&] { return up->returned; });
      }
      if (!started && !up->returned)
        up->cancel = true; // the deadline passed before the first token
    }
    if (!started) {
      up->thread.join();
      const int st = up->status;
      if (st != 0 && st != 200 && !retryable_status(st)) {
        // The replica's own answer (400, 404, 500, 504): passed on.
        request_outcome o;
        o.what = st >= 500 ? request_outcome::failed : request_outcome::ok;
        o.count_for_version = st >= 500;
        f.release(r, o);
        res.status = st;
        res.set_header("X-Tutti-Replica", r->id);
        res.set_header("X-Tutti-Version", r->version);
        res.set_content(up->body, json_type);
        return false;
      }
      if (clock::now() >= deadline) {
        f.release(r, {request_outcome::failed});
        send_error(res, 504, "no token within gateway.request_timeout_s",
                   "timeout");
        return false;
      }
      // Not started: 503/429/502, a connection that failed, or a stream
      // that ended before its first token. Another replica may take it.
      request_outcome o;
      o.what = st == 429 ? request_outcome::ok : request_outcome::failed;
      o.count_for_version = st != 429;
      f.release(r, o);
      last_status = st == 429 ? 429 : 502;
      last_error = "replica " + where(*r) + " did not take the request ("
                   + (st ? "status " + std::to_string(st) : up->error) + ")";
      continue;
    }
    // Started: from here the client gets the stream as it comes.
    auto s = std::make_shared<stream_session>();
    s->f = &f;
    s->r = r;
    s->up = up;
    s->begun = begun;
    s->deadline = deadline;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Tutti-Replica", r->id);
    res.set_header("X-Tutti-Version", r->version);
    res.stream(
      "text/event-stream",
      [s](net::chunk_sink& sink) {
        auto& up = *s->up;
        std::string out;
        bool end = false;
        {
          std::unique_lock<std::mutex> lock(up.m);
          up.cv.wait_for(lock, std::chrono::seconds(1), [&] {
            return !up.pending.empty() || up.returned;
          });
          out.swap(up.pending);
          if (up.returned && !up.done_seen && out.empty()) {
            s->failed = true;
            out = stream_failure(up, *s->r);
            end = true;
          } else if (up.done_seen && up.returned && out.empty())
            end = true;
          else if (!up.returned && clock::now() >= s->deadline) {
            up.cancel = true;
            s->failed = true;
            out = "data: "
                  + error_json("the request ran past "
                               "gateway.request_timeout_s",
                               "timeout", 504)
                  + "\n\ndata: [DONE]\n\n";
            end = true;
          }
        }
        if (out.empty() && !end)
          out = ": waiting\n\n"; // finds a client that went away
        if (!out.empty() && !sink.write(out.data(), out.size()))
          return false;
        if (end) {
          s->finished = true;
          sink.done();
        }
        return true;
      },
      [s](bool) {
        {
          std::lock_guard<std::mutex> lock(s->up->m);
          s->up->cancel = true;
        }
        if (s->up->thread.joinable())
          s->up->thread.join();
        s->f->release(s->r, outcome_of(*s));
        s->f->leave();
      });
    return true;
  }
  if (last_status == 429)
    res.set_header("Retry-After", "1");
  send_error(res, last_status,
             last_error + "; tried " + std::to_string(tried.size())
               + " replica(s)",
             last_status == 429 ? "rate_limit_exceeded" : "server_error");
  return false;
}

void proxy_json(fleet& f, const std::string& path, const std::string& body,
                net::http_response& res, clock::time_point begun,
                clock::time_point deadline) {
  std::set<std::string> tried;
  std::string last_error = "no replica is available";
  int last_status = 503;
  for (int64_t attempt = 0; attempt <= f.cfg.max_retries; ++attempt) {
    bool saturated = false;
    auto r = f.lease(tried, saturated);
    if (!r) {
      if (tried.empty()) {
        if (saturated)
          res.set_header("Retry-After", "1");
        return send_error(res, saturated ? 429 : 503,
                          saturated ? "every replica is at its limit of "
                                      "outstanding requests"
                                    : "no replica is available",
                          saturated ? "rate_limit_exceeded"
                                    : "service_unavailable");
      }
      break;
    }
    tried.insert(r->id);
    if (attempt > 0) {
      std::lock_guard<std::mutex> lock(f.mutex);
      ++f.retries;
    }
    net::http_client cli(replica_call(r->address, f.cfg.connect_timeout_s,
                                      deadline - clock::now()));
    auto up = cli.post(path, body, json_type);
    if (up && !retryable_status(up->status)) {
      request_outcome o;
      o.what = up->status >= 500 ? request_outcome::failed
                                 : request_outcome::ok;
      o.count_for_version = up->status < 400 || up->status >= 500;
      if (up->status == 200)
        o.ttft_s = -1; // whole answers: no first-token time
      f.release(r, o);
      res.status = up->status;
      res.set_header("X-Tutti-Replica", r->id);
      res.set_header("X-Tutti-Version", r->version);
      if (up->headers.count("Retry-After"))
        res.set_header("Retry-After", up->header("Retry-After"));
      res.set_content(up->body, json_type);
      return;
    }
    // Nothing has gone to the client: another replica may take it.
    request_outcome o;
    o.what = up && up->status == 429 ? request_outcome::ok
                                     : request_outcome::failed;
    o.count_for_version = !(up && up->status == 429);
    f.release(r, o);
    last_status = up && up->status == 429 ? 429 : 502;
    last_error = "replica " + where(*r) + " did not answer ("
                 + (up ? "status " + std::to_string(up->status) : up.message())
                 + ")";
    if (clock::now() >= deadline) {
      last_status = 504;
      break;
    }
  }
  if (last_status == 429)
    res.set_header("Retry-After", "1");
  send_error(res, last_status,
             last_error + "; tried " + std::to_string(tried.size())
               + " replica(s)",
             last_status == 429 ? "rate_limit_exceeded" : "server_error");
}

} // namespace

void send_error(net::http_response& res, int status, const std::string& msg,
                const std::string& type) {
  res.status = status;
  res.set_content(error_json(msg, type, status), json_type);
}

void proxy_completion(fleet& f, const net::http_request& req,
                      net::http_response& res) {
  const auto begun = clock::now();
  const auto deadline = begun
                        + std::chrono::duration_cast<clock::duration>(
                          std::chrono::duration<double>(
                            f.cfg.request_timeout_s));
  bool stream = false;
  try {
    const auto j = nlohmann::json::parse(req.body);
    if (!j.is_object())
      return send_error(res, 400, "the body must be a JSON object",
                        "invalid_request_error");
    stream = j.value("stream", false);
  } catch (const std::exception&) {
    return send_error(res, 400, "the body is not JSON",
                      "invalid_request_error");
  }
  if (!f.enter()) {
    res.set_header("Retry-After", "1");
    return send_error(res, 429,
                      "the gateway is at gateway.max_in_flight requests",
                      "rate_limit_exceeded");
  }
  // The slot is left when the answer is complete: for a stream handed to
  // its client, when the stream's release runs.
  if (!(stream && proxy_stream(f, req.path, req.body, res, begun, deadline))) {
    if (!stream)
      proxy_json(f, req.path, req.body, res, begun, deadline);
    f.leave();
  }
}

} // namespace tutti::gateway
