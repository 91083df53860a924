// The trainer's data, from a recipe: the byte corpus (`dataset`: a text file or directory, bytes as tokens) or
// tokenized shards (`tokenized_path`, written by `primer tokenize`) through the loader, behind one interface:
// the next micro-batch, held-out batches, and a cursor that checkpoints store to resume the exact stream.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/sequence_layout.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "core/config/config.h"

namespace primer::recipes {

class TrainData {
 public:
  virtual ~TrainData() = default;
  virtual void next(data::Batch& out) = 0;  // the next [B, T_local] micro-batch of this rank, with positions
  virtual int64_t heldout_batches() const = 0;
  virtual void heldout_batch(int64_t index, data::Batch& out) const = 0;
  virtual std::string cursor() const = 0;  // opaque; TrainingState::data_cursor
  // Continues from a cursor of the same data (errors name `where`, e.g. the checkpoint).
  virtual void restore(const std::string& cursor, const std::string& where) = 0;
  virtual int64_t vocab_size() const = 0;    // ids lie below this
  virtual std::string describe() const = 0;  // for the log
  // Why heldout_batches() is 0: the held-out size against one evaluation batch, and what to change.
  virtual std::string heldout_too_small() const = 0;
};

// Which slice of every global batch this rank takes: data-parallel rank r of n takes rows [r·B, (r+1)·B) of each
// global micro-batch of n·B rows (training and held-out alike), so n ranks see what one rank with n·B rows sees;
// under sequence parallelism, sequence-parallel rank s of p keeps its part of each row (core/sequence_layout.h), with
// the tokens' global positions.
struct DataShard {
  int64_t rank = 0, size = 1;
  int64_t sp_rank = 0, sp_size = 1;
  SequenceLayout sp_layout = SequenceLayout::ZigZag;
};

// B sequences of T tokens per micro-batch and rank; the recipe's data keys choose and configure the source. Text
// (`dataset`) is read as bytes, or through `text_tokenizer` when given (`primer eval` of text).
std::unique_ptr<TrainData> make_train_data(const config::Config& cfg, int64_t batch, int64_t seq, DataShard shard = {},
                                           const data::Tokenizer* text_tokenizer = nullptr);

// The loader options a recipe asks for (docs/recipes.md: stage, packing, packing_method, mix_strategy, ...).
data::LoaderOptions loader_options(const config::Config& cfg, int64_t seq, int64_t sources, DataShard shard = {});

}  // namespace primer::recipes
