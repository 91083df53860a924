// manifest.json of a checkpoint directory: the format version, step and world size, one entry per shard
// file (rank, byte size, CRC32C) and every parameter's name and full shape. It is the table of contents that
// load() checks before opening any HDF5 file, and what makes a directory count as a complete checkpoint.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace primer::recipes {

// 1: one rank, whole parameters (`/params/<name>`); 2: chunk files written by any number of ranks. Both load.
inline constexpr int kCheckpointFormatVersion = 2;

struct ManifestFile {
  std::string name;  // relative to the checkpoint directory, e.g. "rank00000.h5"
  int rank = 0;
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

struct ManifestParameter {
  std::string name;
  Shape shape;  // the full (unsharded) shape
  bool trainable = true;
};

struct Manifest {
  int format_version = kCheckpointFormatVersion;
  int64_t step = 0;
  int world_size = 1;
  std::vector<ManifestFile> files;
  std::vector<ManifestParameter> parameters;
};

std::string manifest_to_json(const Manifest& manifest);
// Parses and validates `text`; errors name `source` (the manifest's path) and the offending key.
Manifest parse_manifest(const std::string& text, const std::string& source);

}  // namespace primer::recipes
