#include "recipes/inspect.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "core/check.h"
#include "recipes/checkpoint_layout.h"
#include "recipes/inspect_parts.h"

namespace primer::recipes {
namespace fs = std::filesystem;
using namespace inspect;
namespace {

constexpr const char* kWhatInspectReads =
    "expected a run directory (checkpoint-<step>/ directories), a training checkpoint (manifest.json of format "
    "primer-checkpoint), a Hugging Face model (config.json + model.safetensors or model.safetensors.index.json) or "
    "tokenized data (manifest.json of format primer-token-data, written by primer tokenize)";

bool is_hf_model(const fs::path& dir) {
  return fs::is_regular_file(dir / "config.json") &&
         (fs::is_regular_file(dir / "model.safetensors") || fs::is_regular_file(dir / "model.safetensors.index.json"));
}

// Every checkpoint of the run with its state; the newest complete one in full; verified, every complete one checked
// (the problems of the older ones join the run's) and an incomplete one counts as a problem.
json::Value describe_run(const fs::path& dir, bool verify) {
  json::Value r;
  r["kind"] = "run directory";
  r["path"] = dir.string();
  Verification v;
  json::Array list;
  std::vector<fs::path> complete;
  for (const auto& [step, path] : checkpoint_layout::checkpoint_dirs(dir)) {
    json::Value e;
    e["name"] = path.filename().string();
    e["step"] = step;
    try {
      checkpoint_layout::check_complete(path);
      e["state"] = "complete";
      complete.push_back(path);
    } catch (const Error& error) {
      e["state"] = std::string("incomplete: ") + error.what();
      if (verify) v.problem(std::string("incomplete checkpoint: ") + error.what());
    }
    list.push_back(std::move(e));
  }
  r["checkpoints"] = std::move(list);
  if (verify)
    for (size_t i = 0; i + 1 < complete.size(); ++i) {
      const json::Value older = describe_checkpoint(complete[i], true);
      v.count("older checkpoints verified");
      for (const json::Value& p : older.as_object().find("verify")->as_object().find("problems")->as_array())
        v.problem(p.as_string());
    }
  if (!complete.empty()) r["newest_checkpoint"] = describe_checkpoint(complete.back(), verify);
  if (is_hf_model(dir)) r["hugging_face_model"] = describe_hf_model(dir, verify);
  if (verify) r["verify"] = v.to_json();
  return r;
}

// The problems of every "verify" section of a report.
size_t count_problems(const json::Value& v) {
  size_t n = 0;
  if (v.is_object()) {
    for (const auto& [key, child] : v.as_object())
      n += key == "verify" ? child.as_object().find("problems")->as_array().size() : count_problems(child);
  } else if (v.is_array()) {
    for (const json::Value& child : v.as_array()) n += count_problems(child);
  }
  return n;
}

// ---- text rendering: "key: value" lines, nested objects indented, lists of objects as aligned tables ----

std::string inline_text(const json::Value& v) {
  switch (v.type()) {
    case json::Type::Null: return "-";
    case json::Type::String: return v.as_string();
    case json::Type::Array: {
      std::string out = "[";
      for (const json::Value& e : v.as_array()) out += (out.size() > 1 ? ", " : "") + inline_text(e);
      return out + "]";
    }
    default: return json::dump(v);
  }
}

void render(const std::string& key, const json::Value& v, size_t indent, std::string& out);

void render_table(const json::Array& rows, size_t indent, std::string& out) {
  std::vector<std::string> columns;
  for (const json::Value& row : rows)
    for (const auto& [key, value] : row.as_object())
      if (std::find(columns.begin(), columns.end(), key) == columns.end()) columns.push_back(key);
  std::vector<std::vector<std::string>> cells{columns};
  for (const json::Value& row : rows) {
    cells.emplace_back();
    for (const std::string& c : columns) {
      const json::Value* value = row.as_object().find(c);
      cells.back().push_back(value ? inline_text(*value) : "-");
    }
  }
  std::vector<size_t> width(columns.size(), 0);
  for (const auto& line : cells)
    for (size_t c = 0; c < line.size(); ++c) width[c] = std::max(width[c], line[c].size());
  for (const auto& line : cells) {
    std::string text(indent, ' ');
    for (size_t c = 0; c < line.size(); ++c)
      text += c + 1 < line.size() ? fmt::format("{:<{}}  ", line[c], width[c]) : line[c];
    out += text + "\n";
  }
}

void render(const std::string& key, const json::Value& v, size_t indent, std::string& out) {
  const std::string pad(indent, ' ');
  if (v.is_object()) {
    out += pad + key + ":\n";
    for (const auto& [k, child] : v.as_object()) render(k, child, indent + 2, out);
  } else if (v.is_array() && v.as_array().empty()) {
    out += pad + key + ": none\n";
  } else if (v.is_array() && v.as_array().front().is_object()) {
    out += fmt::format("{}{} ({}):\n", pad, key, v.as_array().size());
    render_table(v.as_array(), indent + 2, out);
  } else if (v.is_array() && v.as_array().front().is_string()) {
    out += pad + key + ":\n";
    for (const json::Value& item : v.as_array()) {
      std::string text = inline_text(item);  // a multi-line item (an HDF5 error stack) stays under its dash
      for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 1))
        text.insert(at + 1, pad + "    ");
      out += pad + "  - " + text + "\n";
    }
  } else if (v.is_string() && v.as_string().find('\n') != std::string::npos) {
    out += pad + key + ":\n";
    for (size_t start = 0, end; start < v.as_string().size(); start = end + 1) {
      end = std::min(v.as_string().find('\n', start), v.as_string().size());
      out += pad + "  " + v.as_string().substr(start, end - start) + "\n";
    }
  } else {
    out += pad + key + ": " + inline_text(v) + "\n";
  }
}

}  // namespace

json::Value inspect_path(const std::string& path, bool verify) {
  const fs::path p(path);
  PRIMER_CHECK(fs::exists(p), "inspect: '{}' does not exist", path);
  PRIMER_CHECK(fs::is_directory(p), "inspect: '{}' is a file; {}", path, kWhatInspectReads);
  if (fs::is_regular_file(p / checkpoint_layout::kManifestName)) {
    const std::string manifest = (p / checkpoint_layout::kManifestName).string();
    const json::Value doc = json::parse_file(manifest);
    const std::string format = json::Node(doc, manifest).string_or("format", "");
    if (format == "primer-checkpoint") return describe_checkpoint(p, verify);
    if (format == "primer-token-data") return describe_token_data(p, verify);
    PRIMER_FAIL("inspect: '{}' has format '{}'; {}", manifest, format, kWhatInspectReads);
  }
  if (!checkpoint_layout::checkpoint_dirs(p).empty()) return describe_run(p, verify);
  if (is_hf_model(p)) return describe_hf_model(p, verify);
  PRIMER_FAIL("inspect: '{}' holds none of what inspect reads; {}", path, kWhatInspectReads);
}

int run_inspect(const std::string& path, bool verify, bool as_json) {
  const json::Value report = inspect_path(path, verify);
  if (as_json) {
    fmt::print("{}\n", json::dump(report, 2));
  } else {
    std::string text;
    for (const auto& [key, value] : report.as_object()) render(key, value, 0, text);
    fmt::print("{}", text);
  }
  const size_t problems = count_problems(report);
  PRIMER_CHECK(problems == 0, "inspect --verify: {} problem{} in '{}' (listed above)", problems,
               problems == 1 ? "" : "s", path);
  return 0;
}

}  // namespace primer::recipes
