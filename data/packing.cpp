#include "data/packing.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "core/check.h"

namespace primer::data {
namespace {

RowPlan pack_concat(std::span<const int64_t> docs, std::span<const int64_t> lengths, int64_t row_len) {
  RowPlan plan;
  int64_t filled = 0;  // tokens in the open row
  for (size_t i = 0; i < docs.size(); ++i) {
    for (int64_t begin = 0; begin < lengths[i];) {
      const int64_t take = std::min(lengths[i] - begin, row_len - filled);
      plan.pieces.push_back({docs[i], begin, take});
      begin += take;
      filled += take;
      if (filled == row_len) {
        plan.row_start.push_back(int64_t(plan.pieces.size()));
        filled = 0;
      }
    }
  }
  plan.pieces.resize(size_t(plan.row_start.back()));  // the remainder, shorter than a row, is dropped
  return plan;
}

// Rows as lists of indices into docs → the plan.
RowPlan from_bins(const std::vector<std::vector<size_t>>& bins, std::span<const int64_t> docs,
                  std::span<const int64_t> lengths, int64_t row_len) {
  RowPlan plan;
  for (const auto& bin : bins) {
    for (size_t i : bin) plan.pieces.push_back({docs[i], 0, std::min(lengths[i], row_len)});
    plan.row_start.push_back(int64_t(plan.pieces.size()));
  }
  return plan;
}

std::vector<std::vector<size_t>> bins_greedy(std::span<const int64_t> len, int64_t row_len) {
  std::multiset<std::pair<int64_t, size_t>> remaining;  // (length, index): ties resolve by index, deterministically
  for (size_t i = 0; i < len.size(); ++i) remaining.insert({std::min(len[i], row_len), i});
  std::vector<std::vector<size_t>> bins;
  while (!remaining.empty()) {
    std::vector<size_t>& bin = bins.emplace_back();
    int64_t room = row_len;
    for (;;) {
      auto fits = remaining.upper_bound({room, SIZE_MAX});  // first item longer than the room
      if (fits == remaining.begin()) break;
      --fits;  // the longest item that fits (the last index among equals)
      bin.push_back(fits->second);
      room -= fits->first;
      remaining.erase(fits);
    }
  }
  return bins;
}

std::vector<std::vector<size_t>> bins_best_fit(std::span<const int64_t> len, int64_t row_len) {
  std::vector<size_t> order(len.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return len[a] > len[b]; });
  std::vector<std::vector<size_t>> bins;
  std::set<std::pair<int64_t, size_t>> open;  // (room left, bin)
  for (size_t i : order) {
    const int64_t l = std::min(len[i], row_len);
    auto tightest = open.lower_bound({l, 0});  // the least room that still fits
    size_t bin;
    int64_t room;
    if (tightest == open.end()) {
      bin = bins.size();
      bins.emplace_back();
      room = row_len;
    } else {
      std::tie(room, bin) = *tightest;
      open.erase(tightest);
    }
    bins[bin].push_back(i);
    if (room - l > 0) open.insert({room - l, bin});
  }
  return bins;
}

std::vector<std::vector<size_t>> bins_next_fit(std::span<const int64_t> len, int64_t row_len) {
  std::vector<std::vector<size_t>> bins;
  int64_t room = 0;
  for (size_t i = 0; i < len.size(); ++i) {
    const int64_t l = std::min(len[i], row_len);
    if (bins.empty() || l > room) {
      bins.emplace_back();
      room = row_len;
    }
    bins.back().push_back(i);
    room -= l;
  }
  return bins;
}

}  // namespace

PackingMethod parse_packing_method(const std::string& name) {
  for (PackingMethod m : {PackingMethod::Concat, PackingMethod::Greedy, PackingMethod::BestFit, PackingMethod::Random,
                          PackingMethod::None})
    if (name == packing_method_name(m)) return m;
  PRIMER_FAIL("packing method '{}': expected concat, greedy, best_fit, random or none", name);
}

const char* packing_method_name(PackingMethod method) {
  switch (method) {
    case PackingMethod::Concat: return "concat";
    case PackingMethod::Greedy: return "greedy";
    case PackingMethod::BestFit: return "best_fit";
    case PackingMethod::Random: return "random";
    case PackingMethod::None: return "none";
  }
  return "?";
}

RowPlan pack(PackingMethod method, std::span<const int64_t> docs, std::span<const int64_t> lengths, int64_t row_len) {
  PRIMER_CHECK(docs.size() == lengths.size(), "pack: {} documents but {} lengths", docs.size(), lengths.size());
  PRIMER_CHECK(row_len > 0, "pack: row length must be positive, got {}", row_len);
  for (size_t i = 0; i < lengths.size(); ++i)
    PRIMER_CHECK(lengths[i] > 0, "pack: document {} has length {}", docs[i], lengths[i]);
  switch (method) {
    case PackingMethod::Concat: return pack_concat(docs, lengths, row_len);
    case PackingMethod::Greedy: return from_bins(bins_greedy(lengths, row_len), docs, lengths, row_len);
    case PackingMethod::BestFit: return from_bins(bins_best_fit(lengths, row_len), docs, lengths, row_len);
    case PackingMethod::Random: return from_bins(bins_next_fit(lengths, row_len), docs, lengths, row_len);
    case PackingMethod::None: {
      std::vector<std::vector<size_t>> bins(docs.size());
      for (size_t i = 0; i < docs.size(); ++i) bins[i] = {i};
      return from_bins(bins, docs, lengths, row_len);
    }
  }
  PRIMER_FAIL("pack: unknown method");
}

}  // namespace primer::data
