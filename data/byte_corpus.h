// A text file, or every regular file of a directory in name order, read as bytes (token id = byte value, vocabulary
// 256): the corpus of the built-in default run and of `dataset:` recipes. The last `heldout_fraction` is held out.
// Training windows are drawn from the counter RNG keyed by (seed, step), so a run is reproducible and resumable.
// Given a tokenizer, each file is read as its token ids instead, ended by the tokenizer's EOS (as `primer tokenize`
// writes a text document): `primer eval` of text for a model with a tokenizer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace primer::data {

class ByteCorpus {
 public:
  // path: a file or a directory; tokenizer: null for bytes.
  ByteCorpus(const std::string& path, double heldout_fraction, const Tokenizer* tokenizer = nullptr);
  // Fills ids/targets (size rows*T, row-major [rows, T]) with training windows first_row ... first_row + rows − 1 of
  // the seed's stream (window i starts at a position drawn by (seed, i)); targets are ids shifted by one.
  void train_rows(uint64_t seed, int64_t first_row, int64_t rows, int64_t seq, std::vector<int32_t>& ids,
                  std::vector<int32_t>& targets) const;
  // The held-out part cut into consecutive [B, T] batches; returns how many batches exist.
  int64_t heldout_batches(int64_t batch, int64_t seq) const;
  void heldout_batch(int64_t index, int64_t batch, int64_t seq, std::vector<int32_t>& ids,
                     std::vector<int32_t>& targets) const;
  // Tokens (bytes, or the tokenizer's ids) before the held-out part, and in it.
  int64_t train_bytes() const { return split_; }
  int64_t heldout_bytes() const { return size() - split_; }

 private:
  void window(int64_t start, int64_t seq, int32_t* ids, int32_t* targets) const;
  int64_t size() const { return int64_t(tokens_.empty() ? bytes_.size() : tokens_.size()); }
  int32_t at(int64_t i) const { return tokens_.empty() ? bytes_[size_t(i)] : tokens_[size_t(i)]; }
  std::string path_;
  std::vector<uint8_t> bytes_;   // without a tokenizer
  std::vector<int32_t> tokens_;  // with one
  int64_t split_ = 0;
};

}  // namespace primer::data
