#include "layers/mixer.h"

#include "core/check.h"

namespace primer::layers {

bool prepare_state(const MixerState* state_in, MixerState* state_out, size_t convs, size_t recurrent,
                   const std::string& who) {
  const bool carried = state_in && !state_in->empty();
  if (carried)
    PRIMER_CHECK(state_in->conv.size() == convs && state_in->recurrent.size() == recurrent,
                 "{}: state_in holds {} conv and {} recurrent entries, expected {} and {}", who, state_in->conv.size(),
                 state_in->recurrent.size(), convs, recurrent);
  if (state_out) {
    state_out->conv.assign(convs, nullptr);
    state_out->recurrent.assign(recurrent, nullptr);
  }
  return carried;
}

}  // namespace primer::layers
