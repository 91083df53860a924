// bench_layer_kernels: one mixer layer's forward + backward on CUDA in bf16, bracketed by cudaProfilerStart/Stop so
// that Nsight Compute sees exactly one training pass of the layer — the per-kernel breakdown that says where a layer's
// time beyond its projections and core goes (issue 16, item 1). tools/bench/layer-kernels.sh runs it under
// `ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --page raw` and tabulates the kernels. Alone it
// prints the layer's median time over repetitions (CUDA events) next to the one profiled pass's wall time, so the
// host's share shows as well; --timeline adds one pass under CUPTI (when the GPU sat idle, and around what) and the
// host's enqueue time of the forward and the backward.
#include <cstdio>
#include <functional>

#include "core/parameters.h"
#include "layers/hybrid_config.h"
#include "layers/mixer_factory.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"
#include "tools/bench/common/gpu_timeline.h"
#include "tools/bench/common/layer_bench.h"

using namespace primer;

int main(int argc, char** argv) {
  bench::LayerShape shape;
  std::string token = "GDN";
  bool timeline = false;
  CLI::App app{"bench_layer_kernels: one mixer layer's forward + backward, profiled once (Nsight Compute)"};
  bench::add_layer_shape(app, shape);
  app.add_option("--mixer", token, "the layer's hybrid_override_pattern token (GDN, M2, GKA, KZLA, GDN2, ...)")
      ->capture_default_str();
  app.add_flag("--timeline", timeline, "one more pass under CUPTI (GPU idle gaps) and the host's enqueue times");
  bench::parse_or_exit(app, argc, argv);

  ModelConfig c = shape.layer_config();
  c.layer_types = {parse_mixer_token(token, "--mixer")};
  c.validate("bench_layer_kernels");
  ParameterRegistry params;
  const std::unique_ptr<layers::SequenceMixer> mixer = layers::make_mixer(c, 0, params);
  params.materialize(Device::cuda(), DType::BF16, 7);
  const std::function<void()> pass = bench::mixer_train_pass(*mixer, shape);
  const double median = bench::median_ms(pass);  // also the warm-up of the profiled pass

  const double once = bench::profiled_once_ms(pass);
  std::printf("| %s layer, fwd + bwd | %s | median %.3f ms | profiled pass %.3f ms wall |\n", token.c_str(),
              shape.layer().c_str(), median, once);
  if (timeline) {
    bench::print_timeline(bench::gpu_timeline(pass));
    const std::vector<bench::PhaseTime> t = bench::phase_times(bench::mixer_train_phases(*mixer, shape));
    const char* names[] = {"forward", "backward"};
    for (size_t i = 0; i < t.size(); ++i)
      std::printf("%s: %.3f ms GPU, %.3f ms host to enqueue, of which %.3f ms in %.1f waits on the stream\n", names[i],
                  t[i].gpu_ms, t[i].host_ms, t[i].sync_wait_ms, t[i].syncs);
  }
  return 0;
}
