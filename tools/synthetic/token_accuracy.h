// The synthetic tasks' metric: token-level argmax accuracy of a decoder LM over the labelled positions of a set.
#pragma once
#include <cstdint>

#include "core/device.h"
#include "layers/decoder_lm.h"
#include "tools/synthetic/labelled_set.h"

namespace primer::synthetic {

// Fraction of labelled positions whose highest logit is the label (a tie with the label counts as correct), over
// the whole set in batches of `batch` sequences on `device`. Only the labelled positions' logits are formed.
double token_accuracy(layers::DecoderLM& model, ParameterRegistry& params, const LabelledSet& set, int64_t batch,
                      Device device);

}  // namespace primer::synthetic
