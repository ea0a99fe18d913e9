// The one HDF5 C API wrapper of cnnscale, used by the checkpoints and the results files: owning
// handles, a writer and a reader that check every call and turn a failure into one error naming
// the file and the operation (HDF5's own error printing is switched off).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace cnnscale::h5 {

void silence_errors();

// Owns an HDF5 identifier and closes it with the matching function.
class Handle {
 public:
  Handle(hid_t id, herr_t (*closer)(hid_t)) : id_(id), closer_(closer) {}
  ~Handle() {
    if (id_ >= 0) closer_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      if (id_ >= 0) closer_(id_);
      id_ = o.id_;
      closer_ = o.closer_;
      o.id_ = -1;
    }
    return *this;
  }
  hid_t get() const { return id_; }
  // Closes now and reports failure (closing a file flushes it).
  herr_t close() {
    herr_t r = id_ >= 0 ? closer_(id_) : 0;
    id_ = -1;
    return r;
  }

 private:
  hid_t id_;
  herr_t (*closer_)(hid_t);
};

// Variable-length UTF-8 strings: h5py returns them as str.
Handle vlen_string_type();

// An attribute's value: null (empty H5S_NULL dataspace), a number or a string.
using Value = std::variant<std::monostate, double, std::string>;

// Creates (truncates) a file; every failure is a RuntimeError "<path>: HDF5 failed to <what>".
// Dataset names may contain '/': missing groups on the way are created. `kind` names the file in
// messages ("results file", "checkpoint file").
class Writer {
 public:
  Writer(const std::string& path, const std::string& kind);
  hid_t root() const { return file_.get(); }
  Handle group(const std::string& name);

  // Attributes; a null value is an attribute with an empty (H5S_NULL) dataspace, which h5py reads
  // as h5py.Empty; the type says what it would have been.
  void attr_f64(hid_t obj, const std::string& name, double v);
  void attr_i64(hid_t obj, const std::string& name, int64_t v);
  void attr_null(hid_t obj, const std::string& name, hid_t type);
  void attr_str(hid_t obj, const std::string& name, const std::optional<std::string>& v);
  void attr_str_array(hid_t obj, const std::string& name, const std::vector<std::string>& values);
  // Number (f64), string or null (an f64-typed null).
  void attr_value(hid_t obj, const std::string& name, const Value& v);

  // Datasets; dims may contain zeros (no iterations, no samples), empty dims is a scalar.
  Handle dataset(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims, hid_t file_type, hid_t mem_type,
                 const void* data);
  void f64(hid_t loc, const std::string& name, const std::vector<double>& v);
  void i64(hid_t loc, const std::string& name, const std::vector<int64_t>& v);
  void f32(hid_t loc, const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& values);
  void strings(hid_t loc, const std::string& name, const std::vector<std::string>& v);
  void scalar_f64(hid_t loc, const std::string& name, double v);
  void scalar_i64(hid_t loc, const std::string& name, int64_t v);
  void text(hid_t loc, const std::string& name, const std::string& s);  // variable-length UTF-8
  // Fixed-length, null-padded: h5py reads it as bytes; an empty string is stored as one NUL.
  void fixed_text(hid_t loc, const std::string& name, const std::string& s);

  // Closes (flushes) the file; RuntimeError on failure.
  void close();

 private:
  void check(int64_t r, const std::string& what) const;
  void attr(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type, const void* value);
  std::string path_;
  Handle file_;
  Handle lcpl_;
};

// Opens a file read-only; every failure is a ConfigError naming the file. `kind` names what the
// file should be in messages ("results file", "checkpoint").
class Reader {
 public:
  Reader(const std::string& path, std::string kind);
  hid_t root() const { return file_.get(); }
  const std::string& path() const { return path_; }

  // Whether the object exists, every group on the way included.
  bool exists(hid_t loc, const std::string& name) const;
  Handle group(hid_t loc, const std::string& name) const;
  // Opens a dataset and returns its shape.
  Handle dataset(hid_t loc, const std::string& name, std::vector<hsize_t>& dims) const;
  // Every dataset under the group, by its name relative to it ("conv1/weight").
  std::vector<std::string> datasets(hid_t loc, const std::string& group) const;

  bool has_attr(hid_t obj, const std::string& name) const;
  std::vector<std::string> attr_names(hid_t obj) const;
  Value attr(hid_t obj, const std::string& name) const;
  std::optional<std::string> attr_str(hid_t obj, const std::string& name) const;
  int64_t attr_i64(hid_t obj, const std::string& name) const;
  std::vector<std::string> attr_str_array(hid_t obj, const std::string& name) const;

  template <typename T>
  std::vector<T> read(hid_t loc, const std::string& name, hid_t mem_type, std::vector<hsize_t>* shape = nullptr) const {
    std::vector<hsize_t> dims;
    Handle ds = dataset(loc, name, dims);
    size_t n = 1;
    for (hsize_t d : dims) n *= d;
    std::vector<T> v(n);
    if (n && H5Dread(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0) fail_read(name);
    if (shape) *shape = dims;
    return v;
  }
  std::vector<double> f64(hid_t loc, const std::string& name) const;
  std::vector<int64_t> i64(hid_t loc, const std::string& name) const;
  std::vector<std::string> strings(hid_t loc, const std::string& name) const;
  // A floating-point array of any shape, read as float.
  std::vector<float> f32(hid_t loc, const std::string& name, std::vector<int64_t>& shape) const;
  int64_t scalar_i64(hid_t loc, const std::string& name) const;
  double scalar_f64(hid_t loc, const std::string& name) const;
  std::string text(hid_t loc, const std::string& name) const;        // variable-length
  std::string fixed_text(hid_t loc, const std::string& name) const;  // fixed-length, NUL-trimmed

 private:
  template <typename T>
  T scalar(hid_t loc, const std::string& name, hid_t mem_type, const char* what) const;
  [[noreturn]] void fail_read(const std::string& name) const;
  std::string path_, kind_;
  Handle file_;
};

}  // namespace cnnscale::h5
