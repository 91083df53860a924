// Checkpoints: `<output_dir>/checkpoint-<step>/` holding one HDF5 shard per rank (`rank00000.h5`: fp32 masters,
// AdamW moments and step count, training step, seed, data cursor, resolved config) and `manifest.json`
// (format version, world size, per-file byte size and CRC32C, parameter names and shapes).
// A save is written under `.checkpoint-<step>.tmp-<pid>/`, fsynced, renamed to its final name and the parent
// fsynced, so a save killed at any point leaves the previous checkpoints intact and never leaves an
// incomplete directory under a final name. Today world size is 1; the layout is the one FSDP shards will use.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/parameters.h"
#include "optim/adamw.h"

namespace primer::recipes {

// What a resumed run needs besides weights and optimizer state. The schedule position is the step itself
// (lr(step) is a pure function of it); the data's position is the data cursor (recipes/train_data.h).
struct TrainingState {
  int64_t step = 0;
  uint64_t seed = 0;
  std::string data_cursor;      // opaque to the checkpoint: the data loader's resume point
  std::string resolved_config;  // the fully resolved recipe, for provenance
};

class CheckpointManager {
 public:
  CheckpointManager(std::string output_dir, int keep_last_k);  // keep_last_k <= 0: keep all

  // Writes and commits checkpoint-<state.step>, then removes all but the newest keep_last_k checkpoints
  // (never the one just written). Returns the committed directory.
  std::string save(const TrainingState& state, ParameterRegistry& params, const optim::AdamW& optimizer);
  // The newest complete checkpoint (parsable manifest whose files exist with their recorded sizes).
  // Leftovers of killed saves or rotations (.checkpoint-*.tmp-<pid>, .trash-<pid>) are reported and removed.
  std::optional<std::string> latest() const;
  // Restores masters, AdamW state and step count into a materialized registry and optimizer, after checking
  // every file's size and CRC32C and that parameter names and shapes match; returns the training state.
  TrainingState load(const std::string& dir, ParameterRegistry& params, optim::AdamW& optimizer) const;
  // "" → nothing; "auto" → latest() (nothing if there is none); otherwise the path of a checkpoint to use.
  std::optional<std::string> resolve(const std::string& resume_from) const;

  const std::string& output_dir() const { return output_dir_; }

 private:
  void rotate(const std::string& keep) const;

  std::string output_dir_;
  int keep_last_k_;
};

}  // namespace primer::recipes
