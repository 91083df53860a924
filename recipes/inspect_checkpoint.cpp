// `primer inspect` on a training checkpoint: the manifest's step, world size, files and parameters, rank 0's seed,
// AdamW step count, data cursor and resolved recipe; verified, every file's CRC32C and every dataset read through
// HDF5's Fletcher32 check with its NaN/inf values counted.
#include <optional>
#include <vector>

#include "core/check.h"
#include "recipes/checkpoint_layout.h"
#include "recipes/inspect_parts.h"

namespace primer::recipes::inspect {
namespace fs = std::filesystem;
using namespace checkpoint_layout;
namespace {

json::Value shape_json(const Shape& shape) { return json::Array(shape.begin(), shape.end()); }

json::Value parameters_json(const Manifest& m) {
  int64_t total = 0, trainable = 0;
  json::Array tensors;
  for (const ManifestParameter& p : m.parameters) {
    total += shape_numel(p.shape);
    if (p.trainable) trainable += shape_numel(p.shape);
    json::Value t;
    t["name"] = p.name;
    t["shape"] = shape_json(p.shape);
    t["dtype"] = "f32";  // checkpoints hold the fp32 masters whatever the compute dtype
    t["trainable"] = p.trainable;
    tensors.push_back(std::move(t));
  }
  json::Value v;
  v["count"] = total;
  v["trainable"] = trainable;
  v["tensors"] = std::move(tensors);
  return v;
}

// The data cursor is JSON (docs/checkpoints.md); kept as text if it is not.
json::Value cursor_json(const std::string& text, const std::string& where) {
  try {
    return json::parse(text, where);
  } catch (const Error&) {
    return text;
  }
}

// Reads every stored dataset (parameters and moments; HDF5 checks each chunk's Fletcher32 on the way) and counts
// its non-finite values.
void verify_datasets(const std::vector<io::Hdf5File>& files, const Manifest& m, Verification& v) {
  for (const auto& [name, chunks] : stored_chunks(files, m)) {
    for (const StoredChunk& c : chunks) {
      for (const char* prefix : {kParams, kFirstMoment, kSecondMoment}) {
        if (prefix != kParams && !c.moments) continue;
        const std::string dataset = prefix + c.key;
        v.run([&] {
          Tensor values = Tensor::empty({c.count}, DType::F32);
          files[c.file].read(dataset, {c.count}, values.data<float>());
          v.count("datasets read with Fletcher32");
          v.count_nonfinite(files[c.file].path() + ":" + dataset, values);
        });
      }
    }
  }
}

}  // namespace

json::Value describe_checkpoint(const fs::path& dir, bool verify) {
  const Manifest m = check_complete(dir);
  json::Value r;
  r["kind"] = "training checkpoint";
  r["path"] = dir.string();
  r["step"] = m.step;
  r["world_size"] = m.world_size;
  r["format_version"] = m.format_version;
  // Read from rank 0's file below; set here to keep the report's order.
  for (const char* key : {"seed", "adamw_steps"}) r[key] = nullptr;
  json::Array listed;
  for (const ManifestFile& f : m.files) {
    json::Value e;
    e["name"] = f.name;
    e["rank"] = f.rank;
    e["bytes"] = int64_t(f.bytes);
    e["crc32c"] = fmt::format("{:08x}", f.crc32c);
    listed.push_back(std::move(e));
  }
  r["files"] = std::move(listed);
  r["parameters"] = parameters_json(m);
  for (const char* key : {"data_cursor", "resolved_recipe"}) r[key] = nullptr;
  Verification v;
  if (verify) {
    for (const ManifestFile& f : m.files)
      v.run([&] {
        verify_checksum(dir, f);
        v.count("files with CRC32C");
      });
  }
  // A file whose CRC32C failed may not open at all: verified, that is one more problem, not the end of the report.
  std::vector<io::Hdf5File> files;
  auto read_state = [&] {
    for (const ManifestFile& f : m.files) files.push_back(io::Hdf5File::open_read_only((dir / f.name).string()));
    const io::Hdf5File& first = files.front();
    r["seed"] = int64_t(first.attribute<uint64_t>("/", "seed"));
    r["adamw_steps"] = first.attribute<int64_t>("/", "adamw_steps");
    r["data_cursor"] = cursor_json(first.read_bytes(kDataCursor), first.path() + kDataCursor);
    r["resolved_recipe"] = first.read_bytes(kResolvedConfig);
  };
  if (verify) {
    v.run(read_state);
  } else {
    read_state();
  }
  if (!verify) return r;
  if (files.size() == m.files.size()) v.run([&] { verify_datasets(files, m, v); });
  r["verify"] = v.to_json();
  return r;
}

}  // namespace primer::recipes::inspect
