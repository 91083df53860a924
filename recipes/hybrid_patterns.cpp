#include "recipes/hybrid_patterns.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include "core/check.h"

namespace primer::recipes {
namespace {

int64_t ssm_count(int64_t layers, double ratio) {
  PRIMER_CHECK(ratio >= 0 && ratio <= 1, "hybrid ratio {} is outside [0, 1]", ratio);
  return std::llround(ratio * double(layers));
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream in(line);
  for (std::string cell; std::getline(in, cell, ',');) cells.push_back(cell);
  return cells;
}

}  // namespace

std::vector<MixerKind> uniform_pattern(int64_t layers, double ratio, MixerKind ssm) {
  const int64_t attention = layers - ssm_count(layers, ratio);
  std::vector<MixerKind> out(size_t(layers), ssm);
  for (int64_t j = 0; j < attention; ++j) out[size_t(j * layers / attention)] = MixerKind::Attention;
  return out;
}

std::vector<MixerKind> selective_pattern(const std::vector<double>& importance, double ratio, MixerKind ssm) {
  const int64_t layers = int64_t(importance.size());
  std::vector<size_t> order(importance.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return importance[a] < importance[b]; });
  std::vector<MixerKind> out(importance.size(), MixerKind::Attention);
  for (int64_t j = 0; j < ssm_count(layers, ratio); ++j) out[order[size_t(j)]] = ssm;
  return out;
}

std::vector<double> read_importance_csv(const std::string& path) {
  std::ifstream in(path);
  PRIMER_CHECK(in, "cannot read importance scores '{}'", path);
  std::string line;
  PRIMER_CHECK(std::getline(in, line), "{}: empty file, expected a header 'layer,...,importance'", path);
  const std::vector<std::string> header = split_csv(line);
  const auto column = std::find(header.begin(), header.end(), "importance");
  PRIMER_CHECK(!header.empty() && header[0] == "layer" && column != header.end(),
               "{}:1: header '{}' lacks the columns 'layer' (first) and 'importance'", path, line);
  const size_t col = size_t(column - header.begin());
  std::vector<double> importance;
  for (int64_t row = 2; std::getline(in, line); ++row) {
    if (line.empty()) continue;
    const std::vector<std::string> cells = split_csv(line);
    PRIMER_CHECK(cells.size() == header.size(), "{}:{}: {} cells, expected {}", path, row, cells.size(), header.size());
    PRIMER_CHECK(cells[0] == std::to_string(importance.size()), "{}:{}: layer '{}', expected {} (rows in layer order)",
                 path, row, cells[0], importance.size());
    try {
      importance.push_back(std::stod(cells[col]));
    } catch (const std::exception&) {
      PRIMER_FAIL("{}:{}: importance '{}' is not a number", path, row, cells[col]);
    }
  }
  PRIMER_CHECK(!importance.empty(), "{}: no layers listed", path);
  return importance;
}

}  // namespace primer::recipes
