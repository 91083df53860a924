#include "data/bpe.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <queue>

#include "core/check.h"

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

// The per-thread word cache: piece bytes → ids. An open-addressing table of 32-byte slots (one cache line holds
// two) that keep short pieces and short results inline, so a hit usually costs one memory access. Bounded: it is
// cleared when half full. One model at a time per thread; switching models clears it.
class WordCache {
 public:
  static constexpr size_t kMaxPieceBytes = 255;

  void reset(uint64_t model) {
    owner_ = model;
    if (slots_.empty())
      slots_.resize(kSlots);
    else
      std::fill(slots_.begin(), slots_.end(), Slot{});
    used_ = 0;
    keys_.clear();
    ids_.clear();
  }
  uint64_t owner() const { return owner_; }
  void prefetch(uint64_t hash) const { __builtin_prefetch(&slots_[hash & kMask]); }

  // Appends the cached ids of `piece` to `out` and returns true, or returns false.
  bool find(std::string_view piece, uint64_t hash, std::vector<int32_t>& out) const {
    for (size_t i = hash & kMask;; i = (i + 1) & kMask) {
      const Slot& s = slots_[i];
      if (s.hash == 0) return false;
      if (s.hash == hash && s.key_length == piece.size() && std::memcmp(key_of(s), piece.data(), piece.size()) == 0) {
        const int32_t* ids = s.ids_length <= kInlineIds ? s.ids.inline_ids : ids_.data() + s.ids.offset;
        out.insert(out.end(), ids, ids + s.ids_length);
        return true;
      }
    }
  }

  void insert(std::string_view piece, uint64_t hash, const int32_t* ids, size_t count) {
    if (count > UINT8_MAX) return;
    if (used_ >= kSlots / 2) reset(owner_);
    size_t i = hash & kMask;
    while (slots_[i].hash != 0) i = (i + 1) & kMask;
    Slot& s = slots_[i];
    s.hash = hash;
    s.key_length = uint8_t(piece.size());
    s.ids_length = uint8_t(count);
    if (piece.size() <= kInlineKey) {
      std::memcpy(s.key, piece.data(), piece.size());
    } else {
      const auto offset = uint32_t(keys_.size());
      std::memcpy(s.key, &offset, sizeof offset);
      keys_.append(piece);
    }
    if (count <= kInlineIds) {
      std::copy(ids, ids + count, s.ids.inline_ids);
    } else {
      s.ids.offset = uint32_t(ids_.size());
      ids_.insert(ids_.end(), ids, ids + count);
    }
    ++used_;
  }

 private:
  static constexpr size_t kSlots = size_t(1) << 18, kMask = kSlots - 1, kInlineKey = 14, kInlineIds = 2;
  struct Slot {
    uint64_t hash = 0;  // 0: empty (hashes are made odd)
    uint8_t key_length = 0, ids_length = 0;
    char key[kInlineKey] = {};  // the piece, or when longer its offset into keys_ (memcpy'd: no alignment here)
    union {
      int32_t inline_ids[kInlineIds];
      uint32_t offset;  // into ids_
    } ids{};
  };
  static_assert(sizeof(Slot) == 32);

  const char* key_of(const Slot& s) const {
    if (s.key_length <= kInlineKey) return s.key;
    uint32_t offset;
    std::memcpy(&offset, s.key, sizeof offset);
    return keys_.data() + offset;
  }

  uint64_t owner_ = 0;
  std::vector<Slot> slots_;
  size_t used_ = 0;
  std::string keys_;
  std::vector<int32_t> ids_;
};

// A fast 64-bit hash of a short byte string (8 bytes at a time, then a strong final mix); never 0.
uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  if (i < s.size()) {  // the last 1-7 bytes, without a variable-length memcpy call
    uint64_t w = 0;
    for (size_t k = i; k < s.size(); ++k) w = w << 8 | static_cast<unsigned char>(s[k]);
    h = (h ^ w) * 0x94d049bb133111ebull;
  }
  return mix(h) | 1;
}

WordCache& cache_for(uint64_t model) {
  thread_local WordCache cache;
  if (cache.owner() != model) cache.reset(model);
  return cache;
}

std::atomic<uint64_t> next_instance{1};

}  // namespace

BpeModel::BpeModel(Vocab vocab, const std::array<int32_t, 256>& byte_ids, const std::vector<Merge>& merges,
                   bool ignore_merges)
    : vocab_(std::move(vocab)), byte_ids_(byte_ids), ignore_merges_(ignore_merges), instance_(next_instance++) {
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

size_t BpeModel::merge_by_scan(std::span<int32_t> symbols) const {
  size_t n = symbols.size();
  PRIMER_CHECK(n <= kScanLimit, "BpeModel::merge_by_scan: {} symbols, at most {} expected", n, kScanLimit);
  if (n < 2) return n;
  std::array<int32_t, kScanLimit> ranks;  // ranks[i]: the merge of symbols i and i + 1
  for (size_t i = 0; i + 1 < n; ++i) ranks[i] = rank_of(symbols[i], symbols[i + 1]);
  while (n > 1) {
    const auto best = std::min_element(ranks.begin(), ranks.begin() + std::ptrdiff_t(n - 1));  // leftmost of equals
    if (*best == kNoMerge) break;
    const auto i = size_t(best - ranks.begin());
    symbols[i] = find_merge(symbols[i], symbols[i + 1])->merged;
    std::copy(symbols.begin() + std::ptrdiff_t(i + 2), symbols.begin() + std::ptrdiff_t(n),
              symbols.begin() + std::ptrdiff_t(i + 1));
    std::copy(ranks.begin() + std::ptrdiff_t(i + 1), ranks.begin() + std::ptrdiff_t(n - 1),
              ranks.begin() + std::ptrdiff_t(i));
    --n;
    if (i > 0) ranks[i - 1] = rank_of(symbols[i - 1], symbols[i]);
    if (i + 1 < n) ranks[i] = rank_of(symbols[i], symbols[i + 1]);
  }
  return n;
}

size_t BpeModel::merge_by_queue(std::span<int32_t> symbols) const {
  const size_t n = symbols.size();
  if (n < 2) return n;
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
  return size_t(std::remove(symbols.begin(), symbols.end(), -1) - symbols.begin());
}

void BpeModel::encode_uncached(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (const auto it = vocab_.find(piece); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const size_t before = out.size();
  for (const char c : piece) out.push_back(byte_ids_[static_cast<unsigned char>(c)]);
  const std::span<int32_t> symbols(out.data() + before, piece.size());
  out.resize(before + (piece.size() <= kScanLimit ? merge_by_scan(symbols) : merge_by_queue(symbols)));
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  const size_t end = piece.size();
  encode_pieces(piece, std::span<const size_t>(&end, 1), out);
}

void BpeModel::encode_pieces(std::string_view text, std::span<const size_t> ends, std::vector<int32_t>& out) const {
  WordCache& cache = cache_for(instance_);
  // Hash every piece and prefetch its cache slot first, so that the slots' memory accesses overlap.
  constexpr size_t kBatch = 64;
  std::array<uint64_t, kBatch> hashes;
  for (size_t first = 0; first < ends.size(); first += kBatch) {
    const size_t count = std::min(kBatch, ends.size() - first);
    size_t start = first == 0 ? 0 : ends[first - 1];
    for (size_t k = 0; k < count; ++k) {
      const std::string_view piece = text.substr(start, ends[first + k] - start);
      hashes[k] = piece.size() > 1 && piece.size() <= WordCache::kMaxPieceBytes ? hash_bytes(piece) : 0;
      if (hashes[k] != 0) cache.prefetch(hashes[k]);
      start = ends[first + k];
    }
    start = first == 0 ? 0 : ends[first - 1];
    for (size_t k = 0; k < count; ++k) {
      const std::string_view piece = text.substr(start, ends[first + k] - start);
      start = ends[first + k];
      if (piece.size() == 1) {
        out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
      } else if (hashes[k] == 0) {
        encode_uncached(piece, out);
      } else if (!cache.find(piece, hashes[k], out)) {
        const size_t before = out.size();
        encode_uncached(piece, out);
        cache.insert(piece, hashes[k], out.data() + before, out.size() - before);
      }
    }
  }
}

}  // namespace primer::data
