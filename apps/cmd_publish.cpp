// tutti publish CHECKPOINT|EXPORT --name N --version V [--registry DIR]:
// registers a model directory as an immutable, verified version that
// service configs name (serve.model_version: N@V); `tutti publish --list`
// shows the registry.

#include <cstdio>

#include "command_line.hpp"
#include "commands.hpp"
#include "tutti/serve/model_registry.hpp"

namespace tutti::cli {

int publish_command(const std::vector<std::string>& args) {
  command_line cl(
    "publish", "CHECKPOINT|EXPORT --name N --version V [--registry DIR]",
    "registers the model directory (a checkpoint step directory or a\n"
    "`tutti export` / Hugging Face directory) as version N@V: the model is\n"
    "loaded to check it, copied into DIR/N/V/model, and the SHA-256 of every\n"
    "file is recorded in DIR/N/V/version.json. The same bytes again are a\n"
    "no-op; other bytes under a published N@V are refused. `tutti serve`\n"
    "loads a version (serve.model_version: N@V, serve.registry: DIR) only\n"
    "when every file matches. --list prints the registry.");
  std::string name, version, registry = "registry";
  cl.options()("name", po::value(&name), "the model's name")(
    "version", po::value(&version), "its version")(
    "registry", po::value(&registry),
    "the registry directory (default: registry)")(
    "list", "list the published versions and exit");
  cl.positional("model_dir");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (vm.count("list")) {
    auto all = serve::list_model_versions(registry);
    if (!all)
      return fail(2, "publish: " + all.message());
    for (const auto& v : all.value())
      std::printf("%s@%s  %zu files  from %s\n", v.name.c_str(),
                  v.version.c_str(), v.files.size(), v.source.c_str());
    return 0;
  }
  if (!vm.count("model_dir"))
    return cl.bad("missing CHECKPOINT|EXPORT directory");
  if (name.empty() || version.empty())
    return cl.bad("--name and --version are required");
  auto v = serve::publish_model(registry, vm["model_dir"].as<std::string>(),
                                name, version);
  if (!v)
    return fail(2, "publish: " + v.message());
  int64_t bytes = 0;
  for (const auto& f : v.value().files)
    bytes += f.bytes;
  std::printf("%s %s@%s: %zu files, %lld bytes, in %s\n",
              v.value().existed ? "already published" : "published",
              name.c_str(), version.c_str(), v.value().files.size(),
              static_cast<long long>(bytes),
              v.value().model_dir.parent_path().string().c_str());
  return 0;
}

} // namespace tutti::cli
