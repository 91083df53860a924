// A run's metrics log (metrics.jsonl, one JSON object per line, written by the train loop) read back for plots.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace primer::recipes {

struct RunMetrics {
  std::string path;  // the metrics file read
  // The numeric fields of each record, in the order written; `step` is in every record. Records superseded by a
  // resume are gone: the train loop drops them when it resumes, and reading drops any it left (see read_run_metrics).
  std::vector<std::map<std::string, double>> records;

  // (x, y) for every record holding `key`, x being `x_key` ("step" or "tokens"); records without x_key are skipped.
  std::vector<std::pair<double, double>> series(const std::string& key, const std::string& x_key) const;
  bool any(const std::string& key) const;  // whether some record holds `key`
};

// Reads `<run_dir>/metrics.jsonl` (or `run_dir` itself when it names a file). A record whose step is below an
// earlier one's (a resume whose log was not trimmed) discards the earlier records after its step, and a record
// repeating the kind (training or evaluation) of an earlier one at the same step replaces it, so that every step
// appears once per kind, as the resumed run wrote it. Errors name the directory, the file and the line: a missing
// directory or log, a log without a record, a line that is not a JSON object with an integer `step`. A torn last
// line (a run killed mid-write) is skipped.
RunMetrics read_run_metrics(const std::string& run_dir);

}  // namespace primer::recipes
