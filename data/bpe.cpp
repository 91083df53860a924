#include "data/bpe.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <queue>

namespace primer::data {

namespace {

uint64_t pair_key(int32_t left, int32_t right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }

uint64_t mix(uint64_t x) {  // splitmix64 finalizer: spreads the pair keys over the table
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Pieces up to this many bytes merge by linear scans (quadratic, but fastest for words); longer ones use a queue.
constexpr size_t kScanLimit = 128;

// The per-thread word cache: piece bytes → a range of `ids`. Bounded: cleared when full. One model at a time per
// thread; switching models clears it.
struct WordCache {
  static constexpr size_t kMaxEntries = 1 << 17, kMaxPieceBytes = 256;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Range {
    uint32_t offset, length;
  };
  uint64_t owner = 0;
  std::unordered_map<std::string, Range, Hash, std::equal_to<>> ranges;
  std::vector<int32_t> ids;

  void reset(uint64_t model) {
    owner = model;
    ranges.clear();
    ids.clear();
  }
};

WordCache& cache_for(uint64_t model) {
  thread_local WordCache cache;
  if (cache.owner != model) cache.reset(model);
  return cache;
}

std::atomic<uint64_t> next_instance{1};

}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab, const std::array<int32_t, 256>& byte_ids,
                   const std::vector<Merge>& merges, bool ignore_merges)
    : vocab_(vocab.begin(), vocab.end()), byte_ids_(byte_ids), ignore_merges_(ignore_merges),
      instance_(next_instance++) {
  const size_t slots = std::bit_ceil(std::max<size_t>(16, merges.size() * 2));
  merges_.assign(slots, MergeSlot{});
  merge_mask_ = slots - 1;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& m = merges[rank];
    const uint64_t key = pair_key(m.left, m.right);
    for (uint64_t i = mix(key) & merge_mask_;; i = (i + 1) & merge_mask_) {
      if (merges_[i].pair == key) break;  // a repeated pair keeps its first (lowest) rank
      if (merges_[i].pair == kEmpty) {
        merges_[i] = {key, int32_t(rank), m.merged};
        break;
      }
    }
  }
}

std::optional<int32_t> BpeModel::find(std::string_view bytes) const {
  const auto it = vocab_.find(bytes);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const BpeModel::MergeSlot* BpeModel::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  for (uint64_t i = mix(key) & merge_mask_;; i = (i + 1) & merge_mask_) {
    const MergeSlot& slot = merges_[i];
    if (slot.pair == key) return &slot;
    if (slot.pair == kEmpty) return nullptr;
  }
}

int32_t BpeModel::rank_of(int32_t left, int32_t right) const {
  const MergeSlot* slot = find_merge(left, right);
  return slot ? slot->rank : kNoMerge;
}

void BpeModel::merge_by_scan(std::vector<int32_t>& symbols) const {
  if (symbols.size() < 2) return;
  std::vector<int32_t> ranks(symbols.size() - 1);  // ranks[i]: the merge of symbols i and i + 1
  for (size_t i = 0; i + 1 < symbols.size(); ++i) ranks[i] = rank_of(symbols[i], symbols[i + 1]);
  while (!ranks.empty()) {
    const auto best = std::min_element(ranks.begin(), ranks.end());  // the first of equal minima: leftmost
    if (*best == kNoMerge) break;
    const size_t i = size_t(best - ranks.begin());
    symbols[i] = find_merge(symbols[i], symbols[i + 1])->merged;
    symbols.erase(symbols.begin() + std::ptrdiff_t(i) + 1);
    ranks.erase(ranks.begin() + std::ptrdiff_t(i));
    if (i > 0) ranks[i - 1] = rank_of(symbols[i - 1], symbols[i]);
    if (i < ranks.size()) ranks[i] = rank_of(symbols[i], symbols[i + 1]);
  }
}

void BpeModel::merge_by_queue(std::vector<int32_t>& symbols) const {
  const size_t n = symbols.size();
  if (n < 2) return;
  // A doubly linked list over the symbols; merged-away symbols are marked dead (id -1).
  std::vector<int64_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) prev[i] = int64_t(i) - 1, next[i] = int64_t(i) + 1;
  struct Candidate {
    int32_t rank;
    int64_t pos;  // the left symbol's original position: the tie-break (leftmost first)
    int32_t left, right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto push = [&](int64_t pos) {
    const int64_t right = next[size_t(pos)];
    if (right >= int64_t(n)) return;
    const int32_t rank = rank_of(symbols[size_t(pos)], symbols[size_t(right)]);
    if (rank != kNoMerge) queue.push({rank, pos, symbols[size_t(pos)], symbols[size_t(right)]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int64_t(i));
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const auto pos = size_t(c.pos);
    const int64_t right = next[pos];
    // Stale: either symbol changed or was merged away since this candidate was queued.
    if (symbols[pos] != c.left || right >= int64_t(n) || symbols[size_t(right)] != c.right) continue;
    symbols[pos] = find_merge(c.left, c.right)->merged;
    symbols[size_t(right)] = -1;
    next[pos] = next[size_t(right)];
    if (next[pos] < int64_t(n)) prev[size_t(next[pos])] = int64_t(pos);
    if (prev[pos] >= 0) push(prev[pos]);
    push(int64_t(pos));
  }
  symbols.erase(std::remove(symbols.begin(), symbols.end(), -1), symbols.end());
}

void BpeModel::encode_uncached(std::string_view piece, std::vector<int32_t>& out) const {
  std::vector<int32_t> symbols(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) symbols[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
  if (symbols.size() <= kScanLimit) merge_by_scan(symbols);
  else merge_by_queue(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (ignore_merges_) {
    const auto it = vocab_.find(piece);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() > WordCache::kMaxPieceBytes) {
    encode_uncached(piece, out);
    return;
  }
  WordCache& cache = cache_for(instance_);
  if (const auto it = cache.ranges.find(piece); it != cache.ranges.end()) {
    const auto* first = cache.ids.data() + it->second.offset;
    out.insert(out.end(), first, first + it->second.length);
    return;
  }
  const size_t before = out.size();
  encode_uncached(piece, out);
  if (cache.ranges.size() >= WordCache::kMaxEntries) cache.reset(instance_);
  cache.ranges.emplace(std::string(piece), WordCache::Range{uint32_t(cache.ids.size()), uint32_t(out.size() - before)});
  cache.ids.insert(cache.ids.end(), out.begin() + std::ptrdiff_t(before), out.end());
}

}  // namespace primer::data
