// The options of each SSM mixer as one table per config struct: key (the reference's name), the member it binds
// and a one-line meaning. config.json's gka_config / gdn_config / mamba2_config blocks and the Stage 0 recipe's
// gka / gdn / mamba2 sections are both read and written through these tables, so the two never drift apart.
#pragma once
#include <cstdint>
#include <variant>
#include <vector>

#include "layers/hybrid_config.h"

namespace primer {

template <class C>
struct ConfigField {
  const char* key;
  std::variant<bool C::*, int64_t C::*, double C::*> member;
  const char* doc;
};

const std::vector<ConfigField<GkaConfig>>& gka_fields();
const std::vector<ConfigField<GdnConfig>>& gdn_fields();
const std::vector<ConfigField<Mamba2Config>>& mamba2_fields();

}  // namespace primer
