// Splitting a tensor into consecutive pieces along one dimension and joining pieces back, on the tape: what a
// fused projection needs (Mamba-2's in_proj yields z | x | B | C | dt in one GEMM) and what reassembles channels
// that were transformed separately before a shared convolution.
#pragma once
#include <vector>

#include "core/autograd/variable.h"

namespace primer::ag {

// x cut along `dim` into pieces of the given sizes (which must sum to x's size there); each piece is a dense copy.
// One node: its backward writes every piece's gradient (zeros for a piece that received none) into one dx.
std::vector<Var> split(const Var& x, int dim, const std::vector<int64_t>& sizes);

// The pieces joined along `dim` (every other size equal; one dtype and device).
Var concat(const std::vector<Var>& pieces, int dim);

}  // namespace primer::ag
