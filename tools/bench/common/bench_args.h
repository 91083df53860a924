// The command line of the benchmarks (CLI11): the shape as options, with the shape their figures in docs/perf.md were
// measured at as the defaults, and --help.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "layers/model_config.h"

namespace primer::bench {

// An SSM core's shape (B, T, H heads of K = V = head_dim) and the layer around it (hidden d, Hq = H query heads, Hk
// key/value heads): flash-linear-attention's benchmark shape and the issues' layer by default.
struct LayerShape {
  int64_t batch = 4, seq = 4096, heads = 16, head_dim = 128, hidden = 2048, kv_heads = 8;
  std::string core() const;   // "B=4 T=4096 H=16 K=V=128"
  std::string layer() const;  // "B=4 T=4096 d=2048 Hq=16 Hk=8 D=128"
  // A one-layer Qwen3-style config of this layer (vocabulary 1024; the mixer's blocks at their defaults).
  ModelConfig layer_config() const;
};
// --batch, --seq, --heads, --head-dim, --hidden, --kv-heads.
void add_layer_shape(CLI::App& app, LayerShape& shape);

// Parses the command line; --help prints the options and exits 0, a bad option prints why and exits 2.
void parse_or_exit(CLI::App& app, int argc, char** argv);

}  // namespace primer::bench
