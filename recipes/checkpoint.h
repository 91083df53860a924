// Checkpoints: `<output_dir>/checkpoint-<step>/` holding one HDF5 file per rank (`rank00000.h5`, ...) and
// `manifest.json` (format version, world size, per-file byte size and CRC32C, parameter names and full shapes).
// A rank's file holds the chunks it owns: runs of a parameter's flattened elements (`/params/<name>#<offset>`, with
// the AdamW moments under `/optim/adamw/{m,v}/<name>#<offset>` and an index `/chunks`), plus step, seed and AdamW's
// step count; rank 0's file also holds the data cursor and the resolved recipe. Per-parameter element runs are the
// layout-free atom (as in Universal Checkpointing and torch.distributed.checkpoint): a load on any world size and
// ZeRO stage reads, for each run this rank holds, the stored runs that overlap it.
// A save is written under `.checkpoint-<step>.tmp-<pid of rank 0>/`; every rank writes and fsyncs its file, the ranks
// agree that all succeeded, then rank 0 writes the manifest, fsyncs and renames the directory to its final name and
// fsyncs the parent, so a save killed at any point (on any rank) leaves the previous checkpoints intact and never
// leaves an incomplete directory under a final name. Several ranks need one shared filesystem for output_dir.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <vector>

#include "core/parameters.h"
#include "optim/adamw.h"
#include "parallel/comm/communicator.h"

namespace primer::recipes {

// What a resumed run needs besides weights and optimizer state. The schedule position is the step itself
// (lr(step) is a pure function of it); the data's position is the data cursor (recipes/train_data.h).
struct TrainingState {
  int64_t step = 0;
  uint64_t seed = 0;
  std::string data_cursor;        // opaque to the checkpoint: the data loader's resume point
  std::string resolved_config;    // the fully resolved recipe, for provenance
  int64_t nan_skipped_steps = 0;  // steps skipped for a non-finite gradient so far (nan_policy: skip)
};

// One run of a parameter's flattened elements [offset, offset + count()) with its AdamW moments.
struct StateChunk {
  Parameter* param = nullptr;
  int64_t offset = 0;
  Tensor master;   // f32 view (any device); undefined where a frozen parameter's master was released
  Tensor compute;  // then the compute copy's view of the same elements, which holds them exactly (saved widened)
  Tensor m, v;     // f32 views of the moments; undefined for frozen parameters
  int64_t count() const { return master.defined() ? master.numel() : compute.numel(); }
};

// What one rank saves and restores.
struct CheckpointContent {
  std::vector<Parameter*> parameters;  // every parameter of the model (the manifest's names and full shapes)
  std::vector<StateChunk> owned;       // what this rank writes: no element is owned by two ranks
  std::vector<StateChunk> held;        // what this rank keeps, filled by a load
  optim::AdamW* optimizer = nullptr;   // its step count
};

// A single process's content: every parameter whole (gives trainable parameters zero moments if they have none).
CheckpointContent registry_content(ParameterRegistry& params, optim::AdamW& optimizer);

class CheckpointManager {
 public:
  // keep_last_k <= 0: keep all. `ranks` (a host communicator over every rank that saves, null for one process)
  // coordinates multi-rank saves and must outlive the manager.
  CheckpointManager(std::string output_dir, int keep_last_k, parallel::Communicator* ranks = nullptr);

  // Writes and commits checkpoint-<state.step>, then removes all but the newest keep_last_k checkpoints
  // (never the one just written). Collective over the ranks. Returns the committed directory.
  std::string save(const TrainingState& state, const CheckpointContent& content);
  std::string save(const TrainingState& state, ParameterRegistry& params, optim::AdamW& optimizer) {
    return save(state, registry_content(params, optimizer));
  }
  // The newest complete checkpoint (parsable manifest whose files exist with their recorded sizes).
  // Leftovers of killed saves or rotations (.checkpoint-*.tmp-<pid>, .trash-<pid>) are reported and removed.
  std::optional<std::string> latest() const;
  // Restores the held chunks' masters and moments and AdamW's step count, after checking that parameter names and
  // shapes match and every file read has its recorded size and CRC32C; returns the training state. The caller
  // refreshes compute copies. Works whatever world size and sharding wrote the checkpoint.
  TrainingState load(const std::string& dir, const CheckpointContent& content) const;
  TrainingState load(const std::string& dir, ParameterRegistry& params, optim::AdamW& optimizer) const;
  // "" → nothing; "auto" → the newest complete checkpoint whose files pass their CRC32C (a newer one that fails is
  // named on stderr and left in place; nothing if there is none); otherwise the path of a checkpoint to use.
  // `option` names where `which` came from in errors ("resume_from_checkpoint", "export --checkpoint").
  std::optional<std::string> resolve(const std::string& which, const std::string& option) const;

  // Removes every checkpoint-<step> directory (complete or not) of output_dir, each hidden before it is deleted.
  void remove_all() const;

  const std::string& output_dir() const { return output_dir_; }

 private:
  void rotate(const std::string& keep) const;
  // The newest complete checkpoint (intact: whose files also pass their CRC32C); the ones skipped are named on stderr.
  std::optional<std::string> newest(bool intact) const;

  std::string output_dir_;
  int keep_last_k_;
  parallel::Communicator* ranks_;
};

}  // namespace primer::recipes
