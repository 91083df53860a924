#include "recipes/checkpoint.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "core/check.h"
#include "core/io/durable_file.h"
#include "core/io/hdf5_file.h"
#include "recipes/checkpoint_manifest.h"

namespace primer::recipes {
namespace fs = std::filesystem;
namespace {

constexpr const char* kManifestName = "manifest.json";
constexpr const char* kFinalPrefix = "checkpoint-";
constexpr const char* kParams = "/params/";
constexpr const char* kFirstMoment = "/optim/adamw/m/";
constexpr const char* kSecondMoment = "/optim/adamw/v/";
constexpr const char* kDataCursor = "/state/data_cursor";
constexpr const char* kResolvedConfig = "/state/resolved_config";

std::string rank_file_name(int rank) { return fmt::format("rank{:05d}.h5", rank); }

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "checkpoint-<step>" → step.
std::optional<int64_t> checkpoint_step(const std::string& dir_name) {
  const std::string prefix = kFinalPrefix;
  if (dir_name.rfind(prefix, 0) != 0 || !all_digits(dir_name.substr(prefix.size()))) return std::nullopt;
  return std::stoll(dir_name.substr(prefix.size()));
}

// ".checkpoint-<step>.tmp-<pid>" (a save in progress) or ".trash-<pid>" (a rotation in progress) → pid.
std::optional<pid_t> leftover_owner(const std::string& name) {
  if (name.rfind(".checkpoint-", 0) != 0) return std::nullopt;
  for (const char* marker : {".tmp-", ".trash-"}) {
    const size_t at = name.rfind(marker);
    if (at != std::string::npos && all_digits(name.substr(at + std::string(marker).size())))
      return pid_t(std::stol(name.substr(at + std::string(marker).size())));
  }
  return std::nullopt;
}

bool process_alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

// The entries of `dir`, listed before any is acted on (removing entries while iterating is unspecified).
std::vector<fs::path> list_directory(const fs::path& dir) {
  std::vector<fs::path> entries;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) entries.push_back(it->path());
  PRIMER_CHECK(!ec, "cannot list checkpoint directory '{}': {}", dir.string(), ec.message());
  return entries;
}

void remove_tree(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  PRIMER_CHECK(!ec, "cannot remove '{}': {}", path.string(), ec.message());
}

Manifest read_manifest(const fs::path& dir) {
  const fs::path path = dir / kManifestName;
  std::ifstream in(path, std::ios::binary);
  PRIMER_CHECK(in.good(), "checkpoint '{}' has no readable {}", dir.string(), kManifestName);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_manifest(text.str(), path.string());
}

// A directory is a complete checkpoint when its manifest parses, agrees with the directory's step, and every
// file it lists exists with the recorded size. Checksums are verified by load(), which reads the bytes anyway.
Manifest check_complete(const fs::path& dir) {
  Manifest m = read_manifest(dir);
  if (const auto step = checkpoint_step(dir.filename().string()))
    PRIMER_CHECK(*step == m.step, "checkpoint '{}': manifest says step {}", dir.string(), m.step);
  for (const ManifestFile& f : m.files) {
    std::error_code ec;
    const uint64_t size = fs::file_size(dir / f.name, ec);
    PRIMER_CHECK(!ec, "checkpoint '{}': file '{}' listed in the manifest is missing ({})", dir.string(), f.name,
                 ec.message());
    PRIMER_CHECK(size == f.bytes, "checkpoint '{}': file '{}' has {} bytes, the manifest records {} (truncated?)",
                 dir.string(), f.name, size, f.bytes);
  }
  return m;
}

void verify_checksum(const fs::path& dir, const ManifestFile& f) {
  const io::FileDigest d = io::digest((dir / f.name).string());
  PRIMER_CHECK(d.bytes == f.bytes && d.crc32c == f.crc32c,
               "checkpoint '{}': file '{}' is corrupted: {} bytes with CRC32C {:08x}, the manifest records {} bytes "
               "with CRC32C {:08x}",
               dir.string(), f.name, d.bytes, d.crc32c, f.bytes, f.crc32c);
}

// Names present on only one side and shapes that differ, all in one error.
void check_parameters_match(const fs::path& dir, const Manifest& m, ParameterRegistry& params) {
  std::vector<std::string> problems;
  std::set<std::string> in_checkpoint;
  for (const ManifestParameter& p : m.parameters) {
    in_checkpoint.insert(p.name);
    if (!params.contains(p.name))
      problems.push_back(fmt::format("'{}' is in the checkpoint but not in the model", p.name));
    else if (params.get(p.name).shape != p.shape)
      problems.push_back(fmt::format("'{}' has shape {} in the checkpoint, {} in the model", p.name,
                                     shape_str(p.shape), shape_str(params.get(p.name).shape)));
  }
  for (Parameter* p : params.all())
    if (!in_checkpoint.count(p->name))
      problems.push_back(fmt::format("'{}' is in the model but not in the checkpoint", p->name));
  if (problems.empty()) return;
  std::string list;
  for (const std::string& s : problems) list += "\n  " + s;
  PRIMER_FAIL("checkpoint '{}' does not match the model's parameters:{}", dir.string(), list);
}

Tensor to_host(const Tensor& t) { return t.to(Device::cpu()).contiguous(); }

void write_shard(io::Hdf5File& file, const TrainingState& state, ParameterRegistry& params,
                 const optim::AdamW& optimizer, std::vector<ManifestParameter>& listed) {
  file.set_attribute<int64_t>("/", "format_version", kCheckpointFormatVersion);
  file.set_attribute<int64_t>("/", "world_size", 1);
  file.set_attribute<int64_t>("/", "rank", 0);
  file.set_attribute<int64_t>("/", "step", state.step);
  file.set_attribute<uint64_t>("/", "seed", state.seed);
  file.set_attribute<int64_t>("/", "adamw_steps", optimizer.steps());
  file.write_bytes(kDataCursor, state.data_cursor);
  file.write_bytes(kResolvedConfig, state.resolved_config);
  for (Parameter* p : params.all()) {
    PRIMER_CHECK(p->master.defined(), "cannot checkpoint parameter '{}': the registry is not materialized", p->name);
    file.write(kParams + p->name, p->shape, to_host(p->master).data<float>());
    if (optimizer.has_state(p->name)) {
      file.write(kFirstMoment + p->name, p->shape, to_host(optimizer.first_moment(p->name)).data<float>());
      file.write(kSecondMoment + p->name, p->shape, to_host(optimizer.second_moment(p->name)).data<float>());
    }
    listed.push_back({p->name, p->shape, p->trainable});
  }
}

Tensor read_to_host(const io::Hdf5File& file, const std::string& name, const Shape& shape) {
  Tensor host = Tensor::empty(shape, DType::F32);
  file.read(name, shape, host.data<float>());
  return host;
}

}  // namespace

CheckpointManager::CheckpointManager(std::string output_dir, int keep_last_k)
    : output_dir_(std::move(output_dir)), keep_last_k_(keep_last_k) {
  PRIMER_CHECK(!output_dir_.empty(), "checkpoint output directory must not be empty");
}

std::string CheckpointManager::save(const TrainingState& state, ParameterRegistry& params,
                                    const optim::AdamW& optimizer) {
  PRIMER_CHECK(state.step >= 0, "checkpoint step must be >= 0, got {}", state.step);
  std::error_code ec;
  fs::create_directories(output_dir_, ec);
  PRIMER_CHECK(!ec, "cannot create checkpoint directory '{}': {}", output_dir_, ec.message());
  const fs::path final_dir = fs::path(output_dir_) / fmt::format("{}{}", kFinalPrefix, state.step);
  const fs::path staging = fs::path(output_dir_) / fmt::format(".checkpoint-{}.tmp-{}", state.step, ::getpid());
  remove_tree(staging);
  fs::create_directory(staging, ec);
  PRIMER_CHECK(!ec, "cannot create '{}': {}", staging.string(), ec.message());
  try {
    Manifest manifest;
    manifest.step = state.step;
    const std::string shard_name = rank_file_name(0);
    const std::string shard_path = (staging / shard_name).string();
    io::Hdf5File shard = io::Hdf5File::create(shard_path);
    write_shard(shard, state, params, optimizer, manifest.parameters);
    shard.close();
    const io::FileDigest digest = io::digest_and_sync(shard_path);
    manifest.files.push_back({shard_name, 0, digest.bytes, digest.crc32c});
    io::write_file_synced((staging / kManifestName).string(), manifest_to_json(manifest));
    io::sync_directory(staging.string());
  } catch (...) {
    std::error_code ignored;  // the original error matters more than a failed cleanup
    fs::remove_all(staging, ignored);
    throw;
  }
  // The commit point: after this rename the new checkpoint exists completely, before it not at all.
  const bool replaced_same_step = io::rename_directory_atomically(staging.string(), final_dir.string());
  io::sync_directory(output_dir_);
  if (replaced_same_step) remove_tree(staging);  // the swap left the older checkpoint-<step> here
  rotate(final_dir.string());
  return final_dir.string();
}

void CheckpointManager::rotate(const std::string& keep) const {
  if (keep_last_k_ <= 0) return;
  std::vector<std::pair<int64_t, fs::path>> older;
  for (const fs::path& path : list_directory(output_dir_)) {
    const auto step = checkpoint_step(path.filename().string());
    if (step && fs::is_directory(path) && path != fs::path(keep)) older.emplace_back(*step, path);
  }
  std::sort(older.begin(), older.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  // The checkpoint just written is one of the k kept, whatever its step.
  for (size_t i = size_t(keep_last_k_ - 1); i < older.size(); ++i) {
    // Hide the directory first (atomic), so a kill during removal never leaves a half-deleted final name.
    const fs::path trash = older[i].second.parent_path() /
                           fmt::format(".checkpoint-{}.trash-{}", older[i].first, ::getpid());
    std::error_code ec;
    fs::rename(older[i].second, trash, ec);
    PRIMER_CHECK(!ec, "cannot retire checkpoint '{}': {}", older[i].second.string(), ec.message());
    remove_tree(trash);
  }
  io::sync_directory(output_dir_);
}

std::optional<std::string> CheckpointManager::latest() const {
  if (!fs::is_directory(output_dir_)) return std::nullopt;
  std::optional<std::pair<int64_t, std::string>> best;
  for (const fs::path& path : list_directory(output_dir_)) {
    const std::string name = path.filename().string();
    if (const auto owner = leftover_owner(name)) {
      if (!process_alive(*owner)) {
        fmt::print(stderr, "checkpoint: removing '{}', left by an interrupted save or rotation (process {})\n",
                   path.string(), *owner);
        remove_tree(path);
      }
      continue;
    }
    const auto step = checkpoint_step(name);
    if (!step || !fs::is_directory(path)) continue;
    try {
      check_complete(path);
    } catch (const Error& error) {
      fmt::print(stderr, "checkpoint: ignoring incomplete '{}': {}\n", path.string(), error.what());
      continue;
    }
    if (!best || *step > best->first) best = std::make_pair(*step, path.string());
  }
  if (!best) return std::nullopt;
  return best->second;
}

TrainingState CheckpointManager::load(const std::string& dir, ParameterRegistry& params,
                                      optim::AdamW& optimizer) const {
  const Manifest manifest = check_complete(dir);
  PRIMER_CHECK(manifest.world_size == 1,
               "checkpoint '{}' was written by {} ranks; resuming on a different world size is not supported yet", dir,
               manifest.world_size);
  for (const ManifestFile& f : manifest.files) verify_checksum(dir, f);
  check_parameters_match(dir, manifest, params);

  const io::Hdf5File shard = io::Hdf5File::open_read_only((fs::path(dir) / manifest.files[0].name).string());
  const int64_t step = shard.attribute<int64_t>("/", "step");
  PRIMER_CHECK(step == manifest.step, "checkpoint '{}': '{}' holds step {}, the manifest step {}", dir, shard.path(),
               step, manifest.step);
  const int64_t adamw_steps = shard.attribute<int64_t>("/", "adamw_steps");
  for (Parameter* p : params.all()) {
    PRIMER_CHECK(p->master.defined(), "cannot load '{}' into parameter '{}': the registry is not materialized", dir,
                 p->name);
    const Device device = p->master.device();
    p->master.copy_from(read_to_host(shard, kParams + p->name, p->shape));
    if (!p->trainable) continue;
    if (!shard.contains(kFirstMoment + p->name)) {
      PRIMER_CHECK(adamw_steps == 0, "checkpoint '{}' has no AdamW state for trainable parameter '{}' after {} steps",
                   dir, p->name, adamw_steps);
      continue;
    }
    optimizer.set_state(p->name, read_to_host(shard, kFirstMoment + p->name, p->shape).to(device),
                        read_to_host(shard, kSecondMoment + p->name, p->shape).to(device));
  }
  optimizer.set_steps(adamw_steps);
  params.sync_compute_copies();

  TrainingState state;
  state.step = step;
  state.seed = shard.attribute<uint64_t>("/", "seed");
  state.data_cursor = shard.read_bytes(kDataCursor);
  state.resolved_config = shard.read_bytes(kResolvedConfig);
  return state;
}

std::optional<std::string> CheckpointManager::resolve(const std::string& resume_from) const {
  if (resume_from.empty()) return std::nullopt;
  if (resume_from == "auto") return latest();
  PRIMER_CHECK(fs::is_directory(resume_from), "resume_from '{}': no such checkpoint directory", resume_from);
  check_complete(resume_from);
  return resume_from;
}

}  // namespace primer::recipes
