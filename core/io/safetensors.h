// Hugging Face safetensors: read (memory-mapped, validated) and write (sharded, atomic).
//
// Layout of one file: u64 little-endian header length N, N bytes of JSON
//   {"__metadata__": {"format": "pt", ...}, "<name>": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}, ...}
// then the data buffer; [b, e) is relative to the buffer start. A sharded checkpoint is
// model-0000k-of-0000n.safetensors plus model.safetensors.index.json {"metadata": {"total_size"}, "weight_map"}.
// See docs/formats.md.
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/io/mapped_file.h"
#include "core/tensor.h"

namespace primer::io {

// One tensor of a file's header, as stored.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // the safetensors spelling: "F32", "BF16", "I64", "BOOL", ...
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range within the data buffer
};

const char* safetensors_dtype_name(DType dtype);  // F32 F64 BF16 F16 I32 I64 U8

class SafetensorsFile {
 public:
  // Maps and validates the file: header length and JSON, known dtypes, shapes, every data range inside the
  // file with size numel·dtype size, no two ranges overlapping. Errors name the file and the tensor.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // header order
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return by_name_.count(name) > 0; }
  const SafetensorsEntry& entry(const std::string& name) const;  // unknown name → error naming the file
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  std::span<const std::byte> bytes(const std::string& name) const;  // the stored data, unaligned
  // A new tensor on `device` converted to `dtype` (BOOL reads as U8). Conversion runs on the device when the
  // stored dtype can go there, so a bf16 checkpoint crosses PCIe at half the bytes of f32.
  Tensor load(const std::string& name, DType dtype, Device device = Device::cpu()) const;

 private:
  MappedFile file_;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::unordered_map<std::string, size_t> by_name_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint directory: a single model.safetensors, or shards listed by model.safetensors.index.json
// (preferred when both exist), behind one interface.
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& dir);

  const std::string& directory() const { return dir_; }
  const std::vector<std::string>& names() const { return names_; }  // index order, or the file's order
  bool contains(const std::string& name) const { return shard_of_.count(name) > 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  const SafetensorsFile& file_of(const std::string& name) const;  // missing → error naming tensor and directory
  Tensor load(const std::string& name, DType dtype, Device device = Device::cpu()) const;
  size_t num_files() const { return files_.size(); }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, size_t> shard_of_;
};

inline constexpr uint64_t kNoShardLimit = std::numeric_limits<uint64_t>::max();

// Writes `tensors` (any device, dtype, strides; stored in their own dtype) into `dir` (created if needed):
// model.safetensors when everything fits in one shard of `max_shard_bytes`, else
// model-0000k-of-0000n.safetensors (filled greedily in the given order; a tensor larger than the limit gets
// a shard of its own) plus model.safetensors.index.json. Every file is written atomically (AtomicFile); the
// old index is removed first and the new one written last, so a reader never mixes two exports; shards of a
// previous export that this one does not overwrite are removed at the end. `metadata` goes into every
// file's __metadata__ (with "format": "pt" unless given, which transformers requires). Returns the file
// names written, index last.
std::vector<std::string> write_safetensors(const std::string& dir,
                                           const std::vector<std::pair<std::string, Tensor>>& tensors,
                                           uint64_t max_shard_bytes = kNoShardLimit,
                                           const std::map<std::string, std::string>& metadata = {});

}  // namespace primer::io
