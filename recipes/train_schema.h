// The schema of `primer train run.yaml`: Transformer pretraining / SFT runs. Keys are the flat keys of the
// reference Priming implementation (hybrid-model-factory, a LlamaFactory fork) with the same meanings where
// one exists, so its recipes carry over; the few keys primer adds use Hugging Face Trainer names.
#pragma once
#include <string>

#include "core/config/config.h"

namespace primer::recipes {

const config::Schema& train_schema();

// docs/recipes.md: an introduction to recipe files followed by the schema's table.
std::string train_recipe_reference();

}  // namespace primer::recipes
