#include <algorithm>
#include <type_traits>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/tile/device_types.cuh"
#include "core/ops/cuda/elementwise.h"
#include "core/ops/cuda/tile/vector_io.cuh"

namespace primer::ops::cuda_ops {
namespace {

constexpr int kThreads = 256;

template <Binary OP> struct BinaryFn {
  __device__ float operator()(float a, float b) const { return math::binary(OP, a, b); }
};
template <Unary OP> struct UnaryFn {
  __device__ float operator()(float x) const { return math::unary(OP, x); }
};
template <Unary OP> struct UnaryGradFn {
  __device__ float operator()(float x, float dy) const { return dy * math::unary_derivative(OP, x); }
};
struct ScaleFn {
  float s;
  __device__ float operator()(float x) const { return x * s; }
};
struct AxpyFn {  // d + alpha * s
  float alpha;
  __device__ float operator()(float d, float s) const { return d + alpha * s; }
};

// Calls f(std::integral_constant<Enum, op>{}) so that the op becomes a template argument of the kernel.
template <class F> void with_binary(Binary op, F&& f) {
  switch (op) {
    case Binary::Add: return f(std::integral_constant<Binary, Binary::Add>{});
    case Binary::Sub: return f(std::integral_constant<Binary, Binary::Sub>{});
    case Binary::Mul: return f(std::integral_constant<Binary, Binary::Mul>{});
  }
}
template <class F> void with_unary(Unary op, F&& f) {
  switch (op) {
    case Unary::Silu: return f(std::integral_constant<Unary, Unary::Silu>{});
    case Unary::Sigmoid: return f(std::integral_constant<Unary, Unary::Sigmoid>{});
    case Unary::Softplus: return f(std::integral_constant<Unary, Unary::Softplus>{});
    case Unary::Exp: return f(std::integral_constant<Unary, Unary::Exp>{});
    case Unary::Square: return f(std::integral_constant<Unary, Unary::Square>{});
  }
}

// out[i] = f(in[i]...) over n dense elements, V elements (one vector access per array) per thread step.
template <int V, class F, class Out, class... In>
__global__ void map_dense_kernel(int64_t n, F f, Out* out, const In*... in) {
  cuda::await_prior_grid();
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t packs = n / V;
  for (int64_t p = first; p < packs; p += stride) {
    Pack<Out, V> o;
    [&](const auto&... pin) {
#pragma unroll
      for (int k = 0; k < V; ++k) o.v[k] = from_float<Out>(f(to_float(pin.v[k])...));
    }(load_pack<V>(in, p)...);
    store_pack<V>(out, p, o);
  }
  for (int64_t i = packs * V + first; i < n; i += stride) out[i] = from_float<Out>(f(to_float(in[i])...));
}

template <class F, class Out, class... In> void map_dense(int64_t n, F f, Out* out, const In*... in) {
  constexpr int V = kPack<Out>;
  if (pack_aligned<V>(out) && (pack_aligned<V>(in) && ...)) {
    cuda::launch_dependent(map_dense_kernel<V, F, Out, In...>, grid_for((n + V - 1) / V, kThreads), kThreads, 0, n, f,
                           out, in...);
  } else {
    cuda::launch_dependent(map_dense_kernel<1, F, Out, In...>, grid_for(n, kThreads), kThreads, 0, n, f, out, in...);
  }
}

// Output shape and both inputs' strides over it (stride 0 on broadcast dims), by value in kernel parameters.
struct BroadcastLayout {
  int ndim;
  int64_t shape[kMaxDims];
  int64_t a_strides[kMaxDims];
  int64_t b_strides[kMaxDims];
};

constexpr int kRunPacksPerThread = 4;  // work unit: blockDim.x * V * 4 consecutive outputs of one row

// Where row `row` of the output (an index over every dim but the last) starts in a and b.
__device__ __forceinline__ void row_offsets(const BroadcastLayout& l, int64_t row, int64_t& oa, int64_t& ob) {
  oa = ob = 0;
  for (int d = l.ndim - 2; d >= 0; --d) {
    const int64_t idx = row % l.shape[d];
    row /= l.shape[d];
    oa += idx * l.a_strides[d];
    ob += idx * l.b_strides[d];
  }
}

template <int V, class T, class F>
__device__ __forceinline__ void broadcast_pack(T* o, const T* a, int64_t sa, const T* b, int64_t sb, F f) {
  const Pack<T, V> pa = load_run<V>(a, sa), pb = load_run<V>(b, sb);
  Pack<T, V> po;
#pragma unroll
  for (int k = 0; k < V; ++k) po.v[k] = from_float<T>(f(to_float(pa.v[k]), to_float(pb.v[k])));
  store_pack<V>(o, 0, po);
}

// The output as rows of its last dim: each work unit is a run of one row, whose input offsets are computed once
// (index arithmetic per run, not per element); along the run the inputs step by their last-dim strides (1 or 0 in
// the vector case, which then loads packs or repeats one value).
template <int V, class T, class F>
__global__ void broadcast_kernel(T* out, const T* a, const T* b, BroadcastLayout l, int64_t rows, F f) {
  cuda::await_prior_grid();
  const int last = l.ndim - 1;
  const int64_t inner = l.shape[last], sa = l.a_strides[last], sb = l.b_strides[last];
  const int64_t run = int64_t(blockDim.x) * V * kRunPacksPerThread;
  const int64_t runs_per_row = (inner + run - 1) / run;
  for (int64_t unit = blockIdx.x; unit < rows * runs_per_row; unit += gridDim.x) {
    const int64_t row = unit / runs_per_row, begin = (unit % runs_per_row) * run;
    const int64_t end = begin + run < inner ? begin + run : inner;
    int64_t oa, ob;
    row_offsets(l, row, oa, ob);
    for (int64_t c = begin + int64_t(threadIdx.x) * V; c < end; c += int64_t(blockDim.x) * V)
      broadcast_pack<V>(out + row * inner + c, a + oa + c * sa, sa, b + ob + c * sb, sb, f);
  }
}

// Rows narrower than a block's pass (head-sized last dims, e.g. [B, T, Hk, 1, D] · [G, 1] for GQA): one pack per
// thread step with its row's offsets, so that a block spans many rows instead of idling on one.
template <int V, class T, class F>
__global__ void broadcast_narrow_kernel(T* out, const T* a, const T* b, BroadcastLayout l, int64_t packs, F f) {
  cuda::await_prior_grid();
  const int last = l.ndim - 1;
  const int64_t inner = l.shape[last], sa = l.a_strides[last], sb = l.b_strides[last], packs_per_row = inner / V;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < packs; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = p / packs_per_row, c = (p - row * packs_per_row) * V;
    int64_t oa, ob;
    row_offsets(l, row, oa, ob);
    broadcast_pack<V>(out + row * inner + c, a + oa + c * sa, sa, b + ob + c * sb, sb, f);
  }
}

// Packs of V along the last dim need it to be a multiple of V and every output row start pack-aligned; an input
// either steps by 1 along it (pack loads: its row starts aligned too) or by 0 (one value repeated, no alignment).
template <int V, class T> bool broadcast_packs_fit(const StridedDesc& out, const StridedDesc& in, int64_t inner) {
  const int last = out.ndim - 1;
  if (inner % V != 0 || !pack_aligned<V>(static_cast<const T*>(out.data))) return false;
  if (in.strides[last] == 0) return true;
  if (in.strides[last] != 1 || !pack_aligned<V>(static_cast<const T*>(in.data))) return false;
  for (int d = 0; d < last; ++d)
    if (in.strides[d] % V != 0) return false;
  return true;
}

template <int V, class T, class F>
void launch_broadcast(T* out, const T* a, const T* b, const BroadcastLayout& l, int64_t rows, int64_t inner, F f) {
  if (inner / V < kThreads) {
    const int64_t packs = rows * (inner / V);
    cuda::launch_dependent(broadcast_narrow_kernel<V, T, F>, grid_for(packs, kThreads), kThreads, 0, out, a, b, l,
                           packs, f);
  } else {
    const int64_t run = int64_t(kThreads) * V * kRunPacksPerThread;
    cuda::launch_dependent(broadcast_kernel<V, T, F>, grid_for(rows * ((inner + run - 1) / run), 1), kThreads, 0, out,
                           a, b, l, rows, f);
  }
}

template <class T, class F> void broadcast(const StridedDesc& out, const StridedDesc& a, const StridedDesc& b, F f) {
  BroadcastLayout l{};
  l.ndim = out.ndim;
  int64_t n = 1;
  for (int d = 0; d < out.ndim; ++d) {
    n *= out.shape[d];
    l.shape[d] = out.shape[d];
    l.a_strides[d] = a.strides[d];
    l.b_strides[d] = b.strides[d];
  }
  const int64_t inner = out.shape[out.ndim - 1], rows = n / inner;
  T* po = static_cast<T*>(out.data);
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  constexpr int V = kPack<T>;
  if (broadcast_packs_fit<V, T>(out, a, inner) && broadcast_packs_fit<V, T>(out, b, inner))
    launch_broadcast<V>(po, pa, pb, l, rows, inner, f);
  else
    launch_broadcast<1>(po, pa, pb, l, rows, inner, f);
}

}  // namespace

void binary(Binary op, const StridedDesc& out, const StridedDesc& a, const StridedDesc& b) {
  int64_t n = 1;
  for (int d = 0; d < out.ndim; ++d) n *= out.shape[d];
  visit_float(out.dtype, [&](auto t) {
    using T = decltype(t);
    with_binary(op, [&](auto op_c) {
      const BinaryFn<decltype(op_c)::value> f;
      if (a.contiguous && b.contiguous) {
        map_dense(n, f, static_cast<T*>(out.data), static_cast<const T*>(a.data), static_cast<const T*>(b.data));
      } else {
        broadcast<T>(out, a, b, f);
      }
    });
  });
}

void scale(void* out, const void* x, int64_t n, DType dtype, double s) {
  visit_float(dtype, [&](auto t) {
    using T = decltype(t);
    map_dense(n, ScaleFn{float(s)}, static_cast<T*>(out), static_cast<const T*>(x));
  });
}

void add_dense(void* out, DType out_dtype, const void* a, const void* b, DType in_dtype, int64_t n) {
  visit_float(out_dtype, [&](auto o) {
    using O = decltype(o);
    visit_float(in_dtype, [&](auto i) {
      using I = decltype(i);
      map_dense(n, BinaryFn<Binary::Add>{}, static_cast<O*>(out), static_cast<const I*>(a), static_cast<const I*>(b));
    });
  });
}

void add_inplace(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n, double alpha) {
  visit_float(dst_dtype, [&](auto d) {
    using D = decltype(d);
    visit_float(src_dtype, [&](auto s) {
      using S = decltype(s);
      D* pd = static_cast<D*>(dst);
      map_dense(n, AxpyFn{float(alpha)}, pd, static_cast<const D*>(pd), static_cast<const S*>(src));
    });
  });
}

void unary(Unary op, void* y, const void* x, int64_t n, DType dtype) {
  visit_float(dtype, [&](auto t) {
    using T = decltype(t);
    with_unary(op, [&](auto op_c) {
      map_dense(n, UnaryFn<decltype(op_c)::value>{}, static_cast<T*>(y), static_cast<const T*>(x));
    });
  });
}

void unary_backward(Unary op, void* dx, const void* x, const void* dy, int64_t n, DType dtype) {
  visit_float(dtype, [&](auto t) {
    using T = decltype(t);
    with_unary(op, [&](auto op_c) {
      map_dense(n, UnaryGradFn<decltype(op_c)::value>{}, static_cast<T*>(dx), static_cast<const T*>(x),
                static_cast<const T*>(dy));
    });
  });
}

}  // namespace primer::ops::cuda_ops
