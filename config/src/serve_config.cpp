// parse_serve_config: which form the file is (a `serve:` section or an
// InferenceService manifest), its keys read by their declarations, then
// the checks across keys (serve_checks.cpp).

#include "tutti/config/serve_config.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "serve_checks.hpp"
#include "yaml_reader.hpp"

namespace tutti::serve {

namespace {

status read_serve_file(const YAML::Node& root, serve_config& c,
                       config::given_keys& given) {
  if (!root.IsMap())
    return status::error("must be a mapping");
  // A manifest is known by its own keys; anything else is a serve file,
  // whose one section is `serve:`.
  c.from_manifest = root["kind"] || root["apiVersion"];
  if (c.from_manifest) {
    auto manifest = config::keys_of([&](auto& v) { visit_manifest(v, c); });
    TUTTI_RETURN_IF_ERROR(
      config::read_document(root, "top level", manifest, "key", &given));
    return config::check_serve_manifest(c, given);
  }
  auto file = config::keys_of([&](auto& v) { visit_serve_file(v, c); });
  TUTTI_RETURN_IF_ERROR(
    config::read_document(root, "top level", file, "key", &given));
  return config::check_serve_file(c, given);
}

} // namespace

expected<serve_config> parse_serve_config(const std::string& text,
                                          const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return status::error(source + ": not YAML (line "
                         + std::to_string(e.mark.line + 1) + ")");
  }
  serve_config c;
  config::given_keys given;
  status st;
  try {
    st = read_serve_file(root, c, given);
  } catch (const YAML::Exception& e) {
    st = status::error("line " + std::to_string(e.mark.line + 1) + ": "
                       + e.msg);
  }
  if (!st.ok())
    return status::error(source + ": " + st.message());
  return c;
}

expected<serve_config> load_serve_config(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return status::error(path + ": a directory, not a config file");
  std::ifstream in(path);
  if (!in)
    return status::error(path + ": cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  auto cfg = parse_serve_config(s.str(), path);
  if (cfg && cfg.value().log_dir.empty())
    cfg.value().log_dir =
      std::filesystem::absolute(path, ec).parent_path().string();
  return cfg;
}

bool is_serve_config_file(const std::string& path) {
  try {
    const auto root = YAML::LoadFile(path);
    return root.IsMap() && (root["serve"] || root["kind"]);
  } catch (const YAML::Exception&) {
    return false; // the job config's loader names what is wrong
  }
}

int64_t serve_config::ep_ranks_for(int64_t experts) const {
  if (ep_size > 0)
    return ep_size;
  // Across daemons: a rank per device of a node, as far as every daemon's
  // ranks together divide the experts.
  const auto& cl = limits.cluster;
  const int64_t daemons =
    cl.spans_daemons() ? static_cast<int64_t>(cl.nodes.size()) : 1;
  const int64_t devices_here = cl.spans_daemons() ? num_gpus_per_node
                                                  : devices();
  int64_t ranks = 1;
  for (int64_t n = 1; n <= std::min(devices_here, experts); ++n)
    if (experts % (n * daemons) == 0)
      ranks = n;
  return ranks;
}

} // namespace tutti::serve
