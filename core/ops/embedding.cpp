#include "core/ops/embedding.h"

#include "core/ops/cpu/embedding.h"
#include "core/ops/cuda/embedding.h"
#include "core/ops/dispatch.h"

namespace primer::ops {

namespace {

void expect_ids(const Tensor& ids, const char* op, Device device) {
  expect(ids, op, "ids", device, {DType::I32, DType::I64});
  PRIMER_CHECK(ids.numel() < (int64_t(1) << 31), "{}: argument 'ids' is {}, expected fewer than 2^31 tokens", op,
               ids.describe());
}

// CPU ids are checked here, so the kernels can index without bounds checks.
void check_id_range(const Tensor& ids, int64_t vocab, const char* op) {
  const std::vector<int64_t> v = ids.to_vector<int64_t>();
  for (size_t n = 0; n < v.size(); ++n)
    PRIMER_CHECK(v[n] >= 0 && v[n] < vocab,
                 "{}: argument 'ids' ({}) holds {} at flat position {}, expected ids in [0, {})", op, ids.describe(),
                 v[n], n, vocab);
}

#ifdef PRIMER_WITH_CUDA
void embedding_backward_cuda(const Tensor& dy, const Tensor& ids, int64_t vocab, const Tensor& dweight_accum) {
  const size_t bytes = cuda_ops::embedding_backward_workspace_bytes(ids.numel(), vocab);
  const Tensor workspace = Tensor::empty({int64_t(bytes)}, DType::U8, dy.device());
  cuda_ops::embedding_backward(dy.data_ptr(), dy.dtype(), ids.data_ptr(), ids.dtype(), ids.numel(), vocab,
                               dweight_accum.size(1), dweight_accum.data<float>(), workspace.data_ptr(), bytes);
}
#endif

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  constexpr const char* op = "embedding";
  PRIMER_CHECK(weight.defined() && weight.dim() == 2, "{}: argument 'weight' is {}, expected a 2-d table [V, D]", op,
               weight.defined() ? weight.describe() : "undefined");
  const bool cpu = weight.is_cpu();
  expect(weight, op, "weight", weight.device(),
         cpu ? std::initializer_list<DType>{DType::F32, DType::F64}
             : std::initializer_list<DType>{DType::F32, DType::BF16});
  expect_ids(ids, op, weight.device());
  const int64_t vocab = weight.size(0), dim = weight.size(1);
  Shape out_shape = ids.shape();
  out_shape.push_back(dim);
  Tensor out = Tensor::empty(out_shape, weight.dtype(), weight.device());
  if (out.numel() == 0) return out;
  const Tensor w = weight.contiguous(), id = ids.contiguous();
  if (cpu) {
    check_id_range(id, vocab, op);
    dispatch_cpu_float(w.dtype(), op, [&](auto t) {
      using T = decltype(t);
      cpu::embedding<T>(w.data<T>(), id.data_ptr(), id.dtype(), id.numel(), dim, out.data<T>());
    });
  } else {
    PRIMER_ON_CUDA(cuda_ops::embedding(w.data_ptr(), w.dtype(), id.data_ptr(), id.dtype(), id.numel(), vocab, dim,
                                       out.data_ptr()));
  }
  return out;
}

void embedding_backward(const Tensor& dy, const Tensor& ids, const Tensor& dweight_accum) {
  constexpr const char* op = "embedding_backward";
  PRIMER_CHECK(dy.defined(), "{}: argument 'dy' is undefined", op);
  const bool cpu = dy.is_cpu();
  expect(dy, op, "dy", dy.device(),
         cpu ? std::initializer_list<DType>{DType::F32, DType::F64}
             : std::initializer_list<DType>{DType::F32, DType::BF16});
  expect_ids(ids, op, dy.device());
  expect(dweight_accum, op, "dweight_accum", dy.device(), {dy.dtype() == DType::F64 ? DType::F64 : DType::F32});
  PRIMER_CHECK(dweight_accum.dim() == 2 && dweight_accum.is_contiguous(),
               "{}: argument 'dweight_accum' is {}, expected a contiguous [V, D] accumulator", op,
               dweight_accum.describe());
  const int64_t vocab = dweight_accum.size(0), dim = dweight_accum.size(1);
  PRIMER_CHECK(vocab < (int64_t(1) << 31), "{}: argument 'dweight_accum' is {}, expected fewer than 2^31 rows", op,
               dweight_accum.describe());
  Shape dy_shape = ids.shape();
  dy_shape.push_back(dim);
  expect_shape(dy, op, "dy", dy_shape);
  if (dy.numel() == 0) return;
  const Tensor g = dy.contiguous(), id = ids.contiguous();
  if (cpu) {
    check_id_range(id, vocab, op);
    dispatch_cpu_float(g.dtype(), op, [&](auto t) {
      using T = decltype(t);
      cpu::embedding_backward<T>(g.data<T>(), id.data_ptr(), id.dtype(), id.numel(), dim, dweight_accum.data<T>());
    });
  } else {
    PRIMER_ON_CUDA(embedding_backward_cuda(g, id, vocab, dweight_accum));
  }
}

}  // namespace primer::ops
