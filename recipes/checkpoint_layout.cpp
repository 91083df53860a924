#include "recipes/checkpoint_layout.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "core/io/durable_file.h"
#include "core/io/json.h"

namespace primer::recipes::checkpoint_layout {
namespace fs = std::filesystem;
namespace {

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string rank_file_name(int rank) { return fmt::format("rank{:05d}.h5", rank); }

std::string chunk_key(const std::string& name, int64_t offset) { return fmt::format("{}#{}", name, offset); }

std::optional<int64_t> checkpoint_step(const std::string& dir_name) {
  const std::string prefix = kFinalPrefix;
  if (dir_name.rfind(prefix, 0) != 0 || !all_digits(dir_name.substr(prefix.size()))) return std::nullopt;
  return std::stoll(dir_name.substr(prefix.size()));
}

std::optional<int64_t> leftover_owner(const std::string& name) {
  if (name.rfind(".checkpoint-", 0) != 0) return std::nullopt;
  for (const std::string marker : {".tmp-", ".trash-"}) {
    const size_t at = name.rfind(marker);
    if (at != std::string::npos && all_digits(name.substr(at + marker.size())))
      return std::stoll(name.substr(at + marker.size()));
  }
  return std::nullopt;
}

std::vector<std::pair<int64_t, fs::path>> checkpoint_dirs(const fs::path& output_dir) {
  std::vector<std::pair<int64_t, fs::path>> dirs;
  if (!fs::is_directory(output_dir)) return dirs;
  std::error_code ec;
  for (fs::directory_iterator it(output_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto step = checkpoint_step(it->path().filename().string());
    if (step && fs::is_directory(it->path())) dirs.emplace_back(*step, it->path());
  }
  PRIMER_CHECK(!ec, "cannot list checkpoint directory '{}': {}", output_dir.string(), ec.message());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

Manifest read_manifest(const fs::path& dir) {
  const fs::path path = dir / kManifestName;
  std::ifstream in(path, std::ios::binary);
  PRIMER_CHECK(in.good(), "checkpoint '{}' has no readable {}", dir.string(), kManifestName);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_manifest(text.str(), path.string());
}

Manifest check_complete(const fs::path& dir) {
  Manifest m = read_manifest(dir);
  if (const auto step = checkpoint_step(dir.filename().string()))
    PRIMER_CHECK(*step == m.step, "checkpoint '{}': manifest says step {}", dir.string(), m.step);
  for (const ManifestFile& f : m.files) {
    std::error_code ec;
    const uint64_t size = fs::file_size(dir / f.name, ec);
    PRIMER_CHECK(!ec, "checkpoint '{}': file '{}' listed in the manifest is missing ({})", dir.string(), f.name,
                 ec.message());
    PRIMER_CHECK(size == f.bytes, "checkpoint '{}': file '{}' has {} bytes, the manifest records {} (truncated?)",
                 dir.string(), f.name, size, f.bytes);
  }
  return m;
}

void verify_checksum(const fs::path& dir, const ManifestFile& f) {
  const io::FileDigest d = io::digest((dir / f.name).string());
  PRIMER_CHECK(d.bytes == f.bytes && d.crc32c == f.crc32c,
               "checkpoint '{}': file '{}' is corrupted: {} bytes with CRC32C {:08x}, the manifest records {} bytes "
               "with CRC32C {:08x}",
               dir.string(), f.name, d.bytes, d.crc32c, f.bytes, f.crc32c);
}

std::map<std::string, std::vector<StoredChunk>> stored_chunks(const std::vector<io::Hdf5File>& files,
                                                              const Manifest& m) {
  std::map<std::string, std::vector<StoredChunk>> out;
  for (size_t f = 0; f < files.size(); ++f) {
    if (m.format_version == 1) {
      for (const ManifestParameter& p : m.parameters)
        out[p.name].push_back({f, p.name, 0, shape_numel(p.shape), files[f].contains(kFirstMoment + p.name)});
      continue;
    }
    const std::string where = files[f].path() + kChunkIndex;
    const json::Value index = json::parse(files[f].read_bytes(kChunkIndex), where);
    const json::Node root(index, where);
    for (size_t i = 0; i < root.size(); ++i) {
      const json::Node e = root.at(i);
      const std::string name = e.at("name").as_string();
      const int64_t offset = e.at("offset").as_int();
      out[name].push_back({f, chunk_key(name, offset), offset, e.at("count").as_int(), e.at("moments").as_bool()});
    }
  }
  return out;
}

}  // namespace primer::recipes::checkpoint_layout
