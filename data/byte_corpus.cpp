#include "data/byte_corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/check.h"
#include "core/rng.h"

namespace primer::data {

namespace {
std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  PRIMER_CHECK(in.good(), "cannot open corpus file '{}'", file.string());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
}  // namespace

ByteCorpus::ByteCorpus(const std::string& path, double heldout_fraction, const Tokenizer* tokenizer) : path_(path) {
  PRIMER_CHECK(std::filesystem::exists(path), "corpus '{}' does not exist", path);
  const bool directory = std::filesystem::is_directory(path);
  std::vector<std::filesystem::path> files;  // regular files only: symlinked aliases would repeat text
  if (directory) {
    for (const auto& e : std::filesystem::directory_iterator(path))
      if (e.is_regular_file() && !e.is_symlink()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  for (const auto& f : files) {
    const std::string text = read_file(f);
    if (tokenizer) {  // special-token strings stay plain text, as `primer tokenize` encodes documents
      const std::vector<int32_t> ids = tokenizer->encode(text, /*allow_special=*/false);
      tokens_.insert(tokens_.end(), ids.begin(), ids.end());
      tokens_.push_back(tokenizer->eos_id());
    } else {
      bytes_.insert(bytes_.end(), text.begin(), text.end());
      bytes_.push_back('\n');
    }
  }
  // Each file adds one separator: nothing more is nothing to train on (it read as a held-out part too small before).
  PRIMER_CHECK(size() > int64_t(files.size()), "corpus '{}' is empty ({}): name a file or directory with text in it",
               path, directory ? fmt::format("{} regular files, none holding a byte", files.size()) : "0 bytes");
  PRIMER_CHECK(heldout_fraction > 0 && heldout_fraction < 1, "held-out fraction {} must be in (0, 1)",
               heldout_fraction);
  split_ = int64_t(double(size()) * (1.0 - heldout_fraction));
}

void ByteCorpus::window(int64_t start, int64_t seq, int32_t* ids, int32_t* targets) const {
  for (int64_t t = 0; t < seq; ++t) {
    ids[t] = at(start + t);
    targets[t] = at(start + t + 1);
  }
}

void ByteCorpus::train_rows(uint64_t seed, int64_t first_row, int64_t rows, int64_t seq, std::vector<int32_t>& ids,
                            std::vector<int32_t>& targets) const {
  PRIMER_CHECK(split_ > seq + 1, "corpus '{}' has {} training bytes, fewer than one window of {}", path_, split_,
               seq + 1);
  ids.resize(size_t(rows * seq));
  targets.resize(size_t(rows * seq));
  const uint64_t key = key_for(seed, "data.train");
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t start = int64_t(uniform01(key, uint64_t(first_row + b)) * double(split_ - seq - 1));
    window(start, seq, &ids[size_t(b * seq)], &targets[size_t(b * seq)]);
  }
}

int64_t ByteCorpus::heldout_batches(int64_t batch, int64_t seq) const { return (heldout_bytes() - 1) / (batch * seq); }

void ByteCorpus::heldout_batch(int64_t index, int64_t batch, int64_t seq, std::vector<int32_t>& ids,
                               std::vector<int32_t>& targets) const {
  PRIMER_CHECK(index < heldout_batches(batch, seq), "held-out batch {} of {}", index, heldout_batches(batch, seq));
  ids.resize(size_t(batch * seq));
  targets.resize(size_t(batch * seq));
  for (int64_t b = 0; b < batch; ++b)
    window(split_ + (index * batch + b) * seq, seq, &ids[size_t(b * seq)], &targets[size_t(b * seq)]);
}

}  // namespace primer::data
