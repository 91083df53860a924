// Where things live in a checkpoint directory (docs/checkpoints.md, "Layout"): the directory and file names, the
// datasets of a rank's HDF5 file and its chunk index, and the checks a directory passes before its data is read
// (complete: manifest and file sizes; intact: CRC32C of every file). Shared by the reader and writer
// (recipes/checkpoint.h) and `primer inspect`.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/io/hdf5_file.h"
#include "recipes/checkpoint_manifest.h"

namespace primer::recipes::checkpoint_layout {

inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kFinalPrefix = "checkpoint-";
inline constexpr const char* kParams = "/params/";
inline constexpr const char* kFirstMoment = "/optim/adamw/m/";
inline constexpr const char* kSecondMoment = "/optim/adamw/v/";
inline constexpr const char* kDataCursor = "/state/data_cursor";
inline constexpr const char* kResolvedConfig = "/state/resolved_config";
inline constexpr const char* kChunkIndex = "/chunks";

std::string rank_file_name(int rank);                            // "rank00000.h5"
std::string chunk_key(const std::string& name, int64_t offset);  // "<name>#<offset>", after kParams
// "checkpoint-<step>" → step; nothing for any other name.
std::optional<int64_t> checkpoint_step(const std::string& dir_name);

// ".checkpoint-<step>.tmp-<pid>" (a save in progress) or ".checkpoint-<step>.trash-<pid>" (a rotation in progress)
// → the pid of the process that owns it; nothing for any other name.
std::optional<int64_t> leftover_owner(const std::string& name);

// Every checkpoint-<step> directory of `output_dir` (complete or not), oldest step first; none when it is absent.
std::vector<std::pair<int64_t, std::filesystem::path>> checkpoint_dirs(const std::filesystem::path& output_dir);

Manifest read_manifest(const std::filesystem::path& dir);
// A directory is a complete checkpoint when its manifest parses, agrees with the directory's step, and every file it
// lists exists with the recorded size; errors say which of these fails.
Manifest check_complete(const std::filesystem::path& dir);
// The file's size and CRC32C against the manifest (one read of the file); the error names the checkpoint and file.
void verify_checksum(const std::filesystem::path& dir, const ManifestFile& file);

// A stored run of a parameter's flattened elements: which file holds it and which elements it covers.
struct StoredChunk {
  size_t file = 0;
  std::string key;  // dataset name after kParams (and the moments' prefixes)
  int64_t offset = 0, count = 0;
  bool moments = false;
};
// Every stored run per parameter name, from each file's index (format 1: one whole parameter per dataset).
std::map<std::string, std::vector<StoredChunk>> stored_chunks(const std::vector<io::Hdf5File>& files,
                                                              const Manifest& m);

}  // namespace primer::recipes::checkpoint_layout
