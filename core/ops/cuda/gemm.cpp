// cuBLASLt is a host API: this file is plain C++ compiled only in CUDA builds.
#ifdef PRIMER_WITH_CUDA
#include "core/ops/cuda/gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include "core/check.h"
#include "core/cuda_runtime.h"
#include "core/storage.h"

namespace primer::ops::cuda_ops {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;
constexpr int kMaxAlgorithms = 32;

struct DeviceContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

// Created once per device and kept for the life of the process (destroying at exit races CUDA's own teardown).
DeviceContext& device_context() {
  static std::mutex mu;
  static std::map<int, DeviceContext> contexts;
  const int dev = cuda::current_device();
  std::lock_guard<std::mutex> lock(mu);
  DeviceContext& ctx = contexts[dev];
  if (!ctx.handle) {
    PRIMER_CUBLAS_CHECK(cublasLtCreate(&ctx.handle));
    PRIMER_CUDA_CHECK(cudaMalloc(&ctx.workspace, kWorkspaceBytes));
  }
  return ctx;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::BF16: return CUDA_R_16BF;
    case DType::F32: return CUDA_R_32F;
    default: PRIMER_FAIL("gemm: CUDA path takes bf16 or f32, got {}", dtype_name(t));
  }
}

// Largest power of two (up to 16 bytes) dividing the address: algorithms that need more alignment are excluded.
int64_t alignment_of(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  int64_t a = 16;
  while (a > 1 && addr % uintptr_t(a) != 0) a /= 2;
  return a;
}

// Descriptors and the heuristic's ranked algorithms for one argument layout. Never destroyed (see device_context).
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // in cuBLAS's column-major terms (see make_plan)
  std::vector<cublasLtMatmulHeuristicResult_t> algorithms;
  size_t chosen = 0;  // what gemm() runs: the heuristic's first, or the fastest once tuned
  bool tuned = false;
};

std::atomic<bool> autotune_enabled{false};

using PlanKey = std::array<int64_t, 19>;

PlanKey key_of(const GemmArgs& g) {
  return {cuda::current_device(),
          g.trans_a,
          g.trans_b,
          g.m,
          g.n,
          g.k,
          g.batch,
          int64_t(g.a_type),
          int64_t(g.b_type),
          int64_t(g.c_type),
          g.lda,
          g.ldb,
          g.ldc,
          g.stride_a,
          g.stride_b,
          g.stride_c,
          alignment_of(g.a),
          alignment_of(g.b),
          alignment_of(g.c)};
}

cublasLtMatrixLayout_t make_layout(DType t, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  PRIMER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, cuda_type(t), uint64_t(rows), uint64_t(cols), ld));
  if (batch > 1) {
    const int32_t count = int32_t(batch);
    PRIMER_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    PRIMER_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return l;
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a row-major [r, c] buffer read column-major
// is its transpose: so cuBLAS's "A" is our B, its "B" is our A, with the same transpose flags, and m, n swapped.
Plan make_plan(const DeviceContext& ctx, const GemmArgs& g) {
  Plan p;
  PRIMER_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  PRIMER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  PRIMER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  p.a = g.trans_b ? make_layout(g.b_type, g.k, g.n, g.ldb, g.batch, g.stride_b)
                  : make_layout(g.b_type, g.n, g.k, g.ldb, g.batch, g.stride_b);
  p.b = g.trans_a ? make_layout(g.a_type, g.m, g.k, g.lda, g.batch, g.stride_a)
                  : make_layout(g.a_type, g.k, g.m, g.lda, g.batch, g.stride_a);
  p.c = make_layout(g.c_type, g.n, g.m, g.ldc, g.batch, g.stride_c);

  cublasLtMatmulPreference_t pref = nullptr;
  PRIMER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  PRIMER_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t align_a = uint32_t(alignment_of(g.b)), align_b = uint32_t(alignment_of(g.a)),
                 align_c = uint32_t(alignment_of(g.c));
  PRIMER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                           sizeof(align_a)));
  PRIMER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                           sizeof(align_b)));
  PRIMER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                           sizeof(align_c)));
  PRIMER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                           sizeof(align_c)));
  p.algorithms.resize(kMaxAlgorithms);
  int found = 0;
  PRIMER_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx.handle, p.op, p.a, p.b, p.c, p.c, pref, kMaxAlgorithms,
                                                     p.algorithms.data(), &found));
  PRIMER_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  PRIMER_CHECK(found > 0, "gemm: cuBLASLt has no algorithm for m={} n={} k={} batch={} A {} B {} C {}", g.m, g.n, g.k,
               g.batch, dtype_name(g.a_type), dtype_name(g.b_type), dtype_name(g.c_type));
  p.algorithms.resize(size_t(found));
  return p;
}

cublasStatus_t run(const DeviceContext& ctx, const Plan& p, const GemmArgs& g, const cublasLtMatmulAlgo_t& algo) {
  const float alpha = float(g.alpha), beta = float(g.beta);
  const void* c_in = g.c_in ? g.c_in : g.c;
  return cublasLtMatmul(ctx.handle, p.op, &alpha, g.b, p.a, g.a, p.b, &beta, c_in, p.c, g.c, p.c, &algo, ctx.workspace,
                        kWorkspaceBytes, cuda::stream());
}

// Times every candidate on a scratch copy of C's layout (so beta = 1 never accumulates twice into the caller's C)
// and keeps the fastest. Candidates are timed in interleaved rounds and each keeps its best round, so a clock or
// cache swing during one candidate's turn cannot crown it; the heuristic's first choice is left only for a
// clear (> 1%) win. Waits for the GPU: only runs while autotuning is enabled, once per layout.
void tune(const DeviceContext& ctx, Plan& p, GemmArgs g) {
  const int64_t c_elems = (g.batch - 1) * g.stride_c + (g.m - 1) * g.ldc + g.n;
  const auto scratch = allocate(Device::cuda(cuda::current_device()), size_t(c_elems) * dtype_size(g.c_type));
  g.c = scratch->data();
  g.c_in = nullptr;
  cudaEvent_t start, stop;
  PRIMER_CUDA_CHECK(cudaEventCreate(&start));
  PRIMER_CUDA_CHECK(cudaEventCreate(&stop));
  constexpr int kRounds = 3, kRunsPerRound = 3;
  constexpr float kUnusable = 1e30f;
  std::vector<float> best(p.algorithms.size(), kUnusable);
  for (size_t i = 0; i < p.algorithms.size(); ++i)  // warm-up, and drop what fails
    if (run(ctx, p, g, p.algorithms[i].algo) != CUBLAS_STATUS_SUCCESS) best[i] = -1;
  for (int round = 0; round < kRounds; ++round) {
    for (size_t i = 0; i < p.algorithms.size(); ++i) {
      if (best[i] < 0) continue;
      PRIMER_CUDA_CHECK(cudaEventRecord(start, cuda::stream()));
      for (int r = 0; r < kRunsPerRound; ++r) PRIMER_CUBLAS_CHECK(run(ctx, p, g, p.algorithms[i].algo));
      PRIMER_CUDA_CHECK(cudaEventRecord(stop, cuda::stream()));
      PRIMER_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      PRIMER_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      best[i] = std::min(best[i], ms);
    }
  }
  PRIMER_CUDA_CHECK(cudaEventDestroy(start));
  PRIMER_CUDA_CHECK(cudaEventDestroy(stop));
  size_t chosen = 0;
  for (size_t i = 1; i < best.size(); ++i)
    if (best[i] >= 0 && (best[chosen] < 0 || best[i] < best[chosen])) chosen = i;
  if (best[0] >= 0 && best[chosen] > 0.99f * best[0]) chosen = 0;
  p.chosen = chosen;
  p.tuned = true;
}

const Plan& plan_for(const DeviceContext& ctx, const GemmArgs& g) {
  static std::mutex mu;
  static std::map<PlanKey, Plan> plans;
  const PlanKey key = key_of(g);
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_plan(ctx, g)).first;
  if (autotune_enabled && !it->second.tuned) tune(ctx, it->second, g);
  return it->second;
}

}  // namespace

void gemm(const GemmArgs& g) {
  const DeviceContext& ctx = device_context();
  const Plan& p = plan_for(ctx, g);
  PRIMER_CUBLAS_CHECK(run(ctx, p, g, p.algorithms[p.chosen].algo));
}

void set_autotune(bool enabled) { autotune_enabled = enabled; }

int gemm_algorithm_count(const GemmArgs& g) { return int(plan_for(device_context(), g).algorithms.size()); }

bool gemm_with_algorithm(const GemmArgs& g, int index) {
  const DeviceContext& ctx = device_context();
  const Plan& p = plan_for(ctx, g);
  if (index < 0 || index >= int(p.algorithms.size())) return false;
  return run(ctx, p, g, p.algorithms[size_t(index)].algo) == CUBLAS_STATUS_SUCCESS;
}

}  // namespace primer::ops::cuda_ops
#endif  // PRIMER_WITH_CUDA
