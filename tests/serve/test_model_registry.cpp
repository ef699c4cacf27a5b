// Model versions: `tutti publish` registers a verified,
// immutable version with every file's SHA-256; the same bytes again are a
// no-op, other bytes under the same version are refused; a service names
// the version it serves and refuses to load a registered version whose
// files changed, naming the file.

#include <catch2/catch.hpp>

#include "daemon_support.hpp"
#include "serve_test_support.hpp"
#include "tutti/serve/model_registry.hpp"
#include "tutti/config/serve_config.hpp"

using namespace tutti;
using namespace tutti::testing;
namespace fs = std::filesystem;

namespace {

job_config tiny() { return serve_test_config(64, 16, 32, 1, 2, 1, 2, 1, 32); }

// Flips one byte in the middle of `file` (made writable first: published
// files are read-only).
void corrupt(const fs::path& file) {
  fs::permissions(file, fs::perms::owner_write, fs::perm_options::add);
  auto text = read_text(file);
  text[text.size() / 2] ^= 0x5a;
  write_text(file, text);
}

} // namespace

TEST_CASE("tutti publish records, keeps and checks a model version",
          "[integration]") {
  const auto root = scratch("model_registry");
  const auto reg = root / "registry";
  const auto src = root / "export";
  write_random_export(src, tiny(), 3);
  const auto publish = tutti_bin() + " publish --registry " + reg.string()
                       + " ";

  auto first = run(publish + src.string() + " --name tiny --version v1");
  INFO(first.output);
  REQUIRE(first.status == 0);
  CHECK(first.output.find("published tiny@v1") != std::string::npos);
  auto v1 = serve::verify_model_version(reg, "tiny", "v1");
  REQUIRE(v1.ok());
  CHECK(v1.value().files.size() == 2); // config.json, model.safetensors
  for (const auto& f : v1.value().files)
    CHECK(f.sha256.size() == 64);

  // The same bytes again: nothing changes.
  auto again = run(publish + src.string() + " --name tiny --version v1");
  CHECK(again.status == 0);
  CHECK(again.output.find("already published tiny@v1") != std::string::npos);

  // Other bytes under the same version: refused, naming the file.
  const auto other = root / "other";
  write_random_export(other, tiny(), 4);
  auto clash = run(publish + other.string() + " --name tiny --version v1");
  INFO(clash.output);
  CHECK(clash.status == 2);
  CHECK(clash.output.find("model.safetensors differs") != std::string::npos);
  CHECK(run(publish + other.string() + " --name tiny --version v2").status
        == 0);
  auto listed = run(publish + "--list");
  CHECK(listed.output.find("tiny@v1") != std::string::npos);
  CHECK(listed.output.find("tiny@v2") != std::string::npos);

  // What is not a model, or not a name, is not published.
  auto not_model = run(publish + root.string() + " --name x --version v1");
  CHECK(not_model.status == 2);
  auto bad_name = run(publish + src.string() + " --name a/b --version v1");
  CHECK(bad_name.status == 2);
  CHECK(bad_name.output.find("--name") != std::string::npos);

  // A config naming the version: it serves it under the version's name.
  const auto cfg = root / "serve.yaml";
  write_text(cfg, "serve:\n  model_version: tiny@v1\n  registry: "
                    + reg.string() + "\n  listen: 127.0.0.1:0\n");
  {
    child_process served({tutti_bin(), "serve", cfg.string()},
                         root / "serve.log");
    CHECK(wait_until(
      [&] {
        return read_text(root / "serve.log").find("serving tiny on")
               != std::string::npos;
      },
      60));
  }
  auto both = root / "both.yaml";
  write_text(both, "serve:\n  model: " + src.string()
                     + "\n  model_version: tiny@v1\n");
  auto refused_both = run(tutti_bin() + " serve " + both.string());
  CHECK(refused_both.status == 2);
  CHECK(refused_both.output.find("serve.model_version") != std::string::npos);

  // A registered file changed on disk: refused at load, the file named.
  corrupt(reg / "tiny" / "v1" / "model" / "model.safetensors");
  auto bad = serve::verify_model_version(reg, "tiny", "v1");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("model.safetensors differs") != std::string::npos);
  auto refused = run(tutti_bin() + " serve " + cfg.string(), 60);
  INFO(refused.output);
  CHECK(refused.status == 2);
  CHECK(refused.output.find("model.safetensors") != std::string::npos);
  CHECK(refused.output.find("on http://") == std::string::npos);
  // A file added after publishing is refused too.
  write_text(reg / "tiny" / "v2" / "model" / "extra.bin", "x");
  auto extra = serve::verify_model_version(reg, "tiny", "v2");
  REQUIRE_FALSE(extra.ok());
  CHECK(extra.message().find("extra.bin was not published")
        != std::string::npos);
  auto missing = serve::verify_model_version(reg, "tiny", "v9");
  CHECK_FALSE(missing.ok());
}
