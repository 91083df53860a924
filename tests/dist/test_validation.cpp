// Arguments every rank gets wrong alike are refused before any communication, with a message that names the
// rank, the collective (kind, sequence number, label, the caller's context), the tensor and what was expected.
#include <gtest/gtest.h>

#include "core/check.h"
#include "tests/dist/dist_env.h"

namespace primer::parallel {
namespace {

using test::world_comm;

// Runs `call`, expecting a primer::Error whose message contains every fragment.
template <class Call> void expect_error(Call&& call, std::initializer_list<std::string> fragments) {
  try {
    call();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string message = e.what();
    for (const std::string& f : fragments) EXPECT_NE(message.find(f), std::string::npos) << message << "\nlacks: " << f;
  }
}

TEST(DistValidation, UnevenSizesAreRejected) {
  Communicator& comm = world_comm();
  comm.set_context("step 3");
  std::string rank = fmt::format("rank {}", comm.rank());
  Tensor shard = Tensor::zeros({4}, DType::F32);
  expect_error(
      [&] { comm.all_gather(shard, Tensor::zeros({4 * comm.size() + 1}, DType::F32), "params"); },
      {rank, "all_gather", "'params'", "(step 3)", "f32[" + std::to_string(4 * comm.size() + 1) + "]", "need"});
  expect_error([&] { comm.reduce_scatter(Tensor::zeros({4 * comm.size() + 1}, DType::F32), shard); },
               {rank, "reduce_scatter", "pad the input"});
  if (comm.size() > 1)
    expect_error(
        [&] {
          comm.all_to_all(Tensor::zeros({comm.size() + 1}, DType::F32), Tensor::zeros({comm.size() + 1}, DType::F32));
        },
        {rank, "all_to_all", "not a multiple"});
  expect_error([&] { comm.all_gather(shard, Tensor::zeros({4 * comm.size()}, DType::F64)); },
               {"all_gather", "dtype and device"});
  comm.set_context("");
}

TEST(DistValidation, UnsupportedTensorsAreRejected) {
  Communicator& comm = world_comm();
  expect_error([&] { comm.all_reduce(Tensor::zeros({4}, DType::U8)); }, {"all_reduce", "u8", "f32, f64, bf16"});
  Tensor matrix = Tensor::zeros({3, 4}, DType::F32);
  expect_error([&] { comm.all_reduce(matrix.transpose(0, 1)); }, {"all_reduce", "contiguous"});
  expect_error([&] { comm.broadcast(matrix, comm.size()); }, {"broadcast", "root", "not a rank"});
  expect_error([&] { comm.send(matrix, comm.rank()); }, {"send", "itself"});
  expect_error([&] { comm.all_reduce(Tensor()); }, {"all_reduce", "undefined"});
}

}  // namespace
}  // namespace primer::parallel
