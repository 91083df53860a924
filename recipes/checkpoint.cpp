#include "recipes/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "core/check.h"
#include "core/io/durable_file.h"
#include "core/io/hdf5_file.h"
#include "core/io/json.h"
#include "core/process.h"
#include "recipes/checkpoint_layout.h"
#include "recipes/checkpoint_manifest.h"
#include "recipes/fault_injection.h"

namespace primer::recipes {
namespace fs = std::filesystem;
using namespace checkpoint_layout;
namespace {

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

// Names present on only one side and shapes that differ, all in one error.
void check_parameters_match(const fs::path& dir, const Manifest& m, const std::vector<Parameter*>& params) {
  std::vector<std::string> problems;
  std::set<std::string> in_checkpoint;
  std::map<std::string, const Parameter*> model;
  for (const Parameter* p : params) model[p->name] = p;
  for (const ManifestParameter& p : m.parameters) {
    in_checkpoint.insert(p.name);
    const auto it = model.find(p.name);
    if (it == model.end())
      problems.push_back(fmt::format("'{}' is in the checkpoint but not in the model", p.name));
    else if (it->second->shape != p.shape)
      problems.push_back(fmt::format("'{}' has shape {} in the checkpoint, {} in the model", p.name, shape_str(p.shape),
                                     shape_str(it->second->shape)));
  }
  for (const Parameter* p : params)
    if (!in_checkpoint.count(p->name))
      problems.push_back(fmt::format("'{}' is in the model but not in the checkpoint", p->name));
  if (problems.empty()) return;
  std::string list;
  for (const std::string& s : problems) list += "\n  " + s;
  PRIMER_FAIL("checkpoint '{}' does not match the model's parameters:{}", dir.string(), list);
}

Tensor to_host(const Tensor& t) { return t.to(Device::cpu()).contiguous(); }

// This rank's file: attributes, its chunks (index first, so a reader learns what is there without listing), and on
// rank 0 the data cursor and resolved recipe.
void write_rank_file(io::Hdf5File& file, const TrainingState& state, const CheckpointContent& content, int rank,
                     int world_size) {
  file.set_attribute<int64_t>("/", "format_version", kCheckpointFormatVersion);
  file.set_attribute<int64_t>("/", "world_size", world_size);
  file.set_attribute<int64_t>("/", "rank", rank);
  file.set_attribute<int64_t>("/", "step", state.step);
  file.set_attribute<uint64_t>("/", "seed", state.seed);
  file.set_attribute<int64_t>("/", "nan_skipped_steps", state.nan_skipped_steps);
  file.set_attribute<int64_t>("/", "adamw_steps", content.optimizer->steps());
  if (rank == 0) {
    file.write_bytes(kDataCursor, state.data_cursor);
    file.write_bytes(kResolvedConfig, state.resolved_config);
  }
  json::Array index;
  for (const StateChunk& c : content.owned) {
    json::Value entry;
    entry["name"] = c.param->name;
    entry["offset"] = c.offset;
    entry["count"] = c.count();
    entry["moments"] = c.m.defined();
    index.push_back(std::move(entry));
  }
  file.write_bytes(kChunkIndex, json::dump(json::Value(std::move(index))));
  for (const StateChunk& c : content.owned) {
    const std::string key = chunk_key(c.param->name, c.offset);
    const Shape shape{c.count()};
    file.write(kParams + key, shape,
               (c.master.defined() ? to_host(c.master) : to_host(c.compute).to(DType::F32)).data<float>());
    if (!c.m.defined()) continue;
    file.write(kFirstMoment + key, shape, to_host(c.m).data<float>());
    file.write(kSecondMoment + key, shape, to_host(c.v).data<float>());
  }
}

// Reads a stored run's dataset (f32 [count]) on the host, once per run however many local chunks it feeds.
class ChunkReader {
 public:
  explicit ChunkReader(const std::vector<io::Hdf5File>& files) : files_(files) {}
  const Tensor& read(const std::string& prefix, const StoredChunk& c) {
    const std::string name = prefix + c.key;
    const std::string id = std::to_string(c.file) + ":" + name;
    if (id != last_id_) {
      const Shape shape = files_[c.file].shape_of(name);
      PRIMER_CHECK(shape_numel(shape) == c.count, "checkpoint file '{}': '{}' holds {} elements, its index says {}",
                   files_[c.file].path(), name, shape_numel(shape), c.count);
      last_ = Tensor::empty({c.count}, DType::F32);
      files_[c.file].read(name, shape, last_.data<float>());
      last_id_ = id;
    }
    return last_;
  }

 private:
  const std::vector<io::Hdf5File>& files_;
  std::string last_id_;
  Tensor last_;
};

}  // namespace

CheckpointContent registry_content(ParameterRegistry& params, optim::AdamW& optimizer) {
  optimizer.init_state();
  CheckpointContent content;
  content.optimizer = &optimizer;
  for (Parameter* p : params.all()) {
    PRIMER_CHECK(p->exact_value().defined(), "cannot checkpoint parameter '{}': the registry is not materialized",
                 p->name);
    content.parameters.push_back(p);
    const int64_t n = shape_numel(p->shape);
    StateChunk c{.param = p, .offset = 0};
    (p->master.defined() ? c.master : c.compute) = p->exact_value().view({n});
    if (p->trainable) {
      c.m = optimizer.first_moment(p->name).view({n});
      c.v = optimizer.second_moment(p->name).view({n});
    }
    content.owned.push_back(c);
  }
  content.held = content.owned;
  return content;
}

CheckpointManager::CheckpointManager(std::string output_dir, int keep_last_k, parallel::Communicator* ranks)
    : output_dir_(std::move(output_dir)), keep_last_k_(keep_last_k), ranks_(ranks) {
  PRIMER_CHECK(!output_dir_.empty(), "checkpoint output directory must not be empty");
}

namespace {

// Every rank learns whether all succeeded (a failed rank must not leave the others waiting for it).
bool all_ranks_ok(parallel::Communicator* ranks, bool ok) {
  if (!ranks || ranks->size() == 1) return ok;
  Tensor flag = Tensor::full({1}, ok ? 0.0 : 1.0, DType::I64);
  ranks->all_reduce(flag, parallel::ReduceOp::Max, "checkpoint-agree");
  return flag.item() == 0;
}

}  // namespace

std::string CheckpointManager::save(const TrainingState& state, const CheckpointContent& content) {
  PRIMER_CHECK(state.step >= 0, "checkpoint step must be >= 0, got {}", state.step);
  const int rank = ranks_ ? ranks_->rank() : 0, world = ranks_ ? ranks_->size() : 1;
  // The staging directory carries rank 0's pid, which latest() checks to tell a live save from a dead one.
  Tensor owner = Tensor::full({1}, double(::getpid()), DType::I64);
  if (world > 1) ranks_->broadcast(owner, 0, "checkpoint-owner");
  const fs::path final_dir = fs::path(output_dir_) / fmt::format("{}{}", kFinalPrefix, state.step);
  const fs::path staging =
      fs::path(output_dir_) / fmt::format(".checkpoint-{}.tmp-{}", state.step, int64_t(owner.item()));
  std::string error;
  if (rank == 0) {
    try {
      std::error_code ec;
      fs::create_directories(output_dir_, ec);
      PRIMER_CHECK(!ec, "cannot create checkpoint directory '{}': {}", output_dir_, ec.message());
      remove_tree(staging);
      fs::create_directory(staging, ec);
      PRIMER_CHECK(!ec, "cannot create '{}': {}", staging.string(), ec.message());
    } catch (const Error& e) {
      error = e.what();
    }
  }
  PRIMER_CHECK(all_ranks_ok(ranks_, error.empty()), "checkpoint at step {}: {}", state.step,
               error.empty() ? "rank 0 could not create the staging directory" : error);

  // Each rank writes and fsyncs its file; the digests travel to rank 0 for the manifest.
  const std::string file_name = rank_file_name(rank);
  Tensor digest = Tensor::zeros({2}, DType::I64);
  try {
    const std::string path = (staging / file_name).string();
    io::Hdf5File file = io::Hdf5File::create(path);
    write_rank_file(file, state, content, rank, world);
    file.close();
    const io::FileDigest d = io::digest_and_sync(path);
    fault_here_if_asked("checkpoint", state.step, rank);
    digest = Tensor::from_vector(std::vector<int64_t>{int64_t(d.bytes), int64_t(d.crc32c)}, {2}, DType::I64);
  } catch (const Error& e) {
    error = e.what();
  }
  if (!all_ranks_ok(ranks_, error.empty())) {
    if (rank == 0) {
      std::error_code ignored;  // the original error matters more than a failed cleanup
      fs::remove_all(staging, ignored);
    }
    PRIMER_FAIL("checkpoint at step {} failed{}", state.step,
                error.empty() ? " on another rank (its error is on stderr)" : ": " + error);
  }
  Tensor digests = digest;
  if (world > 1) {
    digests = Tensor::zeros({2 * world}, DType::I64);
    ranks_->all_gather(digest, digests, "checkpoint-digests");
  }

  if (rank == 0) {
    try {
      Manifest manifest;
      manifest.step = state.step;
      manifest.world_size = world;
      const std::vector<int64_t> d = digests.to_vector<int64_t>();
      for (int r = 0; r < world; ++r)
        manifest.files.push_back({rank_file_name(r), r, uint64_t(d[size_t(2 * r)]), uint32_t(d[size_t(2 * r + 1)])});
      for (Parameter* p : content.parameters) manifest.parameters.push_back({p->name, p->shape, p->trainable});
      io::write_file_synced((staging / kManifestName).string(), manifest_to_json(manifest));
      io::sync_directory(staging.string());
      // The commit point: after this rename the new checkpoint exists completely, before it not at all.
      const bool replaced_same_step = io::rename_directory_atomically(staging.string(), final_dir.string());
      io::sync_directory(output_dir_);
      if (replaced_same_step) remove_tree(staging);  // the swap left the older checkpoint-<step> here
      rotate(final_dir.string());
    } catch (const Error& e) {
      error = e.what();
      std::error_code ignored;
      fs::remove_all(staging, ignored);
    }
  }
  PRIMER_CHECK(all_ranks_ok(ranks_, error.empty()), "checkpoint at step {} was not committed{}", state.step,
               error.empty() ? " (rank 0's error is on stderr)" : ": " + error);
  return final_dir.string();
}

namespace {

// Hides the directory first (atomic), so a kill during removal never leaves a half-deleted final name; latest()
// removes what such a kill leaves.
void retire(int64_t step, const fs::path& dir) {
  const fs::path trash = dir.parent_path() / fmt::format(".checkpoint-{}.trash-{}", step, ::getpid());
  std::error_code ec;
  fs::rename(dir, trash, ec);
  PRIMER_CHECK(!ec, "cannot retire checkpoint '{}': {}", dir.string(), ec.message());
  remove_tree(trash);
}

}  // namespace

void CheckpointManager::rotate(const std::string& keep) const {
  if (keep_last_k_ <= 0) return;
  std::vector<std::pair<int64_t, fs::path>> older;
  for (const auto& [step, path] : checkpoint_dirs(output_dir_))
    if (path != fs::path(keep)) older.emplace_back(step, path);
  std::sort(older.begin(), older.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  // The checkpoint just written is one of the k kept, whatever its step.
  for (size_t i = size_t(keep_last_k_ - 1); i < older.size(); ++i) retire(older[i].first, older[i].second);
  io::sync_directory(output_dir_);
}

void CheckpointManager::remove_all() const {
  for (const auto& [step, path] : checkpoint_dirs(output_dir_)) retire(step, path);
  if (fs::is_directory(output_dir_)) io::sync_directory(output_dir_);
}

std::optional<std::string> CheckpointManager::latest() const { return newest(false); }

std::optional<std::string> CheckpointManager::newest(bool intact) const {
  if (!fs::is_directory(output_dir_)) return std::nullopt;
  for (const fs::path& path : list_directory(output_dir_)) {
    const auto owner = leftover_owner(path.filename().string());
    if (!owner || process_alive(*owner)) continue;
    fmt::print(stderr, "checkpoint: removing '{}', left by an interrupted save or rotation (process {})\n",
               path.string(), *owner);
    remove_tree(path);
  }
  const auto dirs = checkpoint_dirs(output_dir_);
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    const fs::path& path = it->second;
    try {
      const Manifest m = check_complete(path);
      if (intact)
        for (const ManifestFile& f : m.files) verify_checksum(path, f);
    } catch (const Error& error) {
      // Not deleted: the bytes may still matter to whoever investigates (primer inspect --verify).
      fmt::print(stderr, "checkpoint: skipping '{}', left in place: {}\n", path.string(), error.what());
      continue;
    }
    return path.string();
  }
  return std::nullopt;
}

TrainingState CheckpointManager::load(const std::string& dir, ParameterRegistry& params,
                                      optim::AdamW& optimizer) const {
  TrainingState state = load(dir, registry_content(params, optimizer));
  params.sync_compute_copies();
  return state;
}

TrainingState CheckpointManager::load(const std::string& dir, const CheckpointContent& content) const {
  const Manifest manifest = check_complete(dir);
  std::vector<Parameter*> model = content.parameters;
  check_parameters_match(dir, manifest, model);

  std::vector<io::Hdf5File> files;
  for (const ManifestFile& f : manifest.files) {
    verify_checksum(dir, f);
    files.push_back(io::Hdf5File::open_read_only((fs::path(dir) / f.name).string()));
  }
  const io::Hdf5File& first = files.front();
  const int64_t step = first.attribute<int64_t>("/", "step");
  PRIMER_CHECK(step == manifest.step, "checkpoint '{}': '{}' holds step {}, the manifest step {}", dir, first.path(),
               step, manifest.step);
  const int64_t adamw_steps = first.attribute<int64_t>("/", "adamw_steps");

  const auto stored = stored_chunks(files, manifest);
  ChunkReader reader(files);
  for (const StateChunk& c : content.held) {
    PRIMER_CHECK(c.master.defined(),
                 "cannot restore parameter '{}' from checkpoint '{}': its f32 master was released (frozen, held in its "
                 "compute dtype); restore before releasing masters",
                 c.param->name, dir);
    const int64_t lo = c.offset, hi = c.offset + c.master.numel();
    int64_t covered = 0;
    const auto it = stored.find(c.param->name);
    if (it != stored.end()) {
      for (const StoredChunk& s : it->second) {
        const int64_t a = std::max(lo, s.offset), b = std::min(hi, s.offset + s.count);
        if (a >= b) continue;
        covered += b - a;
        auto copy = [&](const char* prefix, const Tensor& into) {
          into.slice(0, a - lo, b - lo).copy_from(reader.read(prefix, s).slice(0, a - s.offset, b - s.offset));
        };
        copy(kParams, c.master);
        if (!c.m.defined()) continue;
        PRIMER_CHECK(s.moments || adamw_steps == 0,
                     "checkpoint '{}' has no AdamW state for trainable parameter '{}' after {} steps", dir,
                     c.param->name, adamw_steps);
        if (!s.moments) continue;
        copy(kFirstMoment, c.m);
        copy(kSecondMoment, c.v);
      }
    }
    PRIMER_CHECK(covered == hi - lo,
                 "checkpoint '{}' covers {} of the {} elements [{}, {}) of '{}' that this rank holds", dir, covered,
                 hi - lo, lo, hi, c.param->name);
  }
  content.optimizer->set_steps(adamw_steps);

  TrainingState state;
  state.step = step;
  state.seed = first.attribute<uint64_t>("/", "seed");
  // Checkpoints written before the count was kept skipped nothing that is still counted.
  if (first.has_attribute("/", "nan_skipped_steps"))
    state.nan_skipped_steps = first.attribute<int64_t>("/", "nan_skipped_steps");
  state.data_cursor = first.read_bytes(kDataCursor);
  state.resolved_config = first.read_bytes(kResolvedConfig);
  return state;
}

std::optional<std::string> CheckpointManager::resolve(const std::string& which, const std::string& option) const {
  if (which.empty()) return std::nullopt;
  if (which == "auto") return newest(true);
  PRIMER_CHECK(fs::is_directory(which), "{} '{}': no such checkpoint directory", option, which);
  check_complete(which);
  return which;
}

}  // namespace primer::recipes
