// What a chunked delta-rule state pass writes (GDN's and GDN-2's): the output alone (a forward), the output and the
// scratch its backward reads (a forward that keeps it), or no output and that scratch alone (the backward's
// recompute). Each mode is its own kernel instance, so the launchers dispatch on it once.
#pragma once
#include <type_traits>

namespace primer::ops::cuda_ops {

// run(std::bool_constant<kOutput>, std::bool_constant<kStore>) for the mode: no output means the stored scratch alone.
template <class Run> void with_pass_mode(bool output, bool store, Run&& run) {
  if (!output)
    run(std::false_type{}, std::true_type{});
  else if (store)
    run(std::true_type{}, std::true_type{});
  else
    run(std::true_type{}, std::false_type{});
}

}  // namespace primer::ops::cuda_ops
