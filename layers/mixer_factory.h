// Builds layer i's sequence mixer from the model config's hybrid pattern, registering its parameters under
// model.layers.<i>.<module> (self_attn, swa, mamba, gdn, gka: the reference implementation's names).
#pragma once
#include <memory>

#include "core/parameters.h"
#include "layers/mixer.h"
#include "layers/model_config.h"

namespace primer::layers {

std::unique_ptr<SequenceMixer> make_mixer(const ModelConfig& config, int64_t layer, ParameterRegistry& params);

}  // namespace primer::layers
