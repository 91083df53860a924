// What an atomic, crash-safe commit of files needs from POSIX: fsync of files and directories, a file
// written and synced in one call, and a checksum of a file read back while syncing it. Every call is
// checked; errors name the path and the errno text.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace primer::io {

struct FileDigest {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

// Reads `path` once, returning its size and CRC32C, and fsyncs it (so the digest describes what is durable).
FileDigest digest_and_sync(const std::string& path);
// Creates (truncating) `path` with `contents` and fsyncs it.
void write_file_synced(const std::string& path, std::string_view contents);
// Size and CRC32C of `path` without syncing (for verification on load).
FileDigest digest(const std::string& path);
// fsync on a directory makes the entries created, renamed or removed in it durable.
void sync_directory(const std::string& path);
// Moves directory `from` to the name `to` atomically. When `to` exists it is swapped with `from`
// (renameat2 RENAME_EXCHANGE), so `to` is never absent; the old contents then lie under `from`.
// Returns whether a swap happened.
bool rename_directory_atomically(const std::string& from, const std::string& to);

}  // namespace primer::io
