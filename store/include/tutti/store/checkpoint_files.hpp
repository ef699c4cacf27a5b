#pragma once
// Checkpoint files. A checkpoint is a directory
// step-XXXXXXXX/ holding one shard file per rank plus a MANIFEST that lists
// every shard with its size and whole-file xxh64. It is complete only when
// all shards and the MANIFEST are durable; the coordinator then commits it
// to the job store (docs/architecture.md, "Checkpoints and resume").
//
// Shard file layout (all fixed-width integers little-endian):
//   offset 0   8 bytes  magic "TUTTICKP"
//   offset 8   u32      format version (1)
//   offset 12  u32      header length H
//   offset 16  H bytes  msgpack header: {rank, step, epoch, ints, strings,
//                       tensors: [{name, shape, dtype: "f32", offset, bytes, xxh64}]}
//   16 + H     u64      xxh64 of the H header bytes
//   24 + H     data     raw little-endian tensor bytes; tensor offsets are
//                       relative to here, contiguous in header order, and the
//                       file ends exactly at the end of the last tensor.
//
// Every error is one line naming the file, and the byte offset in it where
// there is one.

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::store {

// A tensor to write, borrowed from the caller (a host snapshot). f32 only.
struct tensor_view {
  std::string name;
  std::vector<std::int64_t> shape; // [] is a scalar
  const float* data = nullptr;     // product(shape) elements
};

struct loaded_tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::string dtype;       // "f32"
  std::uint64_t xxh64 = 0; // of the raw bytes, as stored in the header
  std::vector<float> data; // empty when read with load_data = false
};

// Everything besides tensors a rank needs to continue exactly: step, data
// cursor, RNG states, membership epoch, ... (`ints` and `strings` are free
// for the engine; strings may hold binary, e.g. a serialized RNG state).
struct shard_meta {
  std::int64_t rank = 0;
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::map<std::string, std::int64_t> ints;
  std::map<std::string, std::string> strings;
};

struct shard_file {
  shard_meta meta;
  std::vector<loaded_tensor> tensors; // in file order
  std::uint64_t data_offset = 0; // file offset of the data section (24 + H)
  std::vector<std::uint64_t>
    offsets; // per tensor: file offset of its first byte
};

inline constexpr std::uint32_t shard_format_version = 1;

std::string checkpoint_dir_name(std::int64_t step); // "step-00000123"
std::string shard_file_name(std::int64_t rank);     // "shard-00003.ckpt"

// Writes the shard to `file`.tmp straight from the tensors' memory, fsyncs
// it, renames it into place and fsyncs the directory (created, durably, if
// missing). Returns the file's size. Tensor names must be unique and
// non-empty, dims >= 0, data non-null unless the tensor is empty.
expected<std::uint64_t> write_shard_file(
  const std::filesystem::path& file, const shard_meta& meta,
  const std::vector<tensor_view>& tensors);

// Reads and checks a shard: magic, version, header length against the file
// size, header hash, header fields, tensor extents (a truncated file is
// caught here even without data), and with load_data every tensor's xxh64.
expected<shard_file> read_shard_file(const std::filesystem::path& file,
                                     bool load_data = true);

// read_shard_file's checks including every tensor hash, in one sequential
// pass through a small buffer instead of loading the tensors (verifying a
// large shard needs little memory). Returned tensors have no data. When
// `file_xxh64` is given it receives the whole-file hash from the same pass.
expected<shard_file> verify_shard_file(const std::filesystem::path& file,
                                       std::uint64_t* file_xxh64 = nullptr);

// One MANIFEST line per shard: file name inside the checkpoint directory,
// its size, and the xxh64 of the whole file.
struct manifest_entry {
  std::string file;
  std::uint64_t bytes = 0;
  std::uint64_t xxh64 = 0;
};

struct manifest {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::int64_t world_size = 0; // one shard per rank
  std::vector<manifest_entry> shards;
};

// Convenience for the writer: the manifest entry of a written shard (size
// and whole-file hash, read back from disk, so it describes what is durable).
expected<manifest_entry> describe_shard(const std::filesystem::path& file);

// Writes ckpt_dir/MANIFEST as human-readable JSON, atomically with file and
// directory fsync, then fsyncs ckpt_dir's parent so the step directory itself
// survives power loss: on success the checkpoint's files are all durable. Hashes are 16-digit hex strings (never JSON numbers, which
// many readers round through double), and a "checksum" field (xxh64 of the
// canonical encoding of all other fields) lets a reader tell a damaged
// MANIFEST from a damaged shard.
status write_manifest(const std::filesystem::path& ckpt_dir, const manifest& m);

// Reads ckpt_dir/MANIFEST; a truncated, unparsable, inconsistent or
// checksum-failing one is refused with an error naming the file.
expected<manifest> read_manifest(const std::filesystem::path& ckpt_dir);

// Full check: the MANIFEST reads, it lists world_size shards with distinct
// names, each exists with the listed size and whole-file hash, each shard's
// header and every tensor hash verify, and each shard's step/epoch match the
// MANIFEST with ranks 0..world_size-1 each present once. Returns the first
// problem, naming the file (and offset).
status verify_checkpoint(const std::filesystem::path& ckpt_dir);

} // namespace tutti::store
