// The training-data loader over tokenized shards: one global stream of fixed-length rows, defined by the data,
// the options and the seed alone, from which each data-parallel rank takes its slice of every global batch and
// each sequence-parallel rank its part of every row. A cursor of a few integers, stored in checkpoints, restores
// the stream exactly, also on a different number of data-parallel ranks.
//
// The stream, epoch by epoch (docs/data.md "Tokenized data and the loader" has the details):
//  1. Training documents: all documents but the held-out ones (document d is held out when
//     uniform01(key_for(0, "data.heldout"), d) < heldout_fraction: fixed across seeds and runs).
//  2. The epoch's document sequence, from the counter RNG keyed by (seed, epoch), never by call order:
//     without source weights, every training document once, shuffled; with weights, as many draws as there
//     are training documents, each picking source i with probability p_i (or the length-weighted
//     ρ_i = p_i·L̄_i / Σ_j p_j·L̄_j) and taking that source's next document from its own shuffled passes.
//  3. Packing (data/packing.h) into rows of seq_len tokens; rows of whole-document packings are shuffled.
//  4. A row's targets: targets[t] = ids[t + 1] where token t + 1 is a real token whose loss mask is 1, else
//     -100; the last position of a row has no target (the reference's block layout).
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "data/packing.h"
#include "core/sequence_layout.h"
#include "data/token_corpus.h"

namespace primer::data {

inline constexpr int32_t kIgnoreIndex = -100;

struct LoaderOptions {
  int64_t seq_len = 0;  // tokens per row
  PackingMethod packing = PackingMethod::Concat;
  // false (the reference): positions run 0..seq_len−1 across documents and a document's first token is a
  // target of the previous document's last. true: positions restart at every document (and at the row start),
  // and no target crosses a document start; `segments` tells attention and mixers where to reset.
  bool reset_at_document_starts = false;
  bool drop_long_documents = false;    // whole-document packings: drop documents longer than a row (else cut)
  std::vector<double> source_weights;  // empty: each training document once per epoch; else p_i per source
  bool length_weighted = false;        // with weights: sample sources by ρ_i = p_i·L̄_i / Σ_j p_j·L̄_j
  bool shuffle = true;
  uint64_t seed = 0;
  double heldout_fraction = 0;
  int64_t dp_rank = 0, dp_size = 1;  // data parallelism: rank r takes rows [r·b, (r+1)·b) of each global batch
  int64_t sp_rank = 0, sp_size = 1;  // sequence parallelism: rank r takes its part of every row
  SequenceLayout sp_layout = SequenceLayout::ZigZag;
};

// This rank's rows: [rows, seq] row-major, seq = seq_len / sp_size.
struct Batch {
  int64_t rows = 0, seq = 0;
  std::vector<int32_t> ids;
  std::vector<int32_t> targets;    // kIgnoreIndex where no loss is taken
  std::vector<int32_t> positions;  // position ids (global positions in the row under sequence parallelism)
  std::vector<int32_t> segments;   // which piece of the row a token belongs to (0, 1, ...), −1 for padding
};

// Where the stream stands. `sample` alone orders the stream; the rest lets a restore rebuild the current
// epoch without replaying the ones before.
struct LoaderCursor {
  int64_t sample = 0;                    // rows consumed, by all data-parallel ranks together
  int64_t epoch = 0;                     // the epoch that holds row `sample`
  int64_t epoch_start = 0;               // the global index of that epoch's first row
  std::vector<int64_t> source_consumed;  // with weights: documents drawn from each source before `epoch`
  uint64_t fingerprint = 0;  // of the data and every option that shapes the stream (not of the parallel layout)

  std::string to_json() const;
  static LoaderCursor parse(const std::string& text, const std::string& where);
  bool operator==(const LoaderCursor&) const = default;
};

class Loader {
 public:
  Loader(const TokenCorpus& corpus, LoaderOptions options);  // the corpus must outlive the loader

  // Fills `out` with this rank's rows of the next global batch (rows_per_rank × dp_size rows) and advances.
  void next(int64_t rows_per_rank, Batch& out);
  const LoaderCursor& cursor() const { return cursor_; }
  // Continues from a cursor saved by a loader over the same data and options (any dp/sp layout).
  void restore(const LoaderCursor& cursor);

  // Held-out documents, concatenated in order and cut into rows (no shuffling); batch i of a given global
  // size is the same rows on any layout, each rank taking its slice as in training.
  int64_t heldout_batches(int64_t rows_per_rank) const;
  void heldout_batch(int64_t index, int64_t rows_per_rank, Batch& out) const;

  int64_t train_documents() const { return int64_t(train_docs_.size()); }
  int64_t train_tokens() const { return train_tokens_; }
  int64_t heldout_documents() const { return int64_t(heldout_docs_.size()); }
  int64_t heldout_tokens() const { return heldout_tokens_; }
  // Per-document source probabilities in effect (after length weighting); empty without weights.
  const std::vector<double>& source_probabilities() const { return probabilities_; }
  std::string describe() const;  // one line for the log

 private:
  struct Epoch {
    int64_t index = 0, first_row = 0;
    RowPlan plan;
    std::vector<int64_t> consumed_before, consumed_after;  // source_consumed at this and at the next epoch's start
    int64_t dropped = 0;                                   // documents dropped as too long
  };
  Epoch build_epoch(int64_t epoch, const std::vector<int64_t>& consumed) const;
  std::vector<int64_t> epoch_documents(int64_t epoch, const std::vector<int64_t>& consumed,
                                       std::vector<int64_t>& consumed_after) const;
  const Epoch& epoch_holding(int64_t row);  // builds later epochs as needed (never earlier than the cursor's)
  void fill(std::span<const Piece> pieces, int32_t* ids, int32_t* targets, int32_t* positions, int32_t* segments) const;
  void emit(const std::vector<std::span<const Piece>>& rows, Batch& out) const;
  uint64_t fingerprint() const;

  const TokenCorpus& corpus_;
  LoaderOptions options_;
  std::vector<int64_t> train_docs_, heldout_docs_;
  std::vector<std::vector<int64_t>> train_by_source_;
  std::vector<double> probabilities_, cumulative_;
  int64_t train_tokens_ = 0, heldout_tokens_ = 0;
  RowPlan heldout_plan_;
  LoaderCursor cursor_;
  std::deque<Epoch> epochs_;  // the cursor's epoch first, then any built ahead of it
};

}  // namespace primer::data
