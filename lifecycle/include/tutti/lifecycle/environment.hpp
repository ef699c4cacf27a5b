#pragma once
// What a node runs with, reported when it joins a job so the coordinator can
// refuse (or warn about, diag.environment) a node that differs from its own
// process: tutti's build id, the container image it runs in, the libraries
// loaded (CAF, Gloo, NCCL, CUDA
// runtime, BLAS and its kernels' core), the CUDA driver, the OS, and the
// data files the job reads with their checksums. Free disk on the data and
// checkpoint paths is reported too, but not compared.
//
// TUTTI_BUILD_ID, when set, replaces the build id read from the program's
// ELF build-id note (for packaging, and for tests that need a node built
// differently).
//
// The image is the digest deploy/image/build-image.sh writes into the image
// beside the programs (PREFIX/image-digest for PREFIX/bin/tuttid): the
// digest of the image's root file system layer and the image's name, or
// "none" outside such an image. TUTTI_IMAGE_DIGEST, when set, replaces it
// (for a platform that passes the digest of the image it pulled, and for
// tests).

#include <string>
#include <utility>
#include <vector>

#include "tutti/config/job_config.hpp"

namespace tutti::lifecycle {

// (component, value) pairs, in a fixed order; "free_disk.*" are not
// compared.
using environment = std::vector<std::pair<std::string, std::string>>;

// This process's environment as a node of `cfg`. `blas_core`: the kernels
// OpenBLAS runs (kernels::blas_core_name()). Reads every data file once.
environment node_environment(const job_config& cfg,
                             const std::string& blas_core);

// As "component=value" lines, and back.
std::vector<std::string> environment_lines(const environment& env);
environment parse_environment(const std::vector<std::string>& lines);

// The first compared component that differs, as "build_id: X on node 0, Y
// on node 1" ("missing" when one side lacks it); "" when none does.
std::string environment_difference(const environment& reference,
                                   const std::string& reference_name,
                                   const environment& other,
                                   const std::string& other_name);

// A table: one row per component, one column per node.
std::string environment_table(
  const std::vector<std::pair<std::string, environment>>& nodes);

} // namespace tutti::lifecycle
