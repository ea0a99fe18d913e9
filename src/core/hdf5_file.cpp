// See hdf5_file.hpp.
#include "core/hdf5_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"

namespace cnnscale::h5 {

namespace {

// HDF5 1.10 keeps a file whose H5Fclose failed (a full disk, a file-size limit) half-destroyed in
// its table of open files, and its exit handler then crashes on it (SIGSEGV in H5F__close_cb, after
// the one-line error was printed). Every file we open is closed by its owner before exit, so the
// handler has nothing to do: it is never registered (this must come before HDF5's first call,
// hence a static initialiser).
const bool kNoExitHandler = (H5dont_atexit(), true);

// The system's reason for the HDF5 failure just reported, from HDF5's error stack ("No space left
// on device" for its sec2 driver's "errno = 28, error message = '...'"), or "".
std::string failure_cause() {
  std::string cause;
  auto visit = [](unsigned, const H5E_error2_t* err, void* data) -> herr_t {
    auto* out = static_cast<std::string*>(data);
    const std::string desc = err && err->desc ? err->desc : "";
    const std::string key = "error message = '";
    if (const size_t at = desc.find(key); out->empty() && at != std::string::npos) {
      const size_t from = at + key.size(), to = desc.find('\'', from);
      *out = desc.substr(from, to == std::string::npos ? std::string::npos : to - from);
    }
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, visit, &cause);
  return cause.empty() ? "" : ": " + cause;
}

}  // namespace

void silence_errors() {
  (void)kNoExitHandler;
  static bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

Handle vlen_string_type() {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  if (t.get() < 0 || H5Tset_size(t.get(), H5T_VARIABLE) < 0 || H5Tset_cset(t.get(), H5T_CSET_UTF8) < 0)
    throw_runtime("HDF5 failed to make a string type");
  return t;
}

namespace {

std::vector<const char*> c_strings(const std::vector<std::string>& values) {
  std::vector<const char*> ptrs;
  for (const auto& s : values) ptrs.push_back(s.c_str());
  return ptrs;
}

// Strings HDF5 allocated for a read, copied and freed.
std::vector<std::string> take_strings(std::vector<char*>& ptrs) {
  std::vector<std::string> out;
  for (char* p : ptrs) {
    out.emplace_back(p ? p : "");
    H5free_memory(p);
  }
  return out;
}

}  // namespace

// ---- Writer ----

namespace {

// HDF5's truncate opens with O_CREAT | O_TRUNC, which follows a symbolic link (one planted after
// any look at the path, too) and rewrites a hard-linked file in place. So an existing file is
// unlinked (unlink never follows a link) and the new one created exclusively: O_EXCL fails rather
// than follow a link planted in between.
hid_t create_file(const std::string& path, const std::string& kind) {
  silence_errors();
  auto refuse_link = [&] {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
      throw_runtime("{}: is a symbolic link; not followed where cnnscale writes a {} (remove it)", path, kind);
  };
  refuse_link();  // not ours to remove
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    throw_runtime("{}: cannot replace the {} there: {}", path, kind, std::strerror(errno));
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) refuse_link();
  return file;
}

}  // namespace

Writer::Writer(const std::string& path, const std::string& kind)
    : path_(path), file_(create_file(path, kind), H5Fclose), lcpl_(H5Pcreate(H5P_LINK_CREATE), H5Pclose) {
  if (file_.get() < 0) throw_runtime("{}: cannot create {}{}", path_, kind, failure_cause());
  check(lcpl_.get(), "property list");
  check(H5Pset_create_intermediate_group(lcpl_.get(), 1), "property list");
}

void Writer::check(int64_t r, const std::string& what) const {
  if (r < 0) throw_runtime("{}: HDF5 failed to {}{}", path_, what, failure_cause());
}

Handle Writer::group(const std::string& name) {
  Handle g(H5Gcreate2(file_.get(), name.c_str(), lcpl_.get(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  check(g.get(), "create group " + name);
  return g;
}

void Writer::attr(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type, const void* value) {
  Handle space(H5Screate(value ? H5S_SCALAR : H5S_NULL), H5Sclose);
  check(space.get(), "dataspace for attribute " + name);
  Handle a(H5Acreate2(obj, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  check(a.get(), "create attribute " + name);
  if (value) check(H5Awrite(a.get(), mem_type, value), "write attribute " + name);
}

void Writer::attr_f64(hid_t obj, const std::string& name, double v) {
  attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}
void Writer::attr_i64(hid_t obj, const std::string& name, int64_t v) {
  attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}
void Writer::attr_null(hid_t obj, const std::string& name, hid_t type) {
  attr(obj, name, type, type, nullptr);
}

void Writer::attr_str(hid_t obj, const std::string& name, const std::optional<std::string>& v) {
  Handle t = vlen_string_type();
  if (!v) return attr_null(obj, name, t.get());
  const char* p = v->c_str();
  attr(obj, name, t.get(), t.get(), &p);
}

void Writer::attr_str_array(hid_t obj, const std::string& name, const std::vector<std::string>& values) {
  Handle t = vlen_string_type();
  std::vector<const char*> ptrs = c_strings(values);
  hsize_t n = ptrs.size();
  Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  check(space.get(), "dataspace for attribute " + name);
  Handle a(H5Acreate2(obj, name.c_str(), t.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  check(a.get(), "create attribute " + name);
  if (n) check(H5Awrite(a.get(), t.get(), ptrs.data()), "write attribute " + name);
}

void Writer::attr_value(hid_t obj, const std::string& name, const Value& v) {
  if (std::holds_alternative<double>(v))
    attr_f64(obj, name, std::get<double>(v));
  else if (std::holds_alternative<std::string>(v))
    attr_str(obj, name, std::get<std::string>(v));
  else
    attr_null(obj, name, H5T_IEEE_F64LE);
}

Handle Writer::dataset(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims, hid_t file_type,
                       hid_t mem_type, const void* data) {
  Handle space(
      dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
      H5Sclose);
  check(space.get(), "dataspace for " + name);
  Handle ds(H5Dcreate2(loc, name.c_str(), file_type, space.get(), lcpl_.get(), H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  check(ds.get(), "create dataset " + name);
  hsize_t n = 1;
  for (hsize_t d : dims) n *= d;
  if (n) check(H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "write dataset " + name);
  return ds;
}

void Writer::f64(hid_t loc, const std::string& name, const std::vector<double>& v) {
  dataset(loc, name, {v.size()}, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v.data());
}
void Writer::i64(hid_t loc, const std::string& name, const std::vector<int64_t>& v) {
  dataset(loc, name, {v.size()}, H5T_STD_I64LE, H5T_NATIVE_INT64, v.data());
}

void Writer::f32(hid_t loc, const std::string& name, const std::vector<int64_t>& shape,
                 const std::vector<float>& values) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  CNNSCALE_CHECK(n == static_cast<int64_t>(values.size()), "{}: shape holds {} values, got {}", name, n, values.size());
  dataset(loc, name, std::vector<hsize_t>(shape.begin(), shape.end()), H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, values.data());
}

void Writer::strings(hid_t loc, const std::string& name, const std::vector<std::string>& v) {
  Handle t = vlen_string_type();
  std::vector<const char*> ptrs = c_strings(v);
  dataset(loc, name, {v.size()}, t.get(), t.get(), ptrs.data());
}

void Writer::scalar_f64(hid_t loc, const std::string& name, double v) {
  dataset(loc, name, {}, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}
void Writer::scalar_i64(hid_t loc, const std::string& name, int64_t v) {
  dataset(loc, name, {}, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

void Writer::text(hid_t loc, const std::string& name, const std::string& s) {
  Handle t = vlen_string_type();
  const char* p = s.c_str();
  dataset(loc, name, {}, t.get(), t.get(), &p);
}

void Writer::fixed_text(hid_t loc, const std::string& name, const std::string& s) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  check(type.get(), "string type");
  check(H5Tset_size(type.get(), std::max<size_t>(1, s.size())), "string type");
  check(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), "string type");
  std::string buf = s.empty() ? std::string(1, '\0') : s;
  dataset(loc, name, {}, type.get(), type.get(), buf.data());
}

void Writer::close() {
  lcpl_.close();
  if (file_.close() < 0) throw_runtime("{}: HDF5 failed to close (flush) the file{}", path_, failure_cause());
}

// ---- Reader ----

namespace {

hid_t open_read_only(const std::string& path, const std::string& kind) {
  silence_errors();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw_config("{}: {} not found", path, kind);
  if (H5Fis_hdf5(path.c_str()) <= 0) throw_config("{}: not an HDF5 file", path);
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) throw_config("{}: cannot open as HDF5", path);
  return file;
}

}  // namespace

Reader::Reader(const std::string& path, std::string kind)
    : path_(path), kind_(std::move(kind)), file_(open_read_only(path, kind_), H5Fclose) {}

void Reader::fail_read(const std::string& name) const {
  throw_config("{}: cannot read '{}'", path_, name);
}

bool Reader::exists(hid_t loc, const std::string& name) const {
  // H5Lexists needs every parent to exist: check each prefix.
  for (size_t pos = 0;;) {
    pos = name.find('/', pos + 1);
    if (H5Lexists(loc, name.substr(0, pos).c_str(), H5P_DEFAULT) <= 0) return false;
    if (pos == std::string::npos) return true;
  }
}

Handle Reader::group(hid_t loc, const std::string& name) const {
  if (!exists(loc, name)) throw_config("{}: not a complete cnnscale {}: '{}' is missing", path_, kind_, name);
  Handle g(H5Gopen2(loc, name.c_str(), H5P_DEFAULT), H5Gclose);
  if (g.get() < 0) throw_config("{}: '{}' is not a group", path_, name);
  return g;
}

Handle Reader::dataset(hid_t loc, const std::string& name, std::vector<hsize_t>& dims) const {
  if (!exists(loc, name)) throw_config("{}: not a complete cnnscale {}: '{}' is missing", path_, kind_, name);
  Handle ds(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (ds.get() < 0) throw_config("{}: '{}' is not a dataset", path_, name);
  Handle space(H5Dget_space(ds.get()), H5Sclose);
  int rank = space.get() < 0 ? -1 : H5Sget_simple_extent_ndims(space.get());
  dims.assign(static_cast<size_t>(std::max(rank, 0)), 0);
  if (rank < 0 || H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
    throw_config("{}: cannot read the shape of '{}'", path_, name);
  return ds;
}

std::vector<std::string> Reader::datasets(hid_t loc, const std::string& group_name) const {
  Handle g = group(loc, group_name);
  std::vector<std::string> names;
  auto visit = [](hid_t gid, const char* name, const H5L_info_t*, void* data) -> herr_t {
    hid_t obj = H5Oopen(gid, name, H5P_DEFAULT);
    if (obj < 0) return -1;
    if (H5Iget_type(obj) == H5I_DATASET) static_cast<std::vector<std::string>*>(data)->push_back(name);
    H5Oclose(obj);
    return 0;
  };
  if (H5Lvisit(g.get(), H5_INDEX_NAME, H5_ITER_INC, visit, &names) < 0)
    throw_config("{}: cannot list '{}'", path_, group_name);
  return names;
}

bool Reader::has_attr(hid_t obj, const std::string& name) const {
  return H5Aexists(obj, name.c_str()) > 0;
}

std::vector<std::string> Reader::attr_names(hid_t obj) const {
  std::vector<std::string> names;
  auto visit = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->push_back(name);
    return 0;
  };
  hsize_t idx = 0;
  if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, visit, &names) < 0)
    throw_config("{}: cannot list attributes", path_);
  return names;
}

Value Reader::attr(hid_t obj, const std::string& name) const {
  if (!has_attr(obj, name)) throw_config("{}: attribute '{}' is missing", path_, name);
  Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  Handle space(H5Aget_space(a.get()), H5Sclose);
  Handle type(H5Aget_type(a.get()), H5Tclose);
  if (a.get() < 0 || space.get() < 0 || type.get() < 0) throw_config("{}: cannot open attribute '{}'", path_, name);
  if (H5Sget_simple_extent_type(space.get()) == H5S_NULL) return std::monostate{};
  const H5T_class_t cls = H5Tget_class(type.get());
  if (cls == H5T_STRING) {
    if (H5Tis_variable_str(type.get()) <= 0) throw_config("{}: attribute '{}' is not a UTF-8 string", path_, name);
    Handle mem = vlen_string_type();
    char* p = nullptr;
    if (H5Aread(a.get(), mem.get(), &p) < 0) throw_config("{}: cannot read attribute '{}'", path_, name);
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  if (cls == H5T_FLOAT || cls == H5T_INTEGER) {
    double v = 0;
    if (H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) < 0) throw_config("{}: cannot read attribute '{}'", path_, name);
    return v;
  }
  throw_config("{}: attribute '{}' is neither a number nor a string", path_, name);
}

std::optional<std::string> Reader::attr_str(hid_t obj, const std::string& name) const {
  Value v = attr(obj, name);
  if (std::holds_alternative<std::monostate>(v)) return std::nullopt;
  if (!std::holds_alternative<std::string>(v)) throw_config("{}: attribute '{}' is not a string", path_, name);
  return std::get<std::string>(v);
}

int64_t Reader::attr_i64(hid_t obj, const std::string& name) const {
  if (!has_attr(obj, name)) throw_config("{}: attribute '{}' is missing", path_, name);
  Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  int64_t v = 0;
  if (a.get() < 0 || H5Aread(a.get(), H5T_NATIVE_INT64, &v) < 0)
    throw_config("{}: cannot read attribute '{}' as an integer", path_, name);
  return v;
}

std::vector<std::string> Reader::attr_str_array(hid_t obj, const std::string& name) const {
  Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (a.get() < 0) throw_config("{}: attribute '{}' is missing", path_, name);
  Handle space(H5Aget_space(a.get()), H5Sclose);
  hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) throw_config("{}: cannot read attribute '{}'", path_, name);
  std::vector<char*> ptrs(static_cast<size_t>(n), nullptr);
  Handle mem = vlen_string_type();
  if (n && H5Aread(a.get(), mem.get(), ptrs.data()) < 0) throw_config("{}: cannot read attribute '{}'", path_, name);
  return take_strings(ptrs);
}

std::vector<double> Reader::f64(hid_t loc, const std::string& name) const {
  return read<double>(loc, name, H5T_NATIVE_DOUBLE);
}
std::vector<int64_t> Reader::i64(hid_t loc, const std::string& name) const {
  return read<int64_t>(loc, name, H5T_NATIVE_INT64);
}

std::vector<std::string> Reader::strings(hid_t loc, const std::string& name) const {
  Handle mem = vlen_string_type();
  std::vector<char*> ptrs = read<char*>(loc, name, mem.get());
  return take_strings(ptrs);
}

std::vector<float> Reader::f32(hid_t loc, const std::string& name, std::vector<int64_t>& shape) const {
  {
    std::vector<hsize_t> dims;
    Handle ds = dataset(loc, name, dims);
    Handle type(H5Dget_type(ds.get()), H5Tclose);
    if (type.get() < 0 || H5Tget_class(type.get()) != H5T_FLOAT)
      throw_config("{}: '{}' is not a floating-point array", path_, name);
  }
  std::vector<hsize_t> dims;
  std::vector<float> values = read<float>(loc, name, H5T_NATIVE_FLOAT, &dims);
  shape.assign(dims.begin(), dims.end());
  return values;
}

template <typename T>
T Reader::scalar(hid_t loc, const std::string& name, hid_t mem_type, const char* what) const {
  std::vector<hsize_t> dims;
  Handle ds = dataset(loc, name, dims);
  T v{};
  if (H5Dread(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) < 0)
    throw_config("{}: cannot read '{}' as {}", path_, name, what);
  return v;
}

int64_t Reader::scalar_i64(hid_t loc, const std::string& name) const {
  return scalar<int64_t>(loc, name, H5T_NATIVE_INT64, "an integer");
}

double Reader::scalar_f64(hid_t loc, const std::string& name) const {
  return scalar<double>(loc, name, H5T_NATIVE_DOUBLE, "a number");
}

std::string Reader::text(hid_t loc, const std::string& name) const {
  std::vector<hsize_t> dims;
  Handle ds = dataset(loc, name, dims);
  Handle mem = vlen_string_type();
  char* p = nullptr;
  if (H5Dread(ds.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p) < 0) fail_read(name);
  std::string s = p ? p : "";
  H5free_memory(p);
  return s;
}

std::string Reader::fixed_text(hid_t loc, const std::string& name) const {
  std::vector<hsize_t> dims;
  Handle ds = dataset(loc, name, dims);
  Handle type(H5Dget_type(ds.get()), H5Tclose);
  if (type.get() < 0 || H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0)
    throw_config("{}: '{}' is not a fixed-length string", path_, name);
  std::string s(H5Tget_size(type.get()), '\0');
  if (H5Dread(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data()) < 0)
    throw_config("{}: cannot read '{}'", path_, name);
  s.erase(std::find(s.begin(), s.end(), '\0'), s.end());
  return s;
}

}  // namespace cnnscale::h5
