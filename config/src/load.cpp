// load_job_config: read the YAML (each key checked as it is read), fill in
// what defaults to another key, then check the keys together.

#include <algorithm>
#include <fstream>
#include <numeric>
#include <sstream>

#include "checks.hpp"
#include "yaml_reader.hpp"

namespace tutti {

expected<job_config> parse_job_config(const std::string& yaml_text,
                                      const std::string& source_name) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& ex) {
    return status::error(source_name + ": not valid YAML: " + ex.what());
  }
  job_config c;
  c.source_path = source_name;
  TUTTI_RETURN_IF_ERROR(config::read_document(root, source_name, c, "section"));
  // Unset: the experts over as many data-parallel ranks as they divide
  // evenly (all of them when the experts are as many or more).
  if (c.cluster.ep_size == 0)
    c.cluster.ep_size = std::gcd(
      std::max<int64_t>(1, c.moe.num_experts),
      std::max<int64_t>(1, c.cluster.world_size
                             / std::max<int64_t>(
                               1, c.cluster.tensor_model_parallel_size
                                    * c.cluster.pipeline_model_parallel_size)));
  TUTTI_RETURN_IF_ERROR(config::check_across_keys(c));
  return c;
}

status check_job_config(const job_config& c) {
  return config::check_across_keys(c);
}

expected<job_config> load_job_config(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return status::error(path + ": cannot open config file");
  std::stringstream buf;
  buf << in.rdbuf();
  return parse_job_config(buf.str(), path);
}

} // namespace tutti
