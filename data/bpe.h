// The byte-level BPE model: turns one pre-tokenizer piece (raw bytes) into token ids by applying ranked merges,
// lowest rank first and leftmost first among equal ranks, as Hugging Face `tokenizers` does. Works on token ids
// throughout (the byte-to-unicode mapping of tokenizer.json is undone when loading). Results are cached per
// thread and per model, so encode() is const and safe to call from many threads.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace primer::data {

class BpeModel {
 public:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;  // raw bytes → id
  struct Merge {
    int32_t left, right, merged;
  };
  // vocab: the model's tokens as raw bytes; byte_ids[b] is the token of the single byte b; merges in rank order.
  // ignore_merges: a piece that is itself a token is that token (Llama-3), without applying merges.
  BpeModel(Vocab vocab, const std::array<int32_t, 256>& byte_ids, const std::vector<Merge>& merges, bool ignore_merges);

  // Appends the ids of `piece` to `out`.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;
  // The same for consecutive pieces of `text`: piece i ends at ends[i] and starts where piece i - 1 ended (the
  // first at 0). Faster than one call per piece: cache lookups are prefetched.
  void encode_pieces(std::string_view text, std::span<const size_t> ends, std::vector<int32_t>& out) const;
  // The token that is exactly these bytes.
  std::optional<int32_t> find(std::string_view bytes) const;

  // Merges by repeated linear scans (pieces up to kScanLimit bytes: quadratic, but fastest for words) or with a
  // priority queue (longer ones), in place; returns the number of symbols left. Public for tests, which check that
  // the two agree.
  static constexpr size_t kScanLimit = 128;
  size_t merge_by_scan(std::span<int32_t> symbols) const;
  size_t merge_by_queue(std::span<int32_t> symbols) const;

 private:
  struct MergeSlot {
    uint64_t pair = kEmpty;  // left << 32 | right
    int32_t rank = 0, merged = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  static constexpr int32_t kNoMerge = INT32_MAX;

  // The merge of (left, right): its rank (kNoMerge if none) and result.
  const MergeSlot* find_merge(int32_t left, int32_t right) const;
  int32_t rank_of(int32_t left, int32_t right) const;
  void encode_uncached(std::string_view piece, std::vector<int32_t>& out) const;  // ignore_merges, then merges

  Vocab vocab_;
  std::array<int32_t, 256> byte_ids_;
  std::vector<MergeSlot> merges_;  // open addressing, power-of-two size
  uint64_t merge_mask_ = 0;
  bool ignore_merges_;
  uint64_t instance_;  // identifies this model's entries in the per-thread caches
};

}  // namespace primer::data
