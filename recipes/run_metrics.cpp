#include "recipes/run_metrics.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/check.h"
#include "core/io/json.h"

namespace primer::recipes {
namespace {

bool is_evaluation(const std::map<std::string, double>& record) { return record.count("eval_loss") != 0; }

// Keeps `record` as the resumed run's: earlier records after its step, and its own kind at its step, are superseded.
void append_superseding(std::vector<std::map<std::string, double>>& records, std::map<std::string, double> record) {
  const double step = record.at("step");
  const bool eval = is_evaluation(record);
  // Records stay in step order, so only the tail can be superseded.
  while (!records.empty() && records.back().at("step") > step) records.pop_back();
  for (auto it = records.end(); it != records.begin() && std::prev(it)->at("step") == step;) {
    --it;
    if (is_evaluation(*it) == eval) it = records.erase(it);
  }
  records.push_back(std::move(record));
}

}  // namespace

std::vector<std::pair<double, double>> RunMetrics::series(const std::string& key, const std::string& x_key) const {
  std::vector<std::pair<double, double>> out;
  for (const auto& r : records) {
    const auto x = r.find(x_key), y = r.find(key);
    if (x != r.end() && y != r.end()) out.emplace_back(x->second, y->second);
  }
  return out;
}

bool RunMetrics::any(const std::string& key) const {
  return std::any_of(records.begin(), records.end(), [&](const auto& r) { return r.count(key) != 0; });
}

RunMetrics read_run_metrics(const std::string& run_dir) {
  namespace fs = std::filesystem;
  PRIMER_CHECK(fs::exists(run_dir), "run directory '{}' does not exist", run_dir);
  RunMetrics m;
  m.path = fs::is_directory(run_dir) ? (fs::path(run_dir) / "metrics.jsonl").string() : run_dir;
  PRIMER_CHECK(fs::is_regular_file(m.path),
               "run directory '{}' has no metrics.jsonl (a `primer train` run writes it; a run with metrics_file set "
               "elsewhere: name that file)",
               run_dir);
  std::ifstream in(m.path);
  PRIMER_CHECK(in.good(), "cannot read metrics file '{}'", m.path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find_first_not_of(" \t\r") == std::string::npos) continue;
    json::Value row;
    try {
      row = json::parse(lines[i], m.path, int64_t(i) + 1);
    } catch (const std::exception&) {
      if (i + 1 == lines.size()) break;  // a torn last line: the run was killed while writing it
      throw;
    }
    PRIMER_CHECK(row.is_object(), "{}:{}: expected a JSON object per line, got {}", m.path, i + 1,
                 json::type_name(row.type()));
    std::map<std::string, double> record;
    for (const auto& [key, value] : row.as_object())
      if (value.is_number()) record[key] = value.as_double();
    PRIMER_CHECK(record.count("step") && row.as_object().find("step")->is_int(),
                 "{}:{}: the record has no integer 'step'", m.path, i + 1);
    append_superseding(m.records, std::move(record));
  }
  PRIMER_CHECK(!m.records.empty(), "metrics file '{}' holds no record (the run logged nothing yet)", m.path);
  return m;
}

}  // namespace primer::recipes
