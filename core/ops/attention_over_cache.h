// Attention of one decode step's query over a long key/value cache (flash-decoding: T. Dao, D. Haziza, F. Massa,
// G. Sizov, "Flash-Decoding for long-context inference", 2023). ops::attention spreads its work over batch × heads ×
// query tiles, so one query row over 32K keys occupies as many CTAs as it has heads (16 of an H100's 132 SMs) and
// each streams the whole cache alone. Here the keys are cut into chunks attended as one batch (chunks × heads CTAs)
// and the partial results are merged by their log-sum-exps (ops::lse_merge), in f32.
#pragma once
#include <cstdint>

#include "core/ops/attention.h"

namespace primer::ops {

// q [1, 1, Hq, Dh]; k, v [1, Tk, Hkv, Dh], every key visible to the query (a full-attention cache after the step's own
// key is appended): equals ops::attention(q, k, v, {scale, causal}). The keys go in chunks of `chunk_keys` (the
// last part may be shorter). Returns out [1, 1, Hq, Dh] in q's dtype. Any device ops::attention supports.
Tensor attention_over_cache(const Tensor& q, const Tensor& k, const Tensor& v, double scale, int64_t chunk_keys);

}  // namespace primer::ops
