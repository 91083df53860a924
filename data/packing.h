// Packing: how documents become fixed-length training rows. Pure functions of a document order and lengths,
// so the loader's plan for an epoch is reproducible from (seed, epoch) alone.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace primer::data {

enum class PackingMethod {
  Concat,   // concatenate all documents (each already ends in EOS) and cut into rows; the remainder is dropped
  Greedy,   // whole documents; each row repeatedly takes the longest remaining document that still fits
  BestFit,  // whole documents, longest first, each into the open row it fills most tightly (best-fit decreasing)
  Random,   // whole documents in the given (shuffled) order, appended while they fit (next fit)
  None,     // one document per row, padded
};
PackingMethod parse_packing_method(const std::string& name);  // concat, greedy, best_fit, random, none
const char* packing_method_name(PackingMethod method);

// A slice of one document placed in a row.
struct Piece {
  int64_t doc = 0;    // the caller's document id
  int64_t begin = 0;  // first token taken
  int64_t length = 0;
};

// Rows as lists of pieces (CSR): row r holds pieces[row_start[r], row_start[r + 1]) in order.
struct RowPlan {
  std::vector<int64_t> row_start{0};
  std::vector<Piece> pieces;
  int64_t rows() const { return int64_t(row_start.size()) - 1; }
  std::span<const Piece> row(int64_t r) const {
    return std::span<const Piece>(pieces).subspan(size_t(row_start[size_t(r)]),
                                                  size_t(row_start[size_t(r + 1)] - row_start[size_t(r)]));
  }
};

// Packs documents docs[i] of lengths[i] (> 0) into rows of row_len tokens. Concat splits documents across
// rows; the other methods keep each document whole in one row, so a document longer than row_len is cut to
// its first row_len tokens (drop such documents beforehand to avoid that). Rows come out in creation order.
RowPlan pack(PackingMethod method, std::span<const int64_t> docs, std::span<const int64_t> lengths, int64_t row_len);

}  // namespace primer::data
