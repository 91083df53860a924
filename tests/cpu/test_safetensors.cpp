// safetensors: write→read round trips for every dtype and random shapes (single file and shards with an
// index), dtype conversion on load, validation errors for truncated and corrupt files, and atomic writes
// that leave no temporary files and never mix two exports.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/check.h"
#include "core/io/atomic_file.h"
#include "core/io/json.h"
#include "core/io/safetensors.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

namespace fs = std::filesystem;
using io::SafetensorsCheckpoint;
using io::SafetensorsFile;

using test::expect_error;

// A fresh empty directory per test, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = test::fresh_seed();
    dir_ = (fs::temp_directory_path() /
            fmt::format("primer_st_{}_{}", ::testing::UnitTest::GetInstance()->current_test_info()->name(), seed_))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  // Random tensors of every dtype with random shapes (including a scalar and an empty tensor).
  std::vector<std::pair<std::string, Tensor>> random_tensors(uint64_t seed) const {
    std::mt19937_64 rng(seed);
    const DType dtypes[] = {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8};
    std::vector<std::pair<std::string, Tensor>> out;
    int k = 0;
    for (int round = 0; round < 3; ++round) {
      for (const DType dt : dtypes) {
        Shape shape;
        for (int d = int(rng() % 4); d > 0; --d) shape.push_back(int64_t(1 + rng() % 9));
        const Tensor t = is_floating(dt) ? test::randn(shape, seed + k, dt)
                                         : test::rand_ints(shape, seed + k, 0, dt == DType::U8 ? 255 : 1 << 30, dt);
        out.emplace_back(fmt::format("model.layers.{}.{}.weight", k, dtype_name(dt)), t);
        ++k;
      }
    }
    out.emplace_back("empty", Tensor::empty({3, 0}, DType::F32));
    // A strided view is written as its logical contents.
    out.emplace_back("transposed", test::randn({4, 5}, seed + 99, DType::F32).transpose(0, 1));
    return out;
  }

  void expect_same(const SafetensorsCheckpoint& ckpt, const std::vector<std::pair<std::string, Tensor>>& tensors) {
    ASSERT_EQ(ckpt.names().size(), tensors.size());
    for (const auto& [name, t] : tensors) {
      SCOPED_TRACE(name);
      EXPECT_EQ(ckpt.entry(name).dtype, io::safetensors_dtype_name(t.dtype()));
      const Tensor back = ckpt.load(name, t.dtype());
      ASSERT_EQ(back.shape(), t.shape());
      EXPECT_EQ(back.to_vector<double>(), t.to_vector<double>());  // bit-exact: same dtype both ways
    }
  }

  uint64_t seed_ = 0;
  std::string dir_;
};

TEST_F(SafetensorsTest, SingleFileRoundTripEveryDtype) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const auto tensors = random_tensors(seed_);
  const auto written = io::write_safetensors(dir_, tensors, io::kNoShardLimit, {{"producer", "primer"}});
  EXPECT_EQ(written, std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(files(), std::vector<std::string>{"model.safetensors"});  // no temporaries left behind
  const SafetensorsCheckpoint ckpt(dir_);
  EXPECT_EQ(ckpt.num_files(), 1u);
  expect_same(ckpt, tensors);
  const SafetensorsFile file(dir_ + "/model.safetensors");
  EXPECT_EQ(file.metadata().at("format"), "pt");  // transformers refuses files without it
  EXPECT_EQ(file.metadata().at("producer"), "primer");
  EXPECT_EQ(file.names().front(), tensors.front().first);  // header keeps the given order
}

TEST_F(SafetensorsTest, ShardedRoundTripWithIndex) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const auto tensors = random_tensors(seed_);
  uint64_t total = 0;
  for (const auto& [n, t] : tensors) total += t.nbytes();
  const auto written = io::write_safetensors(dir_, tensors, std::max<uint64_t>(total / 5, 64));
  ASSERT_GE(written.size(), 4u);
  EXPECT_EQ(written.back(), "model.safetensors.index.json");
  EXPECT_EQ(written.front(), fmt::format("model-00001-of-{:05d}.safetensors", written.size() - 1));
  for (const std::string& f : files()) EXPECT_FALSE(io::is_atomic_temp_name(f)) << f;
  const json::Value index = json::parse_file(dir_ + "/model.safetensors.index.json");
  EXPECT_EQ(json::Node(index, "index").at("metadata").at("total_size").as_int(), int64_t(total));
  const SafetensorsCheckpoint ckpt(dir_);
  EXPECT_EQ(ckpt.num_files(), written.size() - 1);
  expect_same(ckpt, tensors);
  // A limit below every tensor gives each tensor with data a shard of its own.
  const auto one_each = io::write_safetensors(dir_, tensors, 1);
  for (size_t k = 0; k + 1 < one_each.size(); ++k) {
    int with_data = 0;
    const SafetensorsFile shard(dir_ + "/" + one_each[k]);  // named: a temporary's entries() would dangle in the loop
    for (const auto& e : shard.entries()) with_data += e.end > e.begin;
    EXPECT_EQ(with_data, 1) << one_each[k];
  }
  expect_same(SafetensorsCheckpoint(dir_), tensors);
}

TEST_F(SafetensorsTest, LoadConvertsDtype) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const Tensor w = test::randn({7, 3}, seed_, DType::F32);
  io::write_safetensors(dir_, {{"w", w}});
  const SafetensorsCheckpoint ckpt(dir_);
  // f32 → bf16 must equal the library's own rounding; bf16 → f64 is exact after that.
  EXPECT_EQ(ckpt.load("w", DType::BF16).to_vector<double>(), w.to(DType::BF16).to_vector<double>());
  EXPECT_EQ(ckpt.load("w", DType::F64).to_vector<double>(), w.to_vector<double>());
  if (cuda::available()) {
    EXPECT_EQ(ckpt.load("w", DType::BF16, Device::cuda(0)).to_vector<double>(), w.to(DType::BF16).to_vector<double>());
  }
}

TEST_F(SafetensorsTest, ReplacingAnExportRemovesStaleFiles) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const auto tensors = random_tensors(seed_);
  io::write_safetensors(dir_, tensors, 1);  // many shards
  const auto small = std::vector<std::pair<std::string, Tensor>>{{"a", test::randn({5}, seed_ + 7, DType::F32)}};
  io::write_safetensors(dir_, small);  // now one file: the old index and shards must go
  EXPECT_EQ(files(), std::vector<std::string>{"model.safetensors"});
  expect_same(SafetensorsCheckpoint(dir_), small);
}

TEST_F(SafetensorsTest, TruncatedFileIsDetected) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const auto tensors = random_tensors(seed_);
  io::write_safetensors(dir_, tensors);
  const std::string path = dir_ + "/model.safetensors";
  const auto size = fs::file_size(path);
  fs::resize_file(path, size - 3);  // cut into the last tensor's data
  expect_error([&] { SafetensorsFile f(path); }, {path, "transposed", "truncated"});
  fs::resize_file(path, 100);  // cut into the header
  expect_error([&] { SafetensorsFile f(path); }, {path, "header length", "exceeds the file size"});
  fs::resize_file(path, 5);
  expect_error([&] { SafetensorsCheckpoint c(dir_); }, {path, "too short"});
}

// Writes a file with a hand-made header.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes += char((header.size() >> (8 * i)) & 0xff);
  bytes += header;
  bytes.append(data_bytes, '\x01');
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST_F(SafetensorsTest, CorruptHeadersAreRejectedWithTheTensorNamed) {
  const std::string path = dir_ + "/model.safetensors";
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 64]}})", 16);
  expect_error([&] { SafetensorsFile f(path); }, {path, "'w'", "[0, 64)", "only 16 data bytes"});
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]}})", 16);
  expect_error([&] { SafetensorsFile f(path); }, {"'w' is F32 [2, 3] (24 bytes)", "span 16 bytes"});
  write_raw(path,
            R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
            16);
  expect_error([&] { SafetensorsFile f(path); }, {"'a' [0, 8) and 'b' [4, 12) overlap"});
  write_raw(path, R"({"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 2]}})", 16);
  expect_error([&] { SafetensorsFile f(path); }, {"key \"w.dtype\"", "unknown safetensors dtype 'Q4'"});
  write_raw(path, R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})", 16);
  expect_error([&] { SafetensorsFile f(path); }, {path + " (header):1:", "expected ',' or '}'"});
  write_raw(path, R"({"w": {"dtype": "I16", "shape": [2], "data_offsets": [0, 4]}})", 16);
  const SafetensorsFile i16(path);  // opens: other tensors may be loadable
  expect_error([&] { i16.load("w", DType::F32); }, {"'w' has dtype I16", "cannot load"});
  expect_error([&] { i16.load("nope", DType::F32); }, {path, "no tensor named 'nope'"});
}

TEST_F(SafetensorsTest, MissingTensorsAndFilesNameTheDirectory) {
  expect_error([&] { SafetensorsCheckpoint c(dir_); }, {dir_, "no safetensors checkpoint"});
  io::write_safetensors(
      dir_, {{"a", test::randn({3}, seed_, DType::F32)}, {"b", test::randn({3}, seed_ + 1, DType::F32)}}, 12);
  const SafetensorsCheckpoint ckpt(dir_);
  expect_error([&] { ckpt.load("c", DType::F32); }, {dir_, "no tensor named 'c'"});
  // An index pointing at a shard that lacks the tensor.
  io::write_file_atomic(dir_ + "/model.safetensors.index.json",
                        R"({"weight_map": {"a": "model-00002-of-00002.safetensors"}})");
  expect_error([&] { SafetensorsCheckpoint c(dir_); },
               {"weight_map puts tensor 'a' in 'model-00002-of-00002.safetensors'"});
  io::write_file_atomic(dir_ + "/model.safetensors.index.json", R"({"weight_map": {"a": "../x.safetensors"}})");
  expect_error([&] { SafetensorsCheckpoint c(dir_); }, {"key \"weight_map.a\"", "expected a file name"});
}

TEST_F(SafetensorsTest, InvalidInputsWriteNothing) {
  const Tensor t = test::randn({2}, seed_, DType::F32);
  expect_error([&] { io::write_safetensors(dir_, {{"a", t}, {"a", t}}); }, {"tensor 'a' given twice"});
  expect_error([&] { io::write_safetensors(dir_, {{"a", t}, {"b", Tensor()}}); }, {"'b' is undefined"});
  EXPECT_TRUE(files().empty());
}

TEST_F(SafetensorsTest, AtomicFileLeavesNothingWhenNotCommitted) {
  const std::string path = dir_ + "/config.json";
  {
    io::AtomicFile f(path);
    f.write("{\"half\": ");
    EXPECT_TRUE(fs::exists(f.temp_path()));
    EXPECT_TRUE(io::is_atomic_temp_name(fs::path(f.temp_path()).filename().string()));
  }  // dropped without commit, as when an exception unwinds an export
  EXPECT_TRUE(files().empty());
  io::write_file_atomic(path, "{}");
  EXPECT_EQ(files(), std::vector<std::string>{"config.json"});
}

}  // namespace
}  // namespace primer
