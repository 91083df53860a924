// The one list of mixers (see layers/mixer_spec.h): a new mixer adds its spec here.
#include "layers/attention_mixer.h"
#include "layers/gdn2_mixer.h"
#include "layers/bmf_mixer.h"
#include "layers/gdn_mixer.h"
#include "layers/gka_mixer.h"
#include "layers/kla_mixer.h"
#include "layers/mamba2_mixer.h"
#include "layers/mixer_spec.h"

namespace primer {

const std::vector<const MixerSpec*>& mixer_specs() {
  static const std::vector<const MixerSpec*> specs = {
      &layers::attention_spec(),
      &layers::gka_spec(),
      &layers::gdn_spec(),
      &layers::mamba2_spec(),
      &layers::sliding_window_spec(),
      &layers::kzla_spec(),
      &layers::kla_spec(),
      &layers::gdn2_spec(),
      &layers::bmf_spec(),
  };
  return specs;
}

}  // namespace primer
