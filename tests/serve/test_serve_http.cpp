// The HTTP front through a real HTTP client (cpp-httplib's): completions
// as JSON and as server-sent events ending with [DONE], the models list,
// health and readiness, Prometheus metrics, every bad input's status in
// OpenAI's error shape while the service keeps serving, a disconnecting
// client's KV blocks freed, a full queue answered 429 with Retry-After and
// no request left hanging, and a request past its timeout answered 504.

#include <catch2/catch.hpp>

#include <httplib.h>

#include <atomic>
#include <thread>

#include "daemon_support.hpp"
#include "serve_test_support.hpp"
#include "tutti/serve/http_front.hpp"
#include "tutti/serve/load_generator.hpp"

using namespace tutti;
using namespace tutti::testing;
using json = nlohmann::json;

namespace {

// The medium model of the README (vocab 256: byte-level text works).
serve::served_model medium_model(const std::string& name) {
  static const auto dir = write_random_export(
    scratch("serve_http_model") / "medium",
    serve_test_config(256, 256, 512, 4, 8, 4, 8, 2, 256), 31);
  auto m = serve::load_model(dir);
  REQUIRE(m.ok());
  m.value().name = name;
  return std::move(m.value());
}

struct server {
  explicit server(serve::serve_config c, bool start_service = true) : cfg(c) {
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    auto s = serve::service::create(medium_model("medium"),
                                    serve::service_limits{cfg.limits});
    REQUIRE(s.ok());
    svc = std::move(s.value());
    if (start_service)
      svc->start();
    auto f = serve::http_front::start(*svc, cfg);
    REQUIRE(f.ok());
    front = std::move(f.value());
  }
  ~server() {
    svc->stop();
    front->stop();
  }
  httplib::Client client(int timeout_s = 60) const {
    httplib::Client c("127.0.0.1", front->port());
    c.set_read_timeout(timeout_s, 0);
    c.set_connection_timeout(5, 0);
    return c;
  }
  httplib::Result post(const json& body) const {
    return client().Post("/v1/completions", body.dump(), "application/json");
  }
  bool idle() const {
    const auto g = svc->metrics().gauges();
    return g.running == 0 && g.waiting == 0 && g.kv_used_blocks == 0;
  }

  serve::serve_config cfg;
  std::unique_ptr<serve::service> svc;
  std::unique_ptr<serve::http_front> front;
};

serve::serve_config limits(int64_t sequences, int64_t queue) {
  serve::serve_config c;
  c.limits.batch = {128, sequences};
  c.limits.max_queue = queue;
  c.limits.max_prompt_tokens = 200;
  c.limits.max_output_tokens = 200;
  c.limits.kv_cache_bytes = 16 << 20;
  c.max_body_bytes = 64 << 10;
  return c;
}

// The data lines of a server-sent event stream, in order.
std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < body.size()) {
    auto end = body.find("\n\n", at);
    REQUIRE(end != std::string::npos); // every event ends with a blank line
    auto event = body.substr(at, end - at);
    if (event.rfind("data: ", 0) == 0)
      out.push_back(event.substr(6));
    else
      CHECK(event[0] == ':'); // a comment (keep-alive), nothing else
    at = end + 2;
  }
  return out;
}

void check_error(const httplib::Result& r, int status,
                 const std::string& param = {}) {
  REQUIRE(r);
  INFO(r->body);
  CHECK(r->status == status);
  auto j = json::parse(r->body, nullptr, false);
  REQUIRE(j.is_object());
  REQUIRE(j.contains("error"));
  CHECK(j["error"]["message"].is_string());
  CHECK(j["error"]["type"].is_string());
  if (!param.empty())
    CHECK(j["error"]["param"] == param);
}

} // namespace

TEST_CASE("completions as JSON and as server-sent events", "[integration]") {
  server s(limits(8, 16));
  auto c = s.client();
  auto health = c.Get("/health");
  REQUIRE(health);
  CHECK(health->status == 200);
  auto ready = c.Get("/ready");
  REQUIRE(ready);
  CHECK(ready->status == 200);
  auto models = c.Get("/v1/models");
  REQUIRE(models);
  CHECK(json::parse(models->body)["data"][0]["id"] == "medium");

  const json ask = {{"model", "medium"},
                    {"prompt", "Hello, tutti"},
                    {"max_tokens", 12},
                    {"temperature", 0},
                    {"logprobs", 2}};
  auto r = s.post(ask);
  REQUIRE(r);
  INFO(r->body);
  REQUIRE(r->status == 200);
  auto j = json::parse(r->body);
  CHECK(j["object"] == "text_completion");
  const auto ids = j["choices"][0]["token_ids"].get<std::vector<int>>();
  CHECK(ids.size() == 12);
  CHECK(j["choices"][0]["finish_reason"] == "length");
  CHECK(j["usage"]["prompt_tokens"] == 12);
  CHECK(j["usage"]["completion_tokens"] == 12);
  CHECK(j["choices"][0]["logprobs"]["token_logprobs"].size() == 12);
  CHECK(j["choices"][0]["logprobs"]["top_logprobs"][0].size() <= 2);

  // Token ids as the prompt give the same completion.
  auto by_ids = s.post(
    {{"prompt", std::vector<int>{72, 101, 108, 108, 111, 44, 32, 116, 117, 116,
                                 116, 105}},
     {"max_tokens", 12},
     {"temperature", 0}});
  REQUIRE(by_ids);
  CHECK(json::parse(by_ids->body)["choices"][0]["token_ids"] == ids);

  // Streamed: the same tokens as events, the last with the finish reason,
  // then data: [DONE].
  auto streamed = s.post({{"prompt", "Hello, tutti"},
                          {"max_tokens", 12},
                          {"temperature", 0},
                          {"stream", true}});
  REQUIRE(streamed);
  CHECK(streamed->status == 200);
  CHECK(streamed->get_header_value("Content-Type").find("text/event-stream")
        == 0);
  auto events = sse_data(streamed->body);
  REQUIRE(events.size() >= 2);
  CHECK(events.back() == "[DONE]");
  std::vector<int> streamed_ids;
  std::string last_finish;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    auto e = json::parse(events[i]);
    CHECK(e["object"] == "text_completion");
    for (int t : e["choices"][0]["token_ids"])
      streamed_ids.push_back(t);
    if (!e["choices"][0]["finish_reason"].is_null())
      last_finish = e["choices"][0]["finish_reason"];
  }
  CHECK(streamed_ids == ids);
  CHECK(last_finish == "length");

  // Seeded sampling repeats itself.
  const json seeded = {
    {"prompt", "abc"}, {"max_tokens", 10}, {"temperature", 0.8}, {"seed", 77}};
  auto a = s.post(seeded), b = s.post(seeded);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(json::parse(a->body)["choices"][0]["token_ids"]
        == json::parse(b->body)["choices"][0]["token_ids"]);

  auto metrics = c.Get("/metrics");
  REQUIRE(metrics);
  for (const char* family :
       {"tutti_serve_time_to_first_token_seconds_bucket",
        "tutti_serve_inter_token_latency_seconds_count",
        "tutti_serve_e2e_request_latency_seconds_sum",
        "tutti_serve_queue_time_seconds_count", "tutti_serve_requests_running",
        "tutti_serve_requests_waiting", "tutti_serve_kv_cache_usage_ratio",
        "tutti_serve_prompt_tokens_total",
        "tutti_serve_generation_tokens_total",
        "tutti_serve_expert_tokens_total{model=\"medium\",layer=\"3\","
        "expert=\"7\"}"})
    CHECK(metrics->body.find(family) != std::string::npos);
}

TEST_CASE("every bad input gets its status and the service keeps serving",
          "[integration]") {
  server s(limits(8, 16));
  const json good = {{"prompt", "ok"}, {"max_tokens", 2}};
  auto still_serving = [&] {
    auto r = s.post(good);
    REQUIRE(r);
    CHECK(r->status == 200);
  };
  auto c = s.client();
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
    {"not json", 400, ""},
    {"[1,2]", 400, ""},
    {R"({"max_tokens": 2})", 400, "prompt"},
    {R"({"prompt": 5})", 400, "prompt"},
    {R"({"prompt": []})", 400, "prompt"},
    {R"({"prompt": [1, 300]})", 400, "prompt"},
    {R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens"},
    {R"({"prompt": "x", "max_tokens": "3"})", 400, "max_tokens"},
    {R"({"prompt": "x", "max_tokens": 201})", 400, "max_tokens"},
    {R"({"prompt": "x", "temperature": 3})", 400, "temperature"},
    {R"({"prompt": "x", "top_p": 0})", 400, "top_p"},
    {R"({"prompt": "x", "top_k": -2})", 400, "top_k"},
    {R"({"prompt": "x", "logprobs": 9})", 400, "logprobs"},
    {R"({"prompt": "x", "n": 2})", 400, "n"},
    {R"({"prompt": "x", "stream": "yes"})", 400, "stream"},
    {R"({"prompt": "x", "stop": ["a","b","c","d","e"]})", 400, "stop"},
    {R"({"prompt": "x", "seed": 1.5})", 400, "seed"},
    {R"({"prompt": "x", "model": "other"})", 404, "model"},
  };
  for (const auto& [body, status, param] : cases) {
    INFO(body);
    check_error(c.Post("/v1/completions", body, "application/json"), status,
                param);
    still_serving();
  }
  // Over the prompt limit, and prompt + max_tokens past the context.
  check_error(s.post({{"prompt", std::string(201, 'a')}}), 400);
  check_error(s.post({{"prompt", std::string(150, 'a')}, {"max_tokens", 150}}),
              400);
  // A body over max_body_bytes.
  check_error(s.post({{"prompt", std::string(100 << 10, 'a')}}), 413);
  still_serving();
  check_error(c.Get("/v1/nothing"), 404);
  still_serving();
  CHECK(wait_until([&] { return s.idle(); }, 10));
}

TEST_CASE("not ready: 503 until the service runs", "[integration]") {
  server s(limits(8, 16), /*start_service=*/false);
  auto c = s.client();
  check_error(c.Get("/ready"), 503);
  check_error(s.post({{"prompt", "x"}}), 503);
  auto health = c.Get("/health");
  REQUIRE(health);
  CHECK(health->status == 200);
  s.svc->start();
  auto ready = c.Get("/ready");
  REQUIRE(ready);
  CHECK(ready->status == 200);
  auto r = s.post({{"prompt", "x"}, {"max_tokens", 2}});
  REQUIRE(r);
  CHECK(r->status == 200);
}

TEST_CASE("a client that disconnects mid-stream frees its KV blocks",
          "[integration]") {
  server s(limits(8, 16));
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = json{
    {"prompt", "a long story"},
    {"max_tokens", 200},
    {"stream",
     true}}.dump();
  req.set_header("Content-Type", "application/json");
  int chunks = 0;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    return ++chunks < 3; // read a few events, then hang up
  };
  auto c = s.client();
  auto r = c.send(req);
  CHECK(chunks == 3);
  // The server notices at its next write, cancels, and frees the blocks.
  CHECK(wait_until([&] { return s.idle(); }, 20));
  auto metrics = c.Get("/metrics");
  REQUIRE(metrics);
  CHECK(
    metrics->body.find("tutti_serve_requests_finished_total{model=\"medium\","
                       "finish_reason=\"cancelled\"} 1")
    != std::string::npos);
  CHECK(metrics->body.find("tutti_serve_kv_cache_blocks_used{model=\"medium\"}"
                           " 0\n")
        != std::string::npos);
  auto after = s.post({{"prompt", "x"}, {"max_tokens", 2}});
  REQUIRE(after);
  CHECK(after->status == 200);
}

TEST_CASE("4x more requests than the queue allows: 429s, none hangs",
          "[integration]") {
  const int64_t queue = 4;
  server s(limits(2, queue)); // 2 + 4 + 8 HTTP threads for 16 clients
  const int total = static_cast<int>(4 * queue);
  std::vector<int> status(total, -1);
  std::vector<std::string> retry_after(total);
  std::atomic<int> at_start{0};
  std::vector<std::thread> clients;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < total; ++i)
    clients.emplace_back([&, i] {
      ++at_start;
      while (at_start.load() < total)
        std::this_thread::yield();
      auto r = s.post(
        {{"prompt", "queue " + std::to_string(i)}, {"max_tokens", 60}});
      if (r) {
        status[i] = r->status;
        retry_after[i] = r->get_header_value("Retry-After");
      } else {
        retry_after[i] = httplib::to_string(r.error()) + " after "
                         + std::to_string(
                           std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - t0)
                             .count())
                         + " s";
      }
    });
  for (auto& t : clients)
    t.join();
  const double took = std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - t0)
                        .count();
  int ok = 0, limited = 0;
  for (int i = 0; i < total; ++i) {
    INFO("request " << i << " status " << status[i] << " " << retry_after[i]);
    CHECK((status[i] == 200 || status[i] == 429));
    ok += status[i] == 200;
    if (status[i] == 429) {
      ++limited;
      CHECK(retry_after[i] == "1");
    }
  }
  CHECK(ok >= 1);
  CHECK(limited >= total - 2 - queue - 2); // at most running + queued pass
  CHECK(took < 120);
  CHECK(wait_until([&] { return s.idle(); }, 10));
}

TEST_CASE("a request past its timeout gets 504", "[integration]") {
  auto cfg = limits(8, 16);
  cfg.limits.request_timeout_s = 0.05;
  server s(cfg);
  auto r = s.post({{"prompt", "slow"}, {"max_tokens", 200}});
  check_error(r, 504);
  auto streamed = s.post(
    {{"prompt", "slow"}, {"max_tokens", 200}, {"stream", true}});
  REQUIRE(streamed);
  auto events = sse_data(streamed->body);
  REQUIRE(events.size() >= 2);
  CHECK(events.back() == "[DONE]");
  CHECK(json::parse(events[events.size() - 2]).contains("error"));
  CHECK(wait_until([&] { return s.idle(); }, 10));
}

TEST_CASE("the load generator measures a real server", "[integration]") {
  server s(limits(4, 16));
  serve::load_spec spec;
  spec.port = s.front->port();
  spec.model = "medium";
  spec.requests = 8;
  spec.concurrency = 4;
  spec.rate = 50;
  spec.prompt_tokens = 8;
  spec.output_tokens = 6;
  spec.slo_ms = {{"ttft", 1e9}, {"tpot", 1e9}};
  int64_t progress = 0;
  auto r = serve::run_load(spec, [&](int64_t done, int64_t total) {
    CHECK(total == 8);
    progress = done;
  });
  REQUIRE(r.ok());
  const auto& x = r.value();
  INFO(serve::report_table(spec, x));
  CHECK(progress == 8);
  CHECK(x.completed == 8);
  CHECK(x.failed == 0);
  CHECK(x.output_tokens == 8 * 6);
  CHECK(x.ttft_ms.p50 > 0);
  CHECK(x.ttft_ms.p50 <= x.ttft_ms.p90);
  CHECK(x.ttft_ms.p90 <= x.ttft_ms.p99);
  CHECK(x.e2e_ms.p50 >= x.ttft_ms.p50);
  CHECK(x.goodput == Approx(x.request_throughput));
  CHECK(json::parse(serve::report_json(spec, x))["completed"] == 8);

  spec.slo_ms = {{"tpot", 1e-6}};
  auto strict = serve::run_load(spec);
  REQUIRE(strict.ok());
  CHECK(strict.value().goodput == 0);

  // A server that refuses: counted as failures with the first error.
  spec.model = "other";
  auto refused = serve::run_load(spec);
  REQUIRE(refused.ok());
  CHECK(refused.value().failed == 8);
  CHECK(refused.value().first_error.find("404") != std::string::npos);
  // Chat against a model without a chat template: refused, naming it.
  spec.model.clear();
  spec.chat = true;
  auto chat = serve::run_load(spec);
  REQUIRE(chat.ok());
  CHECK(chat.value().failed == 8);
  CHECK(chat.value().first_error.find("has no chat_template")
        != std::string::npos);
}

TEST_CASE("load generator figures and SLOs", "[unit]") {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i)
    v.push_back(i);
  auto p = serve::percentiles_of(v);
  CHECK(p.mean == Approx(50.5));
  CHECK(p.p50 == Approx(50.5));
  CHECK(p.p90 == Approx(90.1));
  CHECK(p.p99 == Approx(99.01));
  std::map<std::string, double> slo;
  REQUIRE(serve::parse_slo("ttft=2s,tpot=200ms", slo).ok());
  CHECK(slo["ttft"] == 2000);
  CHECK(slo["tpot"] == 200);
  CHECK_FALSE(serve::parse_slo("ttft=2", slo).ok());
  CHECK_FALSE(serve::parse_slo("speed=2ms", slo).ok());
  CHECK_FALSE(serve::parse_slo("ttft=-1ms", slo).ok());
}
