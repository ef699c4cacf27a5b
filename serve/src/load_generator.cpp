#include "tutti/serve/load_generator.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include "tutti/net/http_client.hpp"

namespace tutti::serve {

using json = nlohmann::json;
using steady = std::chrono::steady_clock;

namespace {

double ms_between(steady::time_point a, steady::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct one_result {
  bool ok = false;
  std::string error;
  double ttft_ms = 0, e2e_ms = 0;
  std::vector<double> itl_ms;
  int64_t output_tokens = 0, prompt_tokens = 0;
};

// One streamed request; times every chunk that carries tokens.
one_result send_one(const load_spec& spec, const json& body) {
  one_result out;
  net::client_options o;
  o.host = spec.host;
  o.port = static_cast<uint16_t>(spec.port);
  o.connect_timeout = std::chrono::seconds(10);
  o.read_timeout = std::chrono::seconds(static_cast<int64_t>(spec.timeout_s));
  net::http_client client(o);
  const auto request_body = body.dump();
  std::string buffer;
  bool done = false;
  const auto start = steady::now();
  auto last = start;
  bool first = true;
  net::reply_stream events;
  events.on_body = [&](const char* data, size_t n) {
    buffer.append(data, n);
    for (auto end = buffer.find("\n\n"); end != std::string::npos;
         end = buffer.find("\n\n")) {
      const auto event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0)
        continue;
      const auto payload = event.substr(6);
      if (payload == "[DONE]") {
        done = true;
        continue;
      }
      auto j = json::parse(payload, nullptr, false);
      if (j.is_discarded() || j.contains("error")) {
        out.error = j.is_discarded() ? "unparsable event" : payload;
        return false;
      }
      const auto& choice = j["choices"][0];
      int64_t tokens = 0;
      if (choice.contains("token_ids") && choice["token_ids"].is_array())
        tokens = static_cast<int64_t>(choice["token_ids"].size());
      else if (!choice.value("text", std::string()).empty()
               || (choice.contains("delta") && choice["delta"].is_object()
                   && !choice["delta"].value("content", std::string()).empty()))
        tokens = 1; // a server without token ids: one token a chunk
      if (tokens == 0)
        continue;
      const auto now = steady::now();
      if (first)
        out.ttft_ms = ms_between(start, now);
      else
        out.itl_ms.push_back(ms_between(last, now));
      first = false;
      last = now;
      out.output_tokens += tokens;
    }
    return true;
  };
  auto r = client.post_streamed(spec.chat ? "/v1/chat/completions"
                                          : "/v1/completions",
                                request_body, "application/json", events);
  out.e2e_ms = ms_between(start, steady::now());
  if (!r) {
    if (out.error.empty())
      out.error = "HTTP: " + r.message();
    return out;
  }
  if (r->status != 200) {
    // A refusal's body came through on_body, not an event: it is what is
    // left in the buffer.
    out.error = "HTTP " + std::to_string(r->status) + ": "
                + (r->body.empty() ? buffer : r->body);
    return out;
  }
  if (!done && out.error.empty())
    out.error = "the stream ended without data: [DONE]";
  out.ok = out.error.empty() && out.output_tokens > 0;
  if (out.ok == false && out.error.empty())
    out.error = "no tokens";
  return out;
}

double tpot_of(const one_result& r) {
  return r.output_tokens > 1
           ? (r.e2e_ms - r.ttft_ms) / double(r.output_tokens - 1)
           : 0.0;
}

} // namespace

percentiles percentiles_of(std::vector<double> v) {
  percentiles p;
  if (v.empty())
    return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    // Linear interpolation between closest ranks (numpy's default).
    const double pos = q * double(v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
  };
  double sum = 0;
  for (double x : v)
    sum += x;
  p.mean = sum / double(v.size());
  p.p50 = at(0.5);
  p.p90 = at(0.9);
  p.p99 = at(0.99);
  return p;
}

status parse_slo(const std::string& text, std::map<std::string, double>& out) {
  size_t at = 0;
  while (at < text.size()) {
    auto end = text.find(',', at);
    if (end == std::string::npos)
      end = text.size();
    const auto item = text.substr(at, end - at);
    at = end + 1;
    const auto eq = item.find('=');
    const auto key = item.substr(0, eq);
    if (eq == std::string::npos
        || (key != "ttft" && key != "tpot" && key != "itl" && key != "e2e"))
      return status::error("--slo: '" + item
                           + "' is not ttft|tpot|itl|e2e=VALUE(ms|s)");
    auto value = item.substr(eq + 1);
    double scale = 1.0;
    if (value.size() > 2 && value.substr(value.size() - 2) == "ms")
      value.resize(value.size() - 2);
    else if (!value.empty() && value.back() == 's')
      value.pop_back(), scale = 1000.0;
    else
      return status::error("--slo: '" + item + "' needs a unit (ms or s)");
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(value, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != value.size() || !(v > 0))
      return status::error("--slo: '" + item + "' is not a positive time");
    out[key] = v * scale;
  }
  return {};
}

expected<load_report> run_load(
  const load_spec& spec,
  const std::function<void(int64_t, int64_t)>& progress) {
  if (spec.requests < 1)
    return status::error("--requests must be at least 1");
  if (spec.burstiness <= 0)
    return status::error("--burstiness must be positive");
  if (!spec.prompt_source.empty()
      && int64_t(spec.prompt_source.size()) < spec.prompt_tokens)
    return status::error("--prompts-from: " + std::to_string(
                           spec.prompt_source.size())
                         + " tokens, fewer than --prompt-tokens");
  std::mt19937_64 rng(spec.seed);
  // Bodies and arrival offsets are drawn up front: the same seed, the same
  // load, whatever the server does.
  std::vector<json> bodies;
  std::vector<double> arrival_s;
  double t = 0;
  std::gamma_distribution<double> gap(
    spec.burstiness, spec.rate > 0 ? 1.0 / (spec.rate * spec.burstiness) : 1.0);
  for (int64_t i = 0; i < spec.requests; ++i) {
    json b;
    if (!spec.model.empty())
      b["model"] = spec.model;
    if (!spec.prompts.empty()) {
      b["prompt"] = spec.prompts[i % spec.prompts.size()];
    } else if (!spec.prompt_source.empty()) {
      const auto n = static_cast<uint64_t>(spec.prompt_source.size()
                                           - spec.prompt_tokens + 1);
      const auto at = static_cast<std::ptrdiff_t>(rng() % n);
      b["prompt"] = std::vector<int>(
        spec.prompt_source.begin() + at,
        spec.prompt_source.begin() + at + spec.prompt_tokens);
    } else {
      std::vector<int> ids(spec.prompt_tokens);
      for (auto& id : ids)
        id = static_cast<int>(rng() % static_cast<uint64_t>(spec.vocab));
      b["prompt"] = ids;
    }
    if (spec.chat) {
      json prompt = b["prompt"];
      b.erase("prompt");
      if (!prompt.is_string()) { // random text in place of random ids
        std::string text(prompt.size(), ' ');
        for (auto& c : text)
          c = static_cast<char>('a' + rng() % 26);
        prompt = text;
      }
      b["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
    }
    b["max_tokens"] = spec.output_tokens;
    b["temperature"] = spec.temperature;
    b["seed"] = static_cast<int64_t>(spec.seed + i);
    b["stream"] = true;
    bodies.push_back(b);
    arrival_s.push_back(t);
    if (spec.rate > 0)
      t += gap(rng);
  }

  std::vector<one_result> results(spec.requests);
  std::mutex mutex;
  std::condition_variable freed;
  int64_t in_flight = 0, finished = 0;
  const int64_t cap = spec.concurrency > 0 ? spec.concurrency : spec.requests;
  std::vector<std::thread> threads;
  const auto start = steady::now();
  for (int64_t i = 0; i < spec.requests; ++i) {
    std::this_thread::sleep_until(
      start
      + std::chrono::duration_cast<steady::duration>(
        std::chrono::duration<double>(arrival_s[i])));
    {
      std::unique_lock lock(mutex);
      freed.wait(lock, [&] { return in_flight < cap; });
      ++in_flight;
    }
    threads.emplace_back([&, i] {
      results[i] = send_one(spec, bodies[i]);
      const json& prompt = spec.chat ? bodies[i]["messages"][0]["content"]
                                     : bodies[i]["prompt"];
      results[i].prompt_tokens = prompt.is_array()
                                   ? static_cast<int64_t>(prompt.size())
                                   : static_cast<int64_t>(
                                     prompt.get<std::string>().size());
      std::lock_guard lock(mutex);
      --in_flight;
      ++finished;
      if (progress)
        progress(finished, spec.requests);
      freed.notify_all();
    });
  }
  for (auto& th : threads)
    th.join();
  load_report r;
  r.duration_s = std::chrono::duration<double>(steady::now() - start).count();
  std::vector<double> ttft, tpot, itl, e2e;
  int64_t good = 0;
  for (const auto& x : results) {
    if (!x.ok) {
      ++r.failed;
      if (r.first_error.empty())
        r.first_error = x.error;
      continue;
    }
    ++r.completed;
    r.output_tokens += x.output_tokens;
    r.prompt_tokens += x.prompt_tokens;
    ttft.push_back(x.ttft_ms);
    e2e.push_back(x.e2e_ms);
    if (x.output_tokens > 1)
      tpot.push_back(tpot_of(x));
    itl.insert(itl.end(), x.itl_ms.begin(), x.itl_ms.end());
    bool meets = true;
    for (const auto& [key, limit] : spec.slo_ms) {
      if (key == "ttft")
        meets = meets && x.ttft_ms <= limit;
      else if (key == "tpot")
        meets = meets && tpot_of(x) <= limit;
      else if (key == "e2e")
        meets = meets && x.e2e_ms <= limit;
      else if (key == "itl")
        for (double g : x.itl_ms)
          meets = meets && g <= limit;
    }
    good += meets;
  }
  r.ttft_ms = percentiles_of(ttft);
  r.tpot_ms = percentiles_of(tpot);
  r.itl_ms = percentiles_of(itl);
  r.e2e_ms = percentiles_of(e2e);
  r.request_throughput = double(r.completed) / r.duration_s;
  r.output_throughput = double(r.output_tokens) / r.duration_s;
  r.goodput = double(good) / r.duration_s;
  return r;
}

std::string report_json(const load_spec& spec, const load_report& r) {
  auto p = [](const percentiles& x) {
    return json{
      {"mean", x.mean}, {"p50", x.p50}, {"p90", x.p90}, {"p99", x.p99}};
  };
  json j;
  j["requests"] = spec.requests;
  j["endpoint"] = spec.chat ? "/v1/chat/completions" : "/v1/completions";
  j["rate"] = spec.rate;
  j["burstiness"] = spec.burstiness;
  j["concurrency"] = spec.concurrency;
  j["prompt_tokens_per_request"] = spec.prompt_tokens;
  j["output_tokens_per_request"] = spec.output_tokens;
  j["completed"] = r.completed;
  j["failed"] = r.failed;
  if (!r.first_error.empty())
    j["first_error"] = r.first_error;
  j["duration_s"] = r.duration_s;
  j["output_tokens"] = r.output_tokens;
  j["request_throughput"] = r.request_throughput;
  j["output_token_throughput"] = r.output_throughput;
  j["goodput"] = r.goodput;
  j["slo_ms"] = spec.slo_ms;
  j["ttft_ms"] = p(r.ttft_ms);
  j["tpot_ms"] = p(r.tpot_ms);
  j["itl_ms"] = p(r.itl_ms);
  j["e2e_ms"] = p(r.e2e_ms);
  return j.dump(2);
}

std::string report_table(const load_spec& spec, const load_report& r) {
  char line[256];
  std::string out;
  std::snprintf(
    line, sizeof line,
    "requests %lld ok, %lld failed in %.2f s (rate %s, "
    "concurrency %s)\n",
    static_cast<long long>(r.completed), static_cast<long long>(r.failed),
    r.duration_s, spec.rate > 0 ? std::to_string(spec.rate).c_str() : "inf",
    spec.concurrency > 0 ? std::to_string(spec.concurrency).c_str() : "none");
  out += line;
  std::snprintf(line, sizeof line,
                "throughput %.2f req/s, %.1f output tok/s, goodput %.2f "
                "req/s\n",
                r.request_throughput, r.output_throughput, r.goodput);
  out += line;
  out += "metric (ms)        mean       p50       p90       p99\n";
  auto row = [&](const char* name, const percentiles& p) {
    std::snprintf(line, sizeof line, "%-12s %9.2f %9.2f %9.2f %9.2f\n", name,
                  p.mean, p.p50, p.p90, p.p99);
    out += line;
  };
  row("TTFT", r.ttft_ms);
  row("TPOT", r.tpot_ms);
  row("ITL", r.itl_ms);
  row("E2E", r.e2e_ms);
  if (!r.first_error.empty())
    out += "first error: " + r.first_error + "\n";
  return out;
}

} // namespace tutti::serve
