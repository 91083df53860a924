// The schema of `primer prime-init stage0.yaml` (Priming Stage 0): the reference's keys (base model, hybrid
// pattern, output directory, dtype, the gka / gdn / mamba2 / swa option blocks) plus primer's own for deriving
// the pattern from a hybrid ratio (uniform, or selective from importance scores) and for the gate initialisation.
#pragma once
#include <string>

#include "layers/model_config.h"
#include "core/config/config.h"

namespace primer::recipes {

const config::Schema& prime_init_schema();

// docs/stage0.md: how Stage 0 builds a hybrid, then the schema's table.
std::string prime_init_reference();

// The mixer option blocks of a loaded Stage 0 config (gka.*, gdn.*, mamba2.*, swa.*) applied to `c`.
void apply_mixer_options(const config::Config& cfg, ModelConfig& c);

}  // namespace primer::recipes
