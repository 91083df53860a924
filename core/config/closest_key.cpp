// The "did you mean" of every validated input: the known key nearest to an unknown one.
#include <algorithm>
#include <cstdint>

#include "core/config/config.h"

namespace primer::config {
namespace {

// Optimal string alignment distance: edits, insertions, deletions and adjacent transpositions.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::string leaf(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

}  // namespace

std::string closest_key(const std::string& key, const std::vector<std::string>& candidates) {
  std::string best;
  std::pair<size_t, size_t> best_score{SIZE_MAX, SIZE_MAX};
  for (const auto& c : candidates) {
    size_t whole = edit_distance(key, c);
    std::pair<size_t, size_t> score{std::min(whole, edit_distance(leaf(key), leaf(c))), whole};
    if (score < best_score) best_score = score, best = c;
  }
  size_t threshold = std::max<size_t>(2, leaf(key).size() / 3);
  return best_score.first <= threshold ? best : "";
}

}  // namespace primer::config
