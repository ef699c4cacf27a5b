// docs/config-reference.md: the key tables under their headings, with what
// the tables cannot say (the checks across keys) in a few lines each.

#include "tutti/config/key_reference.hpp"

namespace tutti {

std::string config_reference_document() {
  return R"(# Config reference

<!-- Generated from the declarations by
     `build/config/config_keys --update docs/config-reference.md`; the test
     config_reference_doc fails when this file differs from them. Edit the
     declarations, not this file. -->

Every key of every config file tutti reads, generated from its declaration:
one `v.field(...)` line in its section's `visit_fields` overload in
`config/include/tutti/config/`, from which the YAML reader, its refusals and
this reference are derived. Configs are checked strictly: an unknown or
duplicate key, a value of the wrong type or outside the `allowed` column, a
missing required key and an impossible combination of keys are each refused
in one line naming the key path (`train.steps`, `serve.max_queue`,
`spec.serve.max_queue`), exit status 2. A key not given keeps its default.

## The training job: `tutti run`, `tuttid`

Declared in `job_config.hpp` and `model_config.hpp`. Beyond each key's own
rules the loader checks across keys (`config/src/cross_checks.cpp`):
`world_size = nnodes * nproc_per_node`, `ep_size` divides `world_size` and
`num_experts`, `router_top_k <= num_experts`, heartbeat < collective <
rendezvous timeouts, nccl and bf16 need `device: cuda`, and the like.

)" + job_key_reference()
         + R"(
## Serving: `tutti serve`

A `serve:` section (declared in `serve_config.hpp`), or an InferenceService
manifest with the same keys under `spec.serve` (next table). Checks across
keys (`config/src/serve_checks.cpp`): `max_batch_tokens >= max_sequences`;
`model` or `model_version`, not both; `nodes` of several daemons need
`rendezvous_port`; `data_parallel_attention` needs `nodes`;
`rack_aware_alltoall`, `replan` and `rack_affinity` need `racks`
(`rack_affinity` a `placement` too); `offload`, `replan`, `rack_affinity` and
`data_parallel_attention` combine only as each key's doc says.

)" + serve_key_reference()
         + R"(
### The InferenceService manifest

The users' deployment manifest: `tutti serve` reads a file with `kind` or
`apiVersion` as one. `spec.serve.nodes`, when given, lists
`spec.parallelism.num_nodes` daemons.

)" + manifest_key_reference()
         + R"(
## The gateway: `tutti gateway`

Declared in `gateway_config.hpp`; checks across keys in
`config/src/gateway_config.cpp`: a group has `replicas` or `serve_config`
(`count` needs `serve_config`); a replica's port is not 0; `canary.steps`
rise; the canary's `version` is not the stable one;
`autoscale.max_replicas >= min_replicas`, and autoscale needs
`stable.serve_config`.

)" + gateway_key_reference();
}

} // namespace tutti
