#include "core/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include "core/check.h"
#include "core/io/atomic_file.h"
#include "core/io/durable_file.h"
#include "core/io/json.h"

namespace primer::io {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit

// Every dtype the format defines, so files holding tensors we cannot load still open and validate.
struct StoredDType {
  const char* name;
  uint64_t bytes;
  std::optional<DType> dtype;  // what load() produces; nullopt: not loadable
};
constexpr StoredDType kStoredDTypes[] = {
    {"F64", 8, DType::F64},   {"F32", 4, DType::F32},       {"F16", 2, DType::F16},       {"BF16", 2, DType::BF16},
    {"I64", 8, DType::I64},   {"I32", 4, DType::I32},       {"U8", 1, DType::U8},         {"BOOL", 1, DType::U8},
    {"I16", 2, std::nullopt}, {"U16", 2, std::nullopt},     {"U32", 4, std::nullopt},     {"U64", 8, std::nullopt},
    {"I8", 1, std::nullopt},  {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt},
};

const StoredDType* find_stored_dtype(const std::string& name) {
  for (const StoredDType& d : kStoredDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

uint64_t read_le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | uint64_t(p[i]);
  return v;
}

void append_le64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out += char((v >> (8 * i)) & 0xff);
}

// Bytes of a tensor of `shape` with `elem_bytes` elements, or nullopt on overflow.
std::optional<uint64_t> byte_size(const Shape& shape, uint64_t elem_bytes) {
  unsigned __int128 total = elem_bytes;
  for (const int64_t d : shape) {
    total *= uint64_t(d);
    if (total > std::numeric_limits<uint64_t>::max()) return std::nullopt;
  }
  return uint64_t(total);
}

std::string join_path(const std::string& dir, const std::string& file) { return (fs::path(dir) / file).string(); }

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  for (const StoredDType& d : kStoredDTypes)
    if (d.dtype == dtype) return d.name;  // first match: U8 before BOOL
  PRIMER_FAIL("safetensors: no safetensors dtype for {}", dtype_name(dtype));
}

// ---- SafetensorsFile ------------------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  const uint64_t file_size = file_.size();
  PRIMER_CHECK(file_size >= 8, "'{}': {} bytes, too short for a safetensors file (expected an 8-byte header length)",
               path, file_size);
  const uint64_t header_bytes = read_le64(file_.data());
  PRIMER_CHECK(header_bytes <= file_size - 8 && header_bytes <= kMaxHeaderBytes,
               "'{}': header length {} exceeds the file size {} (truncated, or not a safetensors file)", path,
               header_bytes, file_size);
  data_start_ = 8 + header_bytes;
  const uint64_t data_bytes = file_size - data_start_;

  const std::string source = path + " (header)";
  const json::Value header = json::parse(file_.text().substr(8, header_bytes), source);
  const json::Node root(header, source);
  for (const auto& [name, value] : root.as_object()) {
    const json::Node node = root.at(name);
    if (name == "__metadata__") {
      for (const auto& [key, v] : node.as_object()) metadata_[key] = node.at(key).as_string();
      continue;
    }
    SafetensorsEntry e;
    e.name = name;
    e.dtype = node.at("dtype").as_string();
    const StoredDType* stored = find_stored_dtype(e.dtype);
    if (!stored) node.at("dtype").fail(fmt::format("unknown safetensors dtype '{}'", e.dtype));
    const json::Node shape = node.at("shape");
    for (size_t i = 0; i < shape.size(); ++i) {
      e.shape.push_back(shape.at(i).as_int());
      if (e.shape.back() < 0) shape.at(i).fail("expected a non-negative dimension");
    }
    const json::Node offsets = node.at("data_offsets");
    if (offsets.size() != 2) offsets.fail(fmt::format("expected [begin, end], got {} numbers", offsets.size()));
    const int64_t begin = offsets.at(size_t(0)).as_int(), end = offsets.at(size_t(1)).as_int();
    PRIMER_CHECK(begin >= 0 && begin <= end, "'{}': tensor '{}' has data_offsets [{}, {}], expected 0 <= begin <= end",
                 path, name, begin, end);
    e.begin = uint64_t(begin);
    e.end = uint64_t(end);
    PRIMER_CHECK(e.end <= data_bytes,
                 "'{}': tensor '{}' needs data bytes [{}, {}) but the file holds only {} data bytes (truncated?)", path,
                 name, e.begin, e.end, data_bytes);
    const auto expected = byte_size(e.shape, stored->bytes);
    PRIMER_CHECK(expected && *expected == e.end - e.begin,
                 "'{}': tensor '{}' is {} {} ({} bytes) but its data_offsets span {} bytes", path, name, e.dtype,
                 shape_str(e.shape), expected ? std::to_string(*expected) : "overflowing", e.end - e.begin);
    by_name_.emplace(name, entries_.size());
    entries_.push_back(std::move(e));
  }

  std::vector<const SafetensorsEntry*> by_offset;
  for (const SafetensorsEntry& e : entries_)
    if (e.end > e.begin) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    PRIMER_CHECK(by_offset[i - 1]->end <= by_offset[i]->begin, "'{}': tensors '{}' [{}, {}) and '{}' [{}, {}) overlap",
                 path, by_offset[i - 1]->name, by_offset[i - 1]->begin, by_offset[i - 1]->end, by_offset[i]->name,
                 by_offset[i]->begin, by_offset[i]->end);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const SafetensorsEntry& e : entries_) out.push_back(e.name);
  return out;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = by_name_.find(name);
  PRIMER_CHECK(it != by_name_.end(), "'{}': no tensor named '{}'", path(), name);
  return entries_[it->second];
}

std::span<const std::byte> SafetensorsFile::bytes(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  return {file_.data() + data_start_ + e.begin, size_t(e.end - e.begin)};
}

Tensor SafetensorsFile::load(const std::string& name, DType dtype, Device device) const {
  const SafetensorsEntry& e = entry(name);
  const std::optional<DType> stored = find_stored_dtype(e.dtype)->dtype;
  PRIMER_CHECK(stored.has_value(),
               "'{}': tensor '{}' has dtype {}, which primer cannot load (expected F32, F64, "
               "BF16, F16, I32, I64, U8 or BOOL)",
               path(), name, e.dtype);
  Tensor host = Tensor::empty(e.shape, *stored, Device::cpu());
  const std::span<const std::byte> data = bytes(name);
  if (!data.empty()) std::memcpy(host.data_ptr(), data.data(), data.size());  // mapped data may be unaligned
  // f64 lives on the CPU only: convert there when it is either side of the conversion.
  if (device.is_cpu() || *stored == DType::F64 || dtype == DType::F64) host = host.to(dtype);
  return host.to(device).to(dtype);
}

// ---- SafetensorsCheckpoint ------------------------------------------------------------------------------

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& dir) : dir_(dir) {
  const std::string index_path = join_path(dir, kIndexFile), single_path = join_path(dir, kSingleFile);
  if (fs::exists(index_path)) {
    const json::Value index = json::parse_file(index_path);
    const json::Node weight_map = json::Node(index, index_path).at("weight_map");
    std::unordered_map<std::string, size_t> file_number;
    for (const auto& [name, value] : weight_map.as_object()) {
      const json::Node file_node = weight_map.at(name);
      const std::string& file = file_node.as_string();
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
        file_node.fail("expected a file name in the checkpoint directory");
      auto [it, added] = file_number.emplace(file, files_.size());
      if (added) files_.push_back(std::make_unique<SafetensorsFile>(join_path(dir, file)));
      PRIMER_CHECK(files_[it->second]->contains(name),
                   "'{}': weight_map puts tensor '{}' in '{}', which has no such tensor", index_path, name, file);
      shard_of_.emplace(name, it->second);
      names_.push_back(name);
    }
  } else if (fs::exists(single_path)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single_path));
    names_ = files_[0]->names();
    for (const std::string& name : names_) shard_of_.emplace(name, 0);
  } else {
    PRIMER_FAIL("'{}': no safetensors checkpoint (expected {} or {})", dir, kSingleFile, kIndexFile);
  }
}

const SafetensorsFile& SafetensorsCheckpoint::file_of(const std::string& name) const {
  const auto it = shard_of_.find(name);
  PRIMER_CHECK(it != shard_of_.end(), "checkpoint '{}' has no tensor named '{}'", dir_, name);
  return *files_[it->second];
}

const SafetensorsEntry& SafetensorsCheckpoint::entry(const std::string& name) const {
  return file_of(name).entry(name);
}

Tensor SafetensorsCheckpoint::load(const std::string& name, DType dtype, Device device) const {
  return file_of(name).load(name, dtype, device);
}

// ---- writer ---------------------------------------------------------------------------------------------

namespace {

void write_one_file(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                    const json::Object& metadata) {
  json::Object header;
  header.set("__metadata__", json::Value(metadata));
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    json::Array shape;
    for (const int64_t d : t.shape()) shape.emplace_back(d);
    json::Object e;
    e.set("dtype", safetensors_dtype_name(t.dtype()));
    e.set("shape", std::move(shape));
    e.set("data_offsets", json::Array{json::Value(int64_t(offset)), json::Value(int64_t(offset + t.nbytes()))});
    header.set(name, std::move(e));
    offset += t.nbytes();
  }
  std::string head = json::dump(json::Value(std::move(header)));
  head.append((8 - head.size() % 8) % 8, ' ');  // keeps the data buffer 8-byte aligned, as the reference writer does
  std::string prefix;
  append_le64(prefix, head.size());

  AtomicFile file(path);
  file.write(prefix);
  file.write(head);
  for (const auto& [name, t] : tensors) {
    const Tensor host = t.to(Device::cpu()).contiguous();
    file.write(host.data_ptr(), host.nbytes());
  }
  file.commit();
}

void remove_file(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
  PRIMER_CHECK(!ec, "cannot remove '{}': {}", path, ec.message());
}

bool is_shard_name(const std::string& file) {
  return file.starts_with("model-") && file.ends_with(".safetensors") && file.find("-of-") != std::string::npos;
}

}  // namespace

std::vector<std::string> write_safetensors(const std::string& dir,
                                           const std::vector<std::pair<std::string, Tensor>>& tensors,
                                           uint64_t max_shard_bytes,
                                           const std::map<std::string, std::string>& metadata) {
  PRIMER_CHECK(max_shard_bytes > 0, "write_safetensors('{}'): max_shard_bytes must be positive", dir);
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    PRIMER_CHECK(!name.empty() && name != "__metadata__", "write_safetensors('{}'): invalid tensor name '{}'", dir,
                 name);
    PRIMER_CHECK(seen.insert(name).second, "write_safetensors('{}'): tensor '{}' given twice", dir, name);
    PRIMER_CHECK(t.defined(), "write_safetensors('{}'): tensor '{}' is undefined", dir, name);
    safetensors_dtype_name(t.dtype());
  }
  json::Object meta;
  meta.set("format", "pt");
  for (const auto& [key, value] : metadata) meta.set(key, value);

  // Greedy split in the given order; an empty tensor never opens a shard of its own.
  std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (const auto& item : tensors) {
    const uint64_t n = item.second.nbytes();
    if (n > 0 && !shards.back().empty() && shard_bytes + n > max_shard_bytes) shards.emplace_back(), shard_bytes = 0;
    shards.back().push_back(item);
    shard_bytes += n;
    total_bytes += n;
  }

  std::error_code ec;
  fs::create_directories(dir, ec);
  PRIMER_CHECK(!ec, "cannot create directory '{}': {}", dir, ec.message());
  const std::string index_path = join_path(dir, kIndexFile);
  if (fs::exists(index_path)) {  // from here until the new index exists, no reader sees a half-replaced set
    remove_file(index_path);
    sync_directory(dir);
  }

  std::vector<std::string> written;
  if (shards.size() == 1) {
    write_one_file(join_path(dir, kSingleFile), shards[0], meta);
    written.push_back(kSingleFile);
  } else {
    json::Object weight_map;
    for (size_t k = 0; k < shards.size(); ++k) {
      const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, shards.size());
      write_one_file(join_path(dir, file), shards[k], meta);
      for (const auto& [name, t] : shards[k]) weight_map.set(name, file);
      written.push_back(file);
    }
    json::Value index;
    index["metadata"]["total_size"] = json::Value(int64_t(total_bytes));
    index["weight_map"] = json::Value(std::move(weight_map));
    write_file_atomic(index_path, json::dump(index, 2) + "\n");
    written.push_back(kIndexFile);
  }

  // Files of an earlier export that would confuse a reader of this one.
  const std::set<std::string> keep(written.begin(), written.end());
  bool removed = false;
  for (const auto& item : fs::directory_iterator(dir)) {
    const std::string file = item.path().filename().string();
    if (keep.count(file) == 0 && (file == kSingleFile || is_shard_name(file))) {
      remove_file(item.path().string());
      removed = true;
    }
  }
  if (removed) sync_directory(dir);
  return written;
}

}  // namespace primer::io
