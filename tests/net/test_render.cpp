// render/: the shell's answers as text and JSON. Pins the formats `tutti
// shell` prints (aligned tables, fixed decimals; JSON numbers rounded as the
// text shows them) now that the coordinator answers with data.

#include <catch2/catch.hpp>

#include <string>

#include "tutti/render/shell.hpp"

using Catch::Matchers::Contains;
using tutti::render::shell_json;
using tutti::render::shell_text;

TEST_CASE("status as text and JSON", "[render]") {
  tutti::shell_reply r;
  auto& s = r.status.job;
  s.state = "running";
  s.step = 12;
  s.steps = 100;
  s.epoch = 1;
  s.last_checkpoint = 10;
  s.loss = 2.5;
  s.recoveries = 1;
  s.restarts = 2;
  s.nodes = {0, 1};
  s.alerts = {"important expert_imbalance: high"};
  r.status.nnodes = 3;
  r.status.tokens_per_s = 1234.4;
  r.status.eta_s = 56.6;
  CHECK(shell_text("status", r)
        == "state        running\n"
           "step         12 / 100\n"
           "loss         2.5000\n"
           "tokens/s     1234\n"
           "eta          57 s\n"
           "checkpoint   step 10\n"
           "epoch        1  (recoveries 1, restarts 2)\n"
           "nodes        2 of 3 connected\n"
           "ALERT        important expert_imbalance: high\n");
  CHECK(shell_json("status", r)
        == "{\"state\":\"running\",\"step\":12,\"steps\":100,"
           "\"epoch\":1,\"last_checkpoint\":10,\"loss\":2.5,"
           "\"tokens_per_s\":1234.4,\"eta_s\":56.6,\"recoveries\":1,"
           "\"restarts\":2,\"nodes\":[0,1],\"nnodes\":3,\"message\":\"\","
           "\"alerts\":[\"important expert_imbalance: high\"],"
           "\"alltoall_bytes_by_link\":{\"same_rank\":0,\"intra_node\":0,"
           "\"intra_rack\":0,\"inter_rack\":0},"
           "\"cross_rack_bytes_per_token\":0.0}");
}

TEST_CASE("status shows the all-to-all traffic by link class", "[render]") {
  tutti::shell_reply r;
  r.status.job.state = "running";
  r.status.alltoall_bytes_by_link = {5000000, 1000000, 2000000, 1000000};
  r.status.tokens = 2000;
  const auto text = shell_text("status", r);
  CHECK_THAT(text, Catch::Contains("all-to-all   4.00 MB/step on links: "
                                   "intra_node 25%, intra_rack 50%, "
                                   "inter_rack 25%\n"
                                   "cross-rack   500.0 bytes/token\n"));
  CHECK_THAT(shell_json("status", r),
             Catch::Contains("\"alltoall_bytes_by_link\":{\"same_rank\":"
                             "5000000,\"intra_node\":1000000,\"intra_rack\":"
                             "2000000,\"inter_rack\":1000000},"
                             "\"cross_rack_bytes_per_token\":500.0"));
}

TEST_CASE("nodes, actors and experts as aligned tables", "[render]") {
  tutti::shell_reply r;
  r.nodes = {{1, "127.0.0.1:7001", "r1", 2, 2, 0.5, "up"},
             {2, "h:1", "", 4, 2, -1, "lost"}};
  CHECK(
    shell_text("nodes", r)
    == "node  address                 rack      ranks    heartbeat  state\n"
       "1     127.0.0.1:7001          r1        2..3         0.5 s  up\n"
       "2     h:1                               4..5             -  lost\n");
  CHECK_THAT(shell_json("nodes", r),
             Contains("{\"node\":2,\"address\":\"h:1\",\"rack\":\"\","
                      "\"first_rank\":4,\"ranks\":2,"
                      "\"heartbeat_age_s\":-1.0,\"state\":\"lost\"}"));

  r.actors = {{"coordinator", "coordinator", "running", 0, -1},
              {"node1/expert_shard/3", "expert_shard", "running", 2, 4}};
  CHECK(shell_text("actors", r)
        == "path                                kind               state     "
           "restarts  mailbox\n"
           "coordinator                         coordinator        running   "
           "       0        -\n"
           "node1/expert_shard/3                expert_shard       running   "
           "       2        4\n");

  r.experts = {{0, 7, 3.0, 4, 9, {{0, 30, 20.0, 0.125}, {1, 10, 10.0, -0.5}}}};
  CHECK(shell_text("experts", r)
        == "layer 0  step 7  max/mean 3.00  dropped 4 (total 9)\n"
           "expert   tokens   average   bias\n"
           "     0       30      20.0 +0.1250  ##############################\n"
           "     1       10      10.0 -0.5000  ###############\n");
  CHECK(shell_json("experts", r)
        == "[{\"layer\":0,\"step\":7,\"max_over_mean\":3.0,\"dropped\":4,"
           "\"experts\":[{\"expert\":0,\"tokens\":30,\"average\":20.0,"
           "\"bias\":0.125},{\"expert\":1,\"tokens\":10,"
           "\"average\":10.0,\"bias\":-0.5}]}]");
}

TEST_CASE("lines, messages and refusals", "[render]") {
  tutti::shell_reply r;
  r.lines = {"{\"time\":\"a\"}", "{\"time\":\"b\"}"};
  CHECK(shell_text("logs", r) == "{\"time\":\"a\"}\n{\"time\":\"b\"}\n");
  CHECK(shell_json("events", r)
        == "[\"{\\\"time\\\":\\\"a\\\"}\",\"{\\\"time\\\":\\\"b\\\"}\"]");
  r.lines = {"tutti_loss 2.5"};
  CHECK(shell_json("metrics", r) == "\"tutti_loss 2.5\\n\"");

  r.message = "resuming";
  CHECK(shell_text("resume", r) == "resuming\n");
  CHECK(shell_json("resume", r) == "\"resuming\"");
  r.message = "stopping at the next step boundary";
  CHECK(shell_text("stop", r) == "stopping at the next step boundary\n");
  CHECK(shell_json("stop", r) == "\"stopping\"");

  tutti::shell_reply refused;
  refused.ok = false;
  refused.error = "drain: node 0 hosts the coordinator\tand \"cannot\" leave";
  CHECK(shell_text("drain", refused) == refused.error + "\n");
  CHECK(shell_json("drain", refused)
        == "{\"error\":\"drain: node 0 hosts the coordinator\\tand "
           "\\\"cannot\\\" leave\"}");
}
