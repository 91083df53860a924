// Checkpoints: bit-exact round trip, rotation, what latest() accepts, detection of corrupted and truncated
// shards, shape mismatches, a save killed at a random point, and bit-exact resume of a real training run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "core/autograd/variable.h"
#include "core/io/crc32c.h"
#include "core/io/hdf5_file.h"
#include "data/byte_corpus.h"
#include "layers/short_conv_lm.h"
#include "optim/schedule.h"
#include "recipes/checkpoint.h"
#include "tests/support/scratch_dir.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {
namespace fs = std::filesystem;
using recipes::CheckpointManager;
using recipes::TrainingState;

// A scratch directory removed when the test ends.
using test::ScratchDir;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A small model-like registry: 2-D weights, a norm weight and a frozen parameter without optimizer state.
void declare(ParameterRegistry& params, int64_t width = 24) {
  params.add("model.embed_tokens.weight", {17, 8}, InitRule::normal(0.5));
  params.add("model.layers.0.mlp.up_proj.weight", {8, width}, InitRule::normal(0.3));
  params.add("model.layers.0.input_layernorm.weight", {8}, InitRule::constant(1.0), false);
  params.add("model.frozen.bias", {5}, InitRule::uniform(-1, 1), false);
}

// Materialized from `seed`, two AdamW steps on random gradients so every moment is non-trivial.
void train_randomly(ParameterRegistry& params, optim::AdamW& adamw, uint64_t seed) {
  params.materialize(Device::cpu(), DType::F32, seed);
  params.set_trainable({"model.embed_tokens", "model.layers"});
  for (int s = 0; s < 2; ++s) {
    for (Parameter* p : params.trainable())
      p->var->grad = test::randn(p->shape, seed + 7 * s + p->name.size(), DType::F32);
    adamw.step(1e-2);
  }
}

TrainingState random_state(uint64_t seed) {
  TrainingState s;
  s.step = int64_t(seed % 100000) + 1;
  s.seed = seed;
  s.data_cursor = fmt::format("{{\"shard\": 3, \"offset\": {}}}", seed % 977);
  s.data_cursor.push_back('\0');  // opaque bytes survive, NUL included
  s.resolved_config = fmt::format("model:\n  hidden: 8\nseed: {}\n", seed);
  return s;
}

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

TEST(Checkpoint, SaveLoadRoundTripIsBitExact) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScratchDir dir("roundtrip", seed);
  ParameterRegistry saved;
  declare(saved);
  optim::AdamW saved_adamw(saved, {});
  train_randomly(saved, saved_adamw, seed);
  const TrainingState state = random_state(seed);
  CheckpointManager manager(dir.path.string(), 0);
  const std::string committed = manager.save(state, saved, saved_adamw);
  EXPECT_EQ(committed, (dir.path / fmt::format("checkpoint-{}", state.step)).string());

  ParameterRegistry loaded;
  declare(loaded);
  loaded.materialize(Device::cpu(), DType::F32, seed + 1);  // different values, to be overwritten
  loaded.set_trainable({"model.embed_tokens", "model.layers"});
  optim::AdamW loaded_adamw(loaded, {});
  const TrainingState restored = manager.load(committed, loaded, loaded_adamw);

  EXPECT_EQ(restored.step, state.step);
  EXPECT_EQ(restored.seed, state.seed);
  EXPECT_EQ(restored.data_cursor, state.data_cursor);
  EXPECT_EQ(restored.resolved_config, state.resolved_config);
  EXPECT_EQ(loaded_adamw.steps(), 2);
  for (Parameter* p : saved.all()) {
    SCOPED_TRACE(p->name);
    Parameter& q = loaded.get(p->name);
    EXPECT_EQ(values(q.master), values(p->master));
    EXPECT_EQ(values(q.var->value), values(p->master));  // compute copy refreshed
    ASSERT_EQ(loaded_adamw.has_state(p->name), saved_adamw.has_state(p->name));
    if (!p->trainable) continue;
    EXPECT_EQ(values(loaded_adamw.first_moment(p->name)), values(saved_adamw.first_moment(p->name)));
    EXPECT_EQ(values(loaded_adamw.second_moment(p->name)), values(saved_adamw.second_moment(p->name)));
  }
}

TEST(Checkpoint, KeepsOnlyTheLastK) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScratchDir dir("rotate", seed);
  ParameterRegistry params;
  declare(params);
  optim::AdamW adamw(params, {});
  train_randomly(params, adamw, seed);
  CheckpointManager keep_two(dir.path.string(), 2);
  TrainingState state = random_state(seed);
  for (int64_t step : {10, 20, 30, 40}) {
    state.step = step;
    keep_two.save(state, params, adamw);
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"checkpoint-30", "checkpoint-40"}));
  EXPECT_EQ(keep_two.latest(), (dir.path / "checkpoint-40").string());

  // Saving an older step (a resumed run) never deletes the checkpoint just written.
  state.step = 5;
  keep_two.save(state, params, adamw);
  EXPECT_TRUE(fs::exists(dir.path / "checkpoint-5"));
  EXPECT_TRUE(fs::exists(dir.path / "checkpoint-40"));
  EXPECT_FALSE(fs::exists(dir.path / "checkpoint-30"));

  CheckpointManager keep_all(dir.path.string(), 0);
  for (int64_t step : {50, 60, 70}) {
    state.step = step;
    keep_all.save(state, params, adamw);
  }
  EXPECT_TRUE(fs::exists(dir.path / "checkpoint-5"));
  EXPECT_EQ(keep_all.latest(), (dir.path / "checkpoint-70").string());
}

TEST(Checkpoint, LatestSkipsLeftoversAndDirectoriesWithoutManifest) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScratchDir dir("latest", seed);
  ParameterRegistry params;
  declare(params);
  optim::AdamW adamw(params, {});
  train_randomly(params, adamw, seed);
  CheckpointManager manager(dir.path.string(), 0);
  EXPECT_EQ(manager.latest(), std::nullopt);
  TrainingState state = random_state(seed);
  state.step = 2;
  const std::string good = manager.save(state, params, adamw);

  // A newer save killed before its commit, and a newer directory whose manifest never got written.
  const fs::path leftover = dir.path / fmt::format(".checkpoint-9.tmp-{}", test::dead_pid());
  fs::create_directories(leftover);
  fs::copy_file(fs::path(good) / "rank00000.h5", leftover / "rank00000.h5");
  fs::create_directories(dir.path / "checkpoint-7");
  fs::copy_file(fs::path(good) / "rank00000.h5", dir.path / "checkpoint-7" / "rank00000.h5");

  EXPECT_EQ(manager.latest(), good);
  EXPECT_FALSE(fs::exists(leftover));  // removed: its owner is gone
  EXPECT_EQ(manager.resolve("auto", "resume_from_checkpoint"), good);
  EXPECT_EQ(manager.resolve("", "resume_from_checkpoint"), std::nullopt);
  EXPECT_EQ(manager.resolve(good, "resume_from_checkpoint"), good);
  EXPECT_NE(error_of([&] {
              manager.resolve((dir.path / "checkpoint-7").string(), "resume_from_checkpoint");
            }).find("manifest.json"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              manager.resolve((dir.path / "nowhere").string(), "resume_from_checkpoint");
            }).find("resume_from_checkpoint '" + (dir.path / "nowhere").string() + "': no such checkpoint directory"),
            std::string::npos);
  EXPECT_EQ(CheckpointManager((dir.path / "absent").string(), 0).latest(), std::nullopt);
}

// Saves one checkpoint and returns its shard path, with the manager and state for loading it again.
struct SavedCheckpoint {
  ParameterRegistry params;
  std::unique_ptr<optim::AdamW> adamw;
  std::string dir, shard;
};
void save_one(SavedCheckpoint& c, const fs::path& root, uint64_t seed) {
  declare(c.params);
  c.adamw = std::make_unique<optim::AdamW>(c.params, optim::AdamWConfig{});
  train_randomly(c.params, *c.adamw, seed);
  c.dir = CheckpointManager(root.string(), 0).save(random_state(seed), c.params, *c.adamw);
  c.shard = (fs::path(c.dir) / "rank00000.h5").string();
}

TEST(Checkpoint, FlippedByteIsDetectedByTheManifestChecksum) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScratchDir dir("flip", seed);
  SavedCheckpoint c;
  save_one(c, dir.path, seed);
  const uint64_t size = fs::file_size(c.shard);
  {
    std::fstream f(c.shard, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = std::streamoff(size / 4 + seed % (size / 2));  // somewhere in the middle half
    f.seekg(at);
    const char byte = char(f.get() ^ (1 << (seed % 8)));
    f.seekp(at);
    f.put(byte);
  }
  CheckpointManager manager(dir.path.string(), 0);
  const std::string message = error_of([&] { manager.load(c.dir, c.params, *c.adamw); });
  EXPECT_NE(message.find("rank00000.h5"), std::string::npos) << message;
  EXPECT_NE(message.find("corrupted"), std::string::npos) << message;
}

// `auto` resume does not trust a newest checkpoint whose bytes fail their CRC32C (a truncated one was already
// skipped): it names it, leaves it in place and takes the newest intact one; latest() (sizes only) still lists it.
TEST(Checkpoint, AutoResumeSkipsANewestCheckpointThatFailsItsChecksum) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScratchDir dir("auto-crc", seed);
  SavedCheckpoint c;
  save_one(c, dir.path, seed);
  CheckpointManager manager(dir.path.string(), 0);
  TrainingState newer = random_state(seed);
  newer.step += 7;
  const std::string newest = manager.save(newer, c.params, *c.adamw);
  const std::string shard = (fs::path(newest) / "rank00000.h5").string();
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = std::streamoff(fs::file_size(shard) / 2);
    f.seekg(at);
    const char byte = char(f.get() ^ 0x10);
    f.seekp(at);
    f.put(byte);
  }
  testing::internal::CaptureStderr();
  const std::optional<std::string> chosen = manager.resolve("auto", "resume_from_checkpoint");
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_EQ(chosen, c.dir);
  EXPECT_NE(warning.find(newest), std::string::npos) << warning;
  EXPECT_NE(warning.find("corrupted"), std::string::npos) << warning;
  EXPECT_TRUE(fs::exists(shard)) << "the corrupted checkpoint was deleted";
  EXPECT_EQ(manager.latest(), newest);
}

TEST(Checkpoint, TruncatedFileIsDetected) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScratchDir dir("truncate", seed);
  SavedCheckpoint c;
  save_one(c, dir.path, seed);
  fs::resize_file(c.shard, fs::file_size(c.shard) - 1 - seed % 1000);
  CheckpointManager manager(dir.path.string(), 0);
  EXPECT_EQ(manager.latest(), std::nullopt);  // the only checkpoint is incomplete
  const std::string message = error_of([&] { manager.load(c.dir, c.params, *c.adamw); });
  EXPECT_NE(message.find("rank00000.h5"), std::string::npos) << message;
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
}

TEST(Checkpoint, MismatchedParametersAreNamed) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScratchDir dir("mismatch", seed);
  SavedCheckpoint c;
  save_one(c, dir.path, seed);
  ParameterRegistry other;
  declare(other, 25);  // up_proj [8, 25] instead of [8, 24]
  other.add("model.extra.weight", {3}, InitRule::constant(0));
  other.materialize(Device::cpu(), DType::F32, seed);
  optim::AdamW adamw(other, {});
  const std::string message = error_of([&] { CheckpointManager(dir.path.string(), 0).load(c.dir, other, adamw); });
  EXPECT_NE(
      message.find("'model.layers.0.mlp.up_proj.weight' has shape [8, 24] in the checkpoint, [8, 25] in the model"),
      std::string::npos)
      << message;
  EXPECT_NE(message.find("'model.extra.weight' is in the model but not in the checkpoint"), std::string::npos)
      << message;
}

TEST(Hdf5File, Fletcher32DetectsACorruptedChunk) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScratchDir dir("fletcher", seed);
  const std::string path = (dir.path / "data.h5").string();
  const std::vector<float> data = test::randn({64, 1024}, seed, DType::F32).to_vector<float>();
  io::Hdf5File file = io::Hdf5File::create(path);
  file.write("/group/weights", {64, 1024}, data.data());
  file.close();
  // Find the raw values in the file and flip one bit inside them.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t start = bytes.find(std::string(reinterpret_cast<const char*>(data.data()), 64));
  ASSERT_NE(start, std::string::npos);
  bytes[start + 4 * (seed % data.size())] ^= char(1 << (seed % 8));  // one chunk: the values lie contiguously
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;

  const io::Hdf5File reread = io::Hdf5File::open_read_only(path);
  std::vector<float> out(data.size());
  const std::string message = error_of([&] { reread.read("/group/weights", {64, 1024}, out.data()); });
  EXPECT_NE(message.find("/group/weights"), std::string::npos) << message;
  EXPECT_NE(message.find("data.h5"), std::string::npos) << message;
  EXPECT_NE(message.find("checksum"), std::string::npos) << message;  // from the HDF5 error stack
}

TEST(Crc32c, MatchesTheStandardCheckValue) {
  EXPECT_EQ(io::crc32c_update(0, "123456789", 9), 0xE3069283u);
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<float> data = test::randn({1001}, seed, DType::F32).to_vector<float>();
  const size_t split = seed % (data.size() * 4);
  const auto* bytes = reinterpret_cast<const char*>(data.data());
  EXPECT_EQ(io::crc32c_update(io::crc32c_update(0, bytes, split), bytes + split, data.size() * 4 - split),
            io::crc32c_update(0, bytes, data.size() * 4));  // incremental == one pass
}

// A save SIGKILLed at a random moment: afterwards the newest complete checkpoint is either the previous one or
// (if the kill came after the commit) the new one, it loads with the values saved, and no final-named
// directory is incomplete.
TEST(Checkpoint, SaveKilledAtARandomPointKeepsTheLastGoodCheckpoint) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScratchDir dir("crash", seed);
  ParameterRegistry params;
  for (int i = 0; i < 6; ++i)
    params.add(fmt::format("model.layers.{}.mlp.down_proj.weight", i), {512, 512}, InitRule::normal(0.02));
  optim::AdamW adamw(params, {});
  params.materialize(Device::cpu(), DType::F32, seed);
  for (Parameter* p : params.all()) p->var->grad = test::randn(p->shape, seed + p->name.size(), DType::F32);
  adamw.step(1e-3);  // 3 x 6 x 1 MiB: a save takes long enough to be interrupted in its middle
  CheckpointManager manager(dir.path.string(), 2);
  std::map<int64_t, std::vector<float>> saved_values;  // step -> first parameter's master as saved
  Parameter& first = *params.all().front();

  auto save_step = [&](int64_t step) {
    first.master.data<float>()[0] = float(step);  // makes each step's state distinguishable
    saved_values[step] = values(first.master);
    TrainingState state = random_state(seed);
    state.step = step;
    return manager.save(state, params, adamw);
  };
  const auto t0 = std::chrono::steady_clock::now();
  save_step(1);
  const double save_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::mt19937_64 rng(seed);
  int64_t expected_previous = 1;
  for (int64_t step = 2; step <= 5; ++step) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // no gtest in here: save, then leave without running the parent's cleanup
      ::close(ready[0]);
      first.master.data<float>()[0] = float(step);
      TrainingState state = random_state(seed);
      state.step = step;
      const char go = 1;
      if (::write(ready[1], &go, 1) != 1) ::_exit(2);
      try {
        manager.save(state, params, adamw);
      } catch (...) {
        ::_exit(3);
      }
      ::_exit(0);
    }
    ::close(ready[1]);
    char go = 0;
    ASSERT_EQ(::read(ready[0], &go, 1), 1);
    ::close(ready[0]);
    const double delay = std::uniform_real_distribution<double>(0.0, 1.2 * save_seconds)(rng);
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    SCOPED_TRACE(fmt::format("step {} killed after {:.3f} s of a {:.3f} s save", step, delay, save_seconds));
    ASSERT_TRUE(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0));

    const std::optional<std::string> latest = manager.latest();
    ASSERT_TRUE(latest.has_value());
    const bool committed = *latest == (dir.path / fmt::format("checkpoint-{}", step)).string();
    if (!committed) {
      EXPECT_EQ(*latest, (dir.path / fmt::format("checkpoint-{}", expected_previous)).string());
    }
    const int64_t loaded_step = committed ? step : expected_previous;
    if (committed) {
      first.master.data<float>()[0] = float(step);
      saved_values[step] = values(first.master);
    }
    for (const auto& e : fs::directory_iterator(dir.path)) {
      const std::string name = e.path().filename().string();
      EXPECT_EQ(name.rfind("checkpoint-", 0), 0u) << "leftover " << name << " not cleaned";
      EXPECT_NO_THROW(manager.resolve(e.path().string(), "resume_from_checkpoint"))
          << name << " is under a final name but incomplete";
    }
    ParameterRegistry fresh;
    for (Parameter* p : params.all()) fresh.add(p->name, p->shape, p->init);
    fresh.materialize(Device::cpu(), DType::F32, seed + 1);
    optim::AdamW fresh_adamw(fresh, {});
    EXPECT_EQ(manager.load(*latest, fresh, fresh_adamw).step, loaded_step);
    EXPECT_EQ(values(fresh.get(first.name).master), saved_values[loaded_step]);
    expected_previous = loaded_step;
  }
}

// Bit-exact resume: 8 steps straight equal 3 steps, save, a brand-new model and optimizer, load, 5 steps.
struct TinyRun {
  const data::ByteCorpus& corpus;
  uint64_t seed;
  ParameterRegistry params;
  layers::ShortConvLM model;
  optim::AdamW adamw;
  optim::Schedule schedule{optim::Schedule::Kind::Cosine, 3e-3, 3e-4, 2, 8};
  static constexpr int64_t kBatch = 2, kSeq = 16;

  static layers::ShortConvLMConfig config() {
    layers::ShortConvLMConfig c;
    c.hidden = 16;
    c.layers = 2;
    c.ffn = 40;
    return c;
  }
  TinyRun(const data::ByteCorpus& corpus, uint64_t seed)
      : corpus(corpus), seed(seed), model(config(), params), adamw(params, {}) {
    params.materialize(Device::cpu(), DType::F32, seed);
  }
  // Trains steps [from, to) and returns their losses.
  std::vector<double> train(int64_t from, int64_t to) {
    std::vector<double> losses;
    std::vector<int32_t> ids, targets;
    for (int64_t step = from; step < to; ++step) {
      corpus.train_rows(seed, step * kBatch, kBatch, kSeq, ids, targets);
      params.zero_grads();
      ag::Var loss = model.loss(Tensor::from_vector(ids, {kBatch, kSeq}, DType::I32),
                                Tensor::from_vector(targets, {kBatch, kSeq}, DType::I32), 1.0 / double(kBatch * kSeq));
      ag::backward(loss);
      adamw.step(schedule.lr(step));
      losses.push_back(loss->value.item());
    }
    return losses;
  }
};

TEST(Checkpoint, ResumeIsBitExact) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ScratchDir dir("resume", seed);
  const std::string corpus_path = (dir.path / "corpus.txt").string();
  {
    std::mt19937_64 rng(seed);
    std::string text(4096, ' ');
    for (char& c : text) c = char('a' + rng() % 26);
    std::ofstream(corpus_path, std::ios::binary) << text;
  }
  const data::ByteCorpus corpus(corpus_path, 0.1);

  TinyRun straight(corpus, seed);
  const std::vector<double> expected = straight.train(0, 8);

  CheckpointManager manager((dir.path / "run").string(), 1);
  std::vector<double> resumed;
  {
    TinyRun first(corpus, seed);
    resumed = first.train(0, 3);
    manager.save({3, seed, "3", "tiny"}, first.params, first.adamw);
  }
  TinyRun second(corpus, seed + 1);  // brand-new everything, even different initial weights
  const std::optional<std::string> checkpoint = manager.resolve("auto", "resume_from_checkpoint");
  ASSERT_TRUE(checkpoint.has_value());
  const TrainingState state = manager.load(*checkpoint, second.params, second.adamw);
  EXPECT_EQ(state.data_cursor, "3");
  second.seed = state.seed;
  const std::vector<double> rest = second.train(std::stoll(state.data_cursor), 8);
  resumed.insert(resumed.end(), rest.begin(), rest.end());
  ASSERT_EQ(resumed.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(resumed[i], expected[i]) << "step " << i;
}

}  // namespace
}  // namespace primer
