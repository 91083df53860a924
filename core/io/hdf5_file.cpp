#include "core/io/hdf5_file.h"

#include <hdf5.h>

#include <algorithm>
#include <bit>
#include <type_traits>
#include <vector>

#include "core/check.h"

namespace primer::io {
namespace {

static_assert(std::is_same_v<hid_t, int64_t>, "Hdf5File stores hid_t as int64_t");

herr_t append_error(unsigned n, const H5E_error2_t* e, void* out) {
  char minor[160] = "";
  H5Eget_msg(e->min_num, nullptr, minor, sizeof minor);
  static_cast<std::string*>(out)->append(
      fmt::format("\n    #{:03} {}(): {} [{}]", n, e->func_name ? e->func_name : "?", e->desc ? e->desc : "", minor));
  return 0;
}

// The current HDF5 error stack as text, then cleared.
std::string error_stack() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, append_error, &text);
  H5Eclear2(H5E_DEFAULT);
  return text.empty() ? " (empty HDF5 error stack)" : text;
}

// Before the library's first use: HDF5 prints its error stack to stderr by default (we put it into the exception
// instead), and closes whatever is open at exit — which, for a file whose flush failed (a full disk), crashes inside
// HDF5 (seen with 1.10: a segfault in H5F__close_cb after the run had reported the error). primer closes every file
// itself, so the exit-time cleanup is not registered.
void prepare_library() {
  static const bool done = (H5dont_atexit(), H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr), true);
  (void)done;
}

template <class R, class Context>
R checked(R result, const char* call, const char* file, int line, const Context& context) {
  if (result < 0) throw_error(file, line, fmt::format("HDF5 call {} failed for {}:{}", call, context(), error_stack()));
  return result;
}
// Checks an HDF5 call (negative result = failure); the format arguments describe the file and object.
#define PRIMER_H5(call, ...) checked((call), #call, __FILE__, __LINE__, [&] { return fmt::format(__VA_ARGS__); })

// An HDF5 identifier closed on scope exit.
class Id {
 public:
  Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Id() { close_(id_); }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  hid_t get() const { return id_; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

template <class T> struct H5Type;
template <> struct H5Type<float> {
  static hid_t memory() { return H5T_NATIVE_FLOAT; }
  static hid_t file() { return H5T_IEEE_F32LE; }
};
template <> struct H5Type<uint8_t> {
  static hid_t memory() { return H5T_NATIVE_UINT8; }
  static hid_t file() { return H5T_STD_U8LE; }
};
template <> struct H5Type<int32_t> {
  static hid_t memory() { return H5T_NATIVE_INT32; }
  static hid_t file() { return H5T_STD_I32LE; }
};
template <> struct H5Type<int64_t> {
  static hid_t memory() { return H5T_NATIVE_INT64; }
  static hid_t file() { return H5T_STD_I64LE; }
};
template <> struct H5Type<uint64_t> {
  static hid_t memory() { return H5T_NATIVE_UINT64; }
  static hid_t file() { return H5T_STD_U64LE; }
};

// Chunks of about 1 MiB: small enough that a corrupted chunk costs little to locate, large enough that
// per-chunk overhead (B-tree entry, Fletcher32 pass) is negligible.
std::vector<hsize_t> chunk_dims(const Shape& shape, size_t element_bytes) {
  constexpr hsize_t kTargetBytes = hsize_t(1) << 20;
  std::vector<hsize_t> chunk(shape.begin(), shape.end());
  auto bytes = [&] {
    hsize_t n = element_bytes;
    for (hsize_t c : chunk) n *= c;
    return n;
  };
  for (hsize_t& c : chunk)
    while (c > 1 && bytes() > kTargetBytes) c = (c + 1) / 2;
  return chunk;
}

}  // namespace

Hdf5File Hdf5File::create(const std::string& path, uint64_t alignment) {
  prepare_library();
  Id fapl(PRIMER_H5(H5Pcreate(H5P_FILE_ACCESS), "'{}'", path), H5Pclose);
  // Format 1.8 or newer: version-2 superblock and object headers, whose metadata carries checksums.
  PRIMER_H5(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST), "'{}'", path);
  if (alignment > 0) PRIMER_H5(H5Pset_alignment(fapl.get(), alignment, alignment), "'{}'", path);
  Id fcpl(PRIMER_H5(H5Pcreate(H5P_FILE_CREATE), "'{}'", path), H5Pclose);
  PRIMER_H5(H5Pset_obj_track_times(fcpl.get(), 0), "'{}'", path);  // no timestamps: same data, same bytes
  const hid_t id = PRIMER_H5(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), "creating '{}'", path);
  return Hdf5File(path, id);
}

Hdf5File Hdf5File::open_read_only(const std::string& path) {
  prepare_library();
  const hid_t id = PRIMER_H5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "opening '{}'", path);
  return Hdf5File(path, id);
}

Hdf5File::Hdf5File(Hdf5File&& other) noexcept : path_(std::move(other.path_)), id_(other.id_) { other.id_ = -1; }

Hdf5File::~Hdf5File() {
  if (id_ >= 0) H5Fclose(id_);
}

void Hdf5File::close() {
  PRIMER_CHECK(id_ >= 0, "HDF5 file '{}' closed twice", path_);
  const hid_t id = id_;
  id_ = -1;
  const herr_t flushed = H5Fflush(id, H5F_SCOPE_LOCAL);
  const std::string flush_errors = flushed < 0 ? error_stack() : "";
  const herr_t closed = H5Fclose(id);  // after a failed flush too: the file must not stay open in HDF5
  PRIMER_CHECK(flushed >= 0, "HDF5 could not write '{}' (disk full, or a quota?):{}", path_, flush_errors);
  PRIMER_H5(closed, "closing '{}'", path_);
}

template <class T> void Hdf5File::write(const std::string& name, const Shape& shape, const T* data, Hdf5Layout layout) {
  const std::vector<hsize_t> dims(shape.begin(), shape.end());
  const int rank = int(dims.size());
  const hid_t space_id = rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims.data(), nullptr);
  Id space(PRIMER_H5(space_id, "'{}' dataset '{}'", path_, name), H5Sclose);
  Id dcpl(PRIMER_H5(H5Pcreate(H5P_DATASET_CREATE), "'{}' dataset '{}'", path_, name), H5Pclose);
  PRIMER_H5(H5Pset_obj_track_times(dcpl.get(), 0), "'{}' dataset '{}'", path_, name);
  const bool has_elements = shape_numel(shape) > 0;
  // HDF5 filters need a chunked layout, which needs at least one dimension.
  if (rank > 0 && has_elements && layout != Hdf5Layout::Contiguous) {
    const std::vector<hsize_t> chunk = chunk_dims(shape, sizeof(T));
    PRIMER_H5(H5Pset_chunk(dcpl.get(), rank, chunk.data()), "'{}' dataset '{}'", path_, name);
    if (layout == Hdf5Layout::Compressed) {
      PRIMER_H5(H5Pset_shuffle(dcpl.get()), "'{}' dataset '{}'", path_, name);
      PRIMER_H5(H5Pset_deflate(dcpl.get(), 1), "'{}' dataset '{}'", path_, name);
    }
    PRIMER_H5(H5Pset_fletcher32(dcpl.get()), "'{}' dataset '{}'", path_, name);
  }
  Id lcpl(PRIMER_H5(H5Pcreate(H5P_LINK_CREATE), "'{}' dataset '{}'", path_, name), H5Pclose);
  PRIMER_H5(H5Pset_create_intermediate_group(lcpl.get(), 1), "'{}' dataset '{}'", path_, name);
  Id dataset(
      PRIMER_H5(H5Dcreate2(id_, name.c_str(), H5Type<T>::file(), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
                "creating dataset '{}' in '{}'", name, path_),
      H5Dclose);
  if (has_elements)
    PRIMER_H5(H5Dwrite(dataset.get(), H5Type<T>::memory(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
              "writing dataset '{}' of '{}'", name, path_);
}

Shape Hdf5File::shape_of(const std::string& name) const {
  Id dataset(PRIMER_H5(H5Dopen2(id_, name.c_str(), H5P_DEFAULT), "opening dataset '{}' of '{}'", name, path_),
             H5Dclose);
  Id space(PRIMER_H5(H5Dget_space(dataset.get()), "dataset '{}' of '{}'", name, path_), H5Sclose);
  const int rank = PRIMER_H5(H5Sget_simple_extent_ndims(space.get()), "dataset '{}' of '{}'", name, path_);
  std::vector<hsize_t> dims(size_t(rank), 0);
  PRIMER_H5(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "dataset '{}' of '{}'", name, path_);
  return Shape(dims.begin(), dims.end());
}

template <class T> void Hdf5File::read(const std::string& name, const Shape& expected, T* out) const {
  const Shape shape = shape_of(name);
  PRIMER_CHECK(shape == expected, "dataset '{}' of '{}' has shape {}, expected {}", name, path_, shape_str(shape),
               shape_str(expected));
  if (shape_numel(shape) == 0) return;
  Id dataset(PRIMER_H5(H5Dopen2(id_, name.c_str(), H5P_DEFAULT), "opening dataset '{}' of '{}'", name, path_),
             H5Dclose);
  PRIMER_H5(H5Dread(dataset.get(), H5Type<T>::memory(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out),
            "reading dataset '{}' of '{}' (a failed Fletcher32 check means corrupted bytes)", name, path_);
}

template <class T> std::optional<uint64_t> Hdf5File::data_offset(const std::string& name) const {
  if constexpr (std::endian::native != std::endian::little) return std::nullopt;
  Id dataset(PRIMER_H5(H5Dopen2(id_, name.c_str(), H5P_DEFAULT), "opening dataset '{}' of '{}'", name, path_),
             H5Dclose);
  Id type(PRIMER_H5(H5Dget_type(dataset.get()), "dataset '{}' of '{}'", name, path_), H5Tclose);
  if (PRIMER_H5(H5Tequal(type.get(), H5Type<T>::file()), "dataset '{}' of '{}'", name, path_) <= 0) return std::nullopt;
  Id dcpl(PRIMER_H5(H5Dget_create_plist(dataset.get()), "dataset '{}' of '{}'", name, path_), H5Pclose);
  if (H5Pget_layout(dcpl.get()) != H5D_CONTIGUOUS || H5Pget_nfilters(dcpl.get()) != 0) return std::nullopt;
  const haddr_t offset = H5Dget_offset(dataset.get());  // HADDR_UNDEF when no storage is allocated
  if (offset == HADDR_UNDEF) return std::nullopt;
  return uint64_t(offset);
}

bool Hdf5File::contains(const std::string& name) const {
  for (size_t slash = name.find('/', 1);; slash = name.find('/', slash + 1)) {
    const std::string prefix = name.substr(0, slash);
    if (PRIMER_H5(H5Lexists(id_, prefix.c_str(), H5P_DEFAULT), "looking up '{}' in '{}'", prefix, path_) == 0)
      return false;
    if (slash == std::string::npos) return true;
  }
}

void Hdf5File::write_bytes(const std::string& name, std::string_view bytes) {
  write(name, {int64_t(bytes.size())}, reinterpret_cast<const uint8_t*>(bytes.data()));
}

std::string Hdf5File::read_bytes(const std::string& name) const {
  const Shape shape = shape_of(name);
  PRIMER_CHECK(shape.size() == 1, "dataset '{}' of '{}' should be a 1-D byte string, has shape {}", name, path_,
               shape_str(shape));
  std::string bytes(size_t(shape[0]), '\0');
  read(name, shape, reinterpret_cast<uint8_t*>(bytes.data()));
  return bytes;
}

template <class T> void Hdf5File::set_attribute(const std::string& object, const std::string& attribute, T value) {
  Id space(PRIMER_H5(H5Screate(H5S_SCALAR), "attribute '{}' of '{}'", attribute, path_), H5Sclose);
  Id attr(PRIMER_H5(H5Acreate_by_name(id_, object.c_str(), attribute.c_str(), H5Type<T>::file(), space.get(),
                                      H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                    "creating attribute '{}' of '{}' in '{}'", attribute, object, path_),
          H5Aclose);
  PRIMER_H5(H5Awrite(attr.get(), H5Type<T>::memory(), &value), "writing attribute '{}' of '{}' in '{}'", attribute,
            object, path_);
}

template <class T> T Hdf5File::attribute(const std::string& object, const std::string& attribute) const {
  Id attr(PRIMER_H5(H5Aopen_by_name(id_, object.c_str(), attribute.c_str(), H5P_DEFAULT, H5P_DEFAULT),
                    "opening attribute '{}' of '{}' in '{}'", attribute, object, path_),
          H5Aclose);
  T value{};
  PRIMER_H5(H5Aread(attr.get(), H5Type<T>::memory(), &value), "reading attribute '{}' of '{}' in '{}'", attribute,
            object, path_);
  return value;
}

void Hdf5File::set_string_attribute(const std::string& object, const std::string& attribute, std::string_view value) {
  Id type(PRIMER_H5(H5Tcopy(H5T_C_S1), "attribute '{}' of '{}'", attribute, path_), H5Tclose);
  PRIMER_H5(H5Tset_size(type.get(), std::max<size_t>(value.size(), 1)), "attribute '{}' of '{}'", attribute, path_);
  PRIMER_H5(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), "attribute '{}' of '{}'", attribute, path_);
  PRIMER_H5(H5Tset_cset(type.get(), H5T_CSET_UTF8), "attribute '{}' of '{}'", attribute, path_);
  Id space(PRIMER_H5(H5Screate(H5S_SCALAR), "attribute '{}' of '{}'", attribute, path_), H5Sclose);
  Id attr(PRIMER_H5(H5Acreate_by_name(id_, object.c_str(), attribute.c_str(), type.get(), space.get(), H5P_DEFAULT,
                                      H5P_DEFAULT, H5P_DEFAULT),
                    "creating attribute '{}' of '{}' in '{}'", attribute, object, path_),
          H5Aclose);
  std::string padded(value);
  padded.resize(std::max<size_t>(value.size(), 1), '\0');
  PRIMER_H5(H5Awrite(attr.get(), type.get(), padded.data()), "writing attribute '{}' of '{}' in '{}'", attribute,
            object, path_);
}

std::string Hdf5File::string_attribute(const std::string& object, const std::string& attribute) const {
  Id attr(PRIMER_H5(H5Aopen_by_name(id_, object.c_str(), attribute.c_str(), H5P_DEFAULT, H5P_DEFAULT),
                    "opening attribute '{}' of '{}' in '{}'", attribute, object, path_),
          H5Aclose);
  Id type(PRIMER_H5(H5Aget_type(attr.get()), "attribute '{}' of '{}' in '{}'", attribute, object, path_), H5Tclose);
  PRIMER_CHECK(H5Tget_class(type.get()) == H5T_STRING, "attribute '{}' of '{}' in '{}' is not a string", attribute,
               object, path_);
  if (PRIMER_H5(H5Tis_variable_str(type.get()), "attribute '{}' of '{}'", attribute, path_) > 0) {  // e.g. h5py's
    char* text = nullptr;
    PRIMER_H5(H5Aread(attr.get(), type.get(), &text), "reading attribute '{}' of '{}' in '{}'", attribute, object,
              path_);
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  std::string value(H5Tget_size(type.get()), '\0');
  PRIMER_H5(H5Aread(attr.get(), type.get(), value.data()), "reading attribute '{}' of '{}' in '{}'", attribute, object,
            path_);
  value.resize(std::min(value.size(), value.find('\0')));  // null-padded or null-terminated
  return value;
}

bool Hdf5File::has_attribute(const std::string& object, const std::string& attribute) const {
  return PRIMER_H5(H5Aexists_by_name(id_, object.c_str(), attribute.c_str(), H5P_DEFAULT),
                   "looking up attribute '{}' of '{}' in '{}'", attribute, object, path_) > 0;
}

#define PRIMER_HDF5_DATASET_TYPE(T)                                                         \
  template void Hdf5File::write<T>(const std::string&, const Shape&, const T*, Hdf5Layout); \
  template void Hdf5File::read<T>(const std::string&, const Shape&, T*) const;              \
  template std::optional<uint64_t> Hdf5File::data_offset<T>(const std::string&) const;
PRIMER_HDF5_DATASET_TYPE(float)
PRIMER_HDF5_DATASET_TYPE(uint8_t)
PRIMER_HDF5_DATASET_TYPE(int32_t)
PRIMER_HDF5_DATASET_TYPE(int64_t)
#undef PRIMER_HDF5_DATASET_TYPE
template void Hdf5File::set_attribute<int64_t>(const std::string&, const std::string&, int64_t);
template void Hdf5File::set_attribute<uint64_t>(const std::string&, const std::string&, uint64_t);
template int64_t Hdf5File::attribute<int64_t>(const std::string&, const std::string&) const;
template uint64_t Hdf5File::attribute<uint64_t>(const std::string&, const std::string&) const;

}  // namespace primer::io
