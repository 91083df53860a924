// Token-shard layout and loader throughput on the CPU, for docs/data.md and docs/perf.md.
//   build/bench_token_shards [tokenized-dir]   (default data-cache/linux-doc-qwen3, from `primer tokenize`)
// 1. The directory's tokens written as /tokens (i32) in each HDF5 layout: bytes on disk, write time, and the
//    time until every token is readable in memory (contiguous: memory map + one pass; chunked: H5Dread).
// 2. The loader over the directory: rows per second for each packing, 1024-token rows.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "common/bench_util.h"
#include "core/io/crc32c.h"
#include "core/io/hdf5_file.h"
#include "core/io/mapped_file.h"
#include "data/loader.h"
#include "data/token_corpus.h"

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

int main(int argc, char** argv) {
  using namespace primer;
  const std::string dir = argc > 1 ? argv[1] : "data-cache/linux-doc-qwen3";
  const data::TokenCorpus corpus = data::TokenCorpus::open({dir}, true);
  std::vector<int32_t> tokens;
  tokens.reserve(size_t(corpus.tokens()));
  for (int64_t d = 0; d < corpus.documents(); ++d) {
    const auto view = corpus.document(d);
    tokens.insert(tokens.end(), view.tokens.begin(), view.tokens.end());
  }
  std::printf("%s: %lld documents, %lld tokens (%.1f MB as i32); %s, %s\n\n", dir.c_str(),
              (long long)corpus.documents(), (long long)tokens.size(), double(tokens.size()) * 4 / 1e6,
              bench::today().c_str(), "CPU");

  std::vector<bench::Row> rows;
  const std::string path = (std::filesystem::temp_directory_path() / "primer-bench-tokens.h5").string();
  for (const auto& [layout, name] :
       {std::pair{io::Hdf5Layout::Contiguous, "contiguous (mapped)"},
        std::pair{io::Hdf5Layout::Checked, "chunked + Fletcher32"},
        std::pair{io::Hdf5Layout::Compressed, "chunked + shuffle + deflate(1) + Fletcher32"}}) {
    auto t0 = Clock::now();
    {
      io::Hdf5File h5 = io::Hdf5File::create(path, 64);
      h5.write("/tokens", {int64_t(tokens.size())}, tokens.data(), layout);
      h5.close();
    }
    const double write_s = since(t0);
    const double mb = double(std::filesystem::file_size(path)) / 1e6;
    double best = 1e9;
    for (int rep = 0; rep < 5; ++rep) {  // warm page cache: what a loader sees after the first epoch
      t0 = Clock::now();
      const io::Hdf5File h5 = io::Hdf5File::open_read_only(path);
      uint64_t sum = 0;
      if (const auto offset = h5.data_offset<int32_t>("/tokens")) {
        const io::MappedFile map(path);
        const auto* p = reinterpret_cast<const int32_t*>(map.data() + *offset);
        for (size_t i = 0; i < tokens.size(); ++i) sum += uint32_t(p[i]);
      } else {
        std::vector<int32_t> copy(tokens.size());
        h5.read("/tokens", {int64_t(tokens.size())}, copy.data());
        for (int32_t t : copy) sum += uint32_t(t);
      }
      best = std::min(best, since(t0));
      if (sum == 0) std::printf("(empty)\n");
    }
    rows.push_back({{name, fmt::format("{:.2f}", mb), fmt::format("{:.2f}", double(tokens.size()) * 4 / 1e6 / mb),
                     fmt::format("{:.0f}", double(tokens.size()) * 4 / 1e6 / write_s),
                     fmt::format("{:.0f}", double(tokens.size()) * 4 / 1e6 / best)}});
  }
  std::filesystem::remove(path);
  {
    const io::MappedFile map((std::filesystem::path(dir) / "shard-00000.h5").string());
    auto t0 = Clock::now();
    const uint32_t crc = io::crc32c_update(0, map.data(), map.size());
    std::printf("CRC32C of shard-00000.h5 (%.1f MB): %.0f MB/s (%08x)\n\n", double(map.size()) / 1e6,
                double(map.size()) / 1e6 / since(t0), crc);
  }
  bench::print_table({"layout of /tokens", "MB on disk", "ratio", "write MB/s", "read-all MB/s (warm)"}, rows);

  std::printf("\nloader, rows of 1024 tokens, batches of 32 rows:\n\n");
  rows.clear();
  for (const auto method : {data::PackingMethod::Concat, data::PackingMethod::Greedy, data::PackingMethod::BestFit,
                            data::PackingMethod::Random}) {
    data::LoaderOptions o;
    o.seq_len = 1024;
    o.packing = method;
    o.heldout_fraction = 0.05;
    auto t0 = Clock::now();
    data::Loader loader(corpus, o);
    const double setup = since(t0);
    data::Batch b;
    int64_t n = 0, real = 0;
    t0 = Clock::now();
    while (since(t0) < 2.0) {
      loader.next(32, b);
      n += b.rows;
      for (int32_t s : b.segments) real += s >= 0;
    }
    const double secs = since(t0);
    rows.push_back({{data::packing_method_name(method), fmt::format("{:.2f}", setup),
                     fmt::format("{:.0f}", double(n) / secs), fmt::format("{:.1f}", double(n) * 1024 / secs / 1e6),
                     fmt::format("{:.1f}%", 100.0 * double(real) / double(n * 1024))}});
  }
  bench::print_table({"packing", "setup s (epoch 0 plan)", "rows/s", "M tokens/s", "non-pad tokens"}, rows);
  return 0;
}
