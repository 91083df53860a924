// What a resume may change: a recipe that no longer describes the run a checkpoint continues (other data, sequence
// length, model, stage or trainable set) is refused with the old and new values, unless the recipe's
// resume_allow_changes names the key; every other change (learning rate, max_steps, logging, parallel layout) is
// reported.
#pragma once
#include <string>

#include "core/config/config.h"

namespace primer::recipes {

// Compares `now` with the resolved recipe a checkpoint saved (`saved_yaml`); `checkpoint` names it in messages.
// A saved recipe this schema cannot read (an older primer's keys) is reported and not compared.
void check_resume_continuity(const config::Config& now, const std::string& saved_yaml, const std::string& checkpoint);

}  // namespace primer::recipes
