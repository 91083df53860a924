// The CUDA runtime as primer uses it: device discovery, one compute stream per device, copies,
// and the checks that turn every failing CUDA/cuBLAS call into a primer::Error with file:line.
// Everything here also links in CPU-only builds (PRIMER_WITH_CUDA undefined): available() is false
// and the rest fails with a clear error.
#pragma once
#include <cstddef>
#include <functional>

#ifdef PRIMER_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace primer::cuda {

bool compiled();   // built with CUDA
bool available();  // built with CUDA and at least one usable device
int device_count();
void set_device(int index);
int current_device();
void synchronize();  // waits for the current device's compute stream
// The host's waits on the compute stream so far (synchronize(), which host-side copies call): how many and how long,
// for benchmarks that look for the host stalling the GPU in the middle of a step.
struct SyncStats {
  long long count = 0;
  double wait_ms = 0;
};
SyncStats sync_stats();
// Dense bf16 peak of the current GPU for MFU (H100/H200 SXM 989 TFLOP/s, A100 312); 0 when unknown or no GPU.
double peak_bf16_flops();

enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice };
// Copies on the compute stream; device-to-host waits for completion so the host can read the result.
void copy(void* dst, const void* src, size_t bytes, CopyKind kind);
void memset_zero(void* dst, size_t bytes);

#ifdef PRIMER_WITH_CUDA
cudaStream_t stream();  // the current device's compute stream (inside run_beside's `beside`: its second stream)
// Runs `main` on the compute stream and `beside` on a second stream of the current device, at the same time: both
// start after everything issued before, and everything issued after waits for both. For two kernels that neither read
// what the other writes and that each leave most of the GPU idle (sequential passes over a sequence's chunks, a CTA
// per few columns). The second stream has the higher priority, so that where both kernels' blocks wait for SMs,
// `beside`'s are placed first: give it the kernel of few long-lived blocks. `beside` only launches work on memory
// that outlives the call; calls do not nest. With PRIMER_ONE_STREAM=1 in the environment both run on the compute
// stream, `beside` first (to measure what the second stream gains, or to rule it out).
void run_beside(const std::function<void()>& main, const std::function<void()>& beside);
// Whether kernels start with Programmatic Dependent Launch (core/ops/cuda/dependent_launch.cuh): yes unless
// PRIMER_NO_DEPENDENT_LAUNCH=1 is in the environment.
bool dependent_launch_enabled();
[[noreturn]] void fail(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void fail_cublas(int status, const char* expr, const char* file, int line);
#endif

}  // namespace primer::cuda

#ifdef PRIMER_WITH_CUDA
#define PRIMER_CUDA_CHECK(expr)                                                                   \
  do {                                                                                            \
    cudaError_t primer_err_ = (expr);                                                             \
    if (primer_err_ != cudaSuccess) ::primer::cuda::fail(primer_err_, #expr, __FILE__, __LINE__); \
  } while (0)
#define PRIMER_CUBLAS_CHECK(expr)                                                            \
  do {                                                                                       \
    int primer_st_ = static_cast<int>(expr);                                                 \
    if (primer_st_ != 0) ::primer::cuda::fail_cublas(primer_st_, #expr, __FILE__, __LINE__); \
  } while (0)
#endif
