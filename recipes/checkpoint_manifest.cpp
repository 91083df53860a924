#include "recipes/checkpoint_manifest.h"

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace primer::recipes {

using nlohmann::json;

std::string manifest_to_json(const Manifest& m) {
  json files = json::array();
  for (const ManifestFile& f : m.files)
    files.push_back({{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}, {"crc32c", f.crc32c}});
  json parameters = json::array();
  for (const ManifestParameter& p : m.parameters)
    parameters.push_back({{"name", p.name}, {"shape", p.shape}, {"trainable", p.trainable}});
  const json doc = {{"format", "primer-checkpoint"}, {"format_version", m.format_version},
                    {"step", m.step},                {"world_size", m.world_size},
                    {"files", files},                {"parameters", parameters}};
  return doc.dump(1) + "\n";
}

Manifest parse_manifest(const std::string& text, const std::string& source) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  PRIMER_CHECK(!doc.is_discarded() && doc.is_object(), "checkpoint manifest '{}' is not valid JSON", source);
  auto field = [&](const json& object, const char* key, const std::string& where) -> const json& {
    PRIMER_CHECK(object.is_object() && object.contains(key), "checkpoint manifest '{}': {} lacks key '{}'", source,
                 where, key);
    return object.at(key);
  };
  // nlohmann's type errors carry no file name: rethrow them naming the manifest.
  try {
    PRIMER_CHECK(field(doc, "format", "the document") == "primer-checkpoint",
                 "checkpoint manifest '{}': 'format' is not \"primer-checkpoint\"", source);
    Manifest m;
    m.format_version = field(doc, "format_version", "the document").get<int>();
    PRIMER_CHECK(m.format_version == kCheckpointFormatVersion,
                 "checkpoint manifest '{}' has format_version {}, this build reads version {}", source,
                 m.format_version, kCheckpointFormatVersion);
    m.step = field(doc, "step", "the document").get<int64_t>();
    m.world_size = field(doc, "world_size", "the document").get<int>();
    for (const json& f : field(doc, "files", "the document")) {
      const std::string where = "a 'files' entry";
      m.files.push_back({field(f, "name", where).get<std::string>(), field(f, "rank", where).get<int>(),
                         field(f, "bytes", where).get<uint64_t>(), field(f, "crc32c", where).get<uint32_t>()});
    }
    for (const json& p : field(doc, "parameters", "the document")) {
      const std::string where = "a 'parameters' entry";
      m.parameters.push_back({field(p, "name", where).get<std::string>(), field(p, "shape", where).get<Shape>(),
                              field(p, "trainable", where).get<bool>()});
    }
    PRIMER_CHECK(m.world_size >= 1 && int(m.files.size()) == m.world_size,
                 "checkpoint manifest '{}' lists {} files for world size {}", source, m.files.size(), m.world_size);
    return m;
  } catch (const json::exception& e) {
    PRIMER_FAIL("checkpoint manifest '{}' is malformed: {}", source, e.what());
  }
}

}  // namespace primer::recipes
