// A small RAII wrapper over the HDF5 C API for checkpoint and token shards. Every HDF5 call is checked; a
// failure throws primer::Error with file:line, the call, the HDF5 file and object, and the HDF5 error stack text.
// Files use the newest format (metadata blocks carry checksums). By default datasets are chunked with the
// Fletcher32 filter, so corrupted bytes in a chunk fail its read instead of returning wrong numbers.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace primer::io {

// How a dataset's elements are stored.
enum class Hdf5Layout {
  Checked,     // ~1 MiB chunks with the Fletcher32 filter: a corrupted chunk fails its read (checkpoints)
  Contiguous,  // one unfiltered block that a memory map can serve (data_offset); integrity is the caller's
  Compressed,  // Checked plus byte-shuffle and deflate (level 1)
};

class Hdf5File {
 public:
  // Truncates an existing file. alignment > 0: every object of at least that many bytes starts at a multiple
  // of it (so that memory-mapped contiguous datasets are aligned for their element type).
  static Hdf5File create(const std::string& path, uint64_t alignment = 0);
  static Hdf5File open_read_only(const std::string& path);
  ~Hdf5File();  // closes without throwing; call close() to see errors
  Hdf5File(Hdf5File&& other) noexcept;
  Hdf5File& operator=(Hdf5File&&) = delete;
  Hdf5File(const Hdf5File&) = delete;
  Hdf5File& operator=(const Hdf5File&) = delete;

  void close();  // flushes and closes; the file is complete on return (not yet fsynced)
  const std::string& path() const { return path_; }

  // Datasets by absolute path ("/params/model.embed_tokens.weight"); missing parent groups are created.
  // T is float, uint8_t, int32_t or int64_t. `data` holds numel(shape) values in row-major order.
  template <class T>
  void write(const std::string& name, const Shape& shape, const T* data, Hdf5Layout layout = Hdf5Layout::Checked);
  // Reads a dataset whose shape must equal `expected` into `out` (numel(expected) values), converting from
  // the stored type if it differs.
  template <class T> void read(const std::string& name, const Shape& expected, T* out) const;
  // The file offset of a dataset's elements when they lie in one allocated, unfiltered block stored exactly as
  // T's little-endian type on a little-endian host, so that a memory map of the file can serve them without
  // a copy; nullopt otherwise (chunked, compressed, empty, another type: use read()).
  template <class T> std::optional<uint64_t> data_offset(const std::string& name) const;
  Shape shape_of(const std::string& name) const;
  bool contains(const std::string& name) const;  // every group on the way and the object itself exist

  void write_bytes(const std::string& name, std::string_view bytes);  // a uint8 dataset
  std::string read_bytes(const std::string& name) const;

  // Scalar attributes of an existing group or dataset. T is int64_t or uint64_t.
  template <class T> void set_attribute(const std::string& object, const std::string& attribute, T value);
  template <class T> T attribute(const std::string& object, const std::string& attribute) const;
  void set_string_attribute(const std::string& object, const std::string& attribute, std::string_view value);
  std::string string_attribute(const std::string& object, const std::string& attribute) const;
  bool has_attribute(const std::string& object, const std::string& attribute) const;

 private:
  Hdf5File(std::string path, int64_t id) : path_(std::move(path)), id_(id) {}
  std::string path_;
  int64_t id_ = -1;  // hid_t
};

}  // namespace primer::io
