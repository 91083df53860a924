#include "recipes/checkpoint_manifest.h"

#include "core/check.h"
#include "core/io/json.h"

namespace primer::recipes {

std::string manifest_to_json(const Manifest& m) {
  json::Array files;
  for (const ManifestFile& f : m.files) {
    json::Value entry;
    entry["name"] = f.name;
    entry["rank"] = f.rank;
    entry["bytes"] = int64_t(f.bytes);
    entry["crc32c"] = int64_t(f.crc32c);
    files.push_back(std::move(entry));
  }
  json::Array parameters;
  for (const ManifestParameter& p : m.parameters) {
    json::Array shape;
    for (int64_t d : p.shape) shape.push_back(d);
    json::Value entry;
    entry["name"] = p.name;
    entry["shape"] = std::move(shape);
    entry["trainable"] = p.trainable;
    parameters.push_back(std::move(entry));
  }
  json::Value doc;
  doc["format"] = "primer-checkpoint";
  doc["format_version"] = m.format_version;
  doc["step"] = m.step;
  doc["world_size"] = m.world_size;
  doc["files"] = std::move(files);
  doc["parameters"] = std::move(parameters);
  return json::dump(doc, 1) + "\n";
}

Manifest parse_manifest(const std::string& text, const std::string& source) {
  const json::Value doc = json::parse(text, source);  // errors name the manifest and line:column
  const json::Node root(doc, source);
  PRIMER_CHECK(root.at("format").as_string() == "primer-checkpoint",
               "checkpoint manifest '{}': 'format' is not \"primer-checkpoint\"", source);
  Manifest m;
  m.format_version = int(root.at("format_version").as_int());
  PRIMER_CHECK(m.format_version >= 1 && m.format_version <= kCheckpointFormatVersion,
               "checkpoint manifest '{}' has format_version {}, this build reads versions 1 to {}", source,
               m.format_version, kCheckpointFormatVersion);
  m.step = root.at("step").as_int();
  m.world_size = int(root.at("world_size").as_int());
  const json::Node files = root.at("files");
  for (size_t i = 0; i < files.size(); ++i) {
    const json::Node f = files.at(i);
    m.files.push_back({f.at("name").as_string(), int(f.at("rank").as_int()), uint64_t(f.at("bytes").as_int()),
                       uint32_t(f.at("crc32c").as_int())});
  }
  const json::Node params = root.at("parameters");
  for (size_t i = 0; i < params.size(); ++i) {
    const json::Node p = params.at(i);
    Shape shape;
    const json::Node dims = p.at("shape");
    for (size_t d = 0; d < dims.size(); ++d) shape.push_back(dims.at(d).as_int());
    m.parameters.push_back({p.at("name").as_string(), shape, p.at("trainable").as_bool()});
  }
  PRIMER_CHECK(m.world_size >= 1 && int(m.files.size()) == m.world_size,
               "checkpoint manifest '{}' lists {} files for world size {}", source, m.files.size(), m.world_size);
  return m;
}

}  // namespace primer::recipes
