// Checkpoint files through the HDF5 C API. HDF5's own error printing is switched off; every call
// is checked and a failure becomes one Error naming the file and the operation.
#include "solver/checkpoint.hpp"

#include <hdf5.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>

#include "io/hdf5_util.hpp"

namespace cnnscale {

namespace {

namespace fs = std::filesystem;

using h5::fsync_path;
using h5::H5Handle;
using h5::silence_hdf5;

class Writer {
 public:
  Writer(hid_t file, std::string path) : file_(file), path_(std::move(path)) {
    lcpl_ = H5Pcreate(H5P_LINK_CREATE);
    check(lcpl_, "property list");
    // Parameter names contain '/' ("conv1/weight"): create the layer groups on the way.
    check(H5Pset_create_intermediate_group(lcpl_, 1), "property list");
  }
  ~Writer() {
    if (lcpl_ >= 0) H5Pclose(lcpl_);
  }

  void floats(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& values) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    CNNSCALE_CHECK(n == static_cast<int64_t>(values.size()), "{}: shape holds {} values, got {}", name, n,
                   values.size());
    std::vector<hsize_t> dims(shape.begin(), shape.end());
    H5Handle space(
        dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
        H5Sclose);
    check(space.get(), "dataspace for " + name);
    H5Handle ds(H5Dcreate2(file_, name.c_str(), H5T_IEEE_F32LE, space.get(), lcpl_, H5P_DEFAULT, H5P_DEFAULT),
                H5Dclose);
    check(ds.get(), "create " + name);
    if (!values.empty())
      check(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), "write " + name);
  }

  void scalar(const std::string& name, hid_t file_type, hid_t mem_type, const void* value) {
    H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    check(space.get(), "dataspace for " + name);
    H5Handle ds(H5Dcreate2(file_, name.c_str(), file_type, space.get(), lcpl_, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    check(ds.get(), "create " + name);
    check(H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, value), "write " + name);
  }
  void i64(const std::string& name, int64_t v) { scalar(name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v); }
  void f64(const std::string& name, double v) { scalar(name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v); }
  void text(const std::string& name, const std::string& s) {
    // Fixed-length, null-padded: h5py reads it as bytes; an empty string is stored as one NUL.
    H5Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
    check(type.get(), "string type");
    check(H5Tset_size(type.get(), std::max<size_t>(1, s.size())), "string type");
    check(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), "string type");
    std::string buf = s.empty() ? std::string(1, '\0') : s;
    scalar(name, type.get(), type.get(), buf.data());
  }

 private:
  void check(int64_t r, const std::string& what) const {
    if (r < 0) throw_runtime("{}: HDF5 failed to {}", path_, what);
  }
  hid_t file_;
  std::string path_;
  hid_t lcpl_ = -1;
};

class Reader {
 public:
  Reader(hid_t file, std::string path) : file_(file), path_(std::move(path)) {}

  bool exists(const std::string& name) const {
    // H5Lexists needs every parent to exist: check each prefix.
    size_t pos = 0;
    while (true) {
      pos = name.find('/', pos + 1);
      std::string prefix = name.substr(0, pos);
      if (H5Lexists(file_, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
      if (pos == std::string::npos) return true;
    }
  }

  H5Handle open(const std::string& name) const {
    if (!exists(name)) throw_config("{}: not a complete cnnscale checkpoint: '{}' is missing", path_, name);
    H5Handle ds(H5Dopen2(file_, name.c_str(), H5P_DEFAULT), H5Dclose);
    if (ds.get() < 0) throw_config("{}: '{}' is not a dataset", path_, name);
    return ds;
  }

  CheckpointArray floats(const std::string& full_name, const std::string& short_name) const {
    H5Handle ds = open(full_name);
    H5Handle space(H5Dget_space(ds.get()), H5Sclose);
    H5Handle type(H5Dget_type(ds.get()), H5Tclose);
    if (space.get() < 0 || type.get() < 0 || H5Tget_class(type.get()) != H5T_FLOAT)
      throw_config("{}: '{}' is not a floating-point array", path_, full_name);
    int rank = H5Sget_simple_extent_ndims(space.get());
    std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
    if (rank < 0 || H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
      throw_config("{}: cannot read the shape of '{}'", path_, full_name);
    CheckpointArray a;
    a.name = short_name;
    size_t n = 1;
    for (hsize_t d : dims) {
      a.shape.push_back(static_cast<int64_t>(d));
      n *= d;
    }
    a.values.resize(n);
    if (n && H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, a.values.data()) < 0)
      throw_config("{}: cannot read '{}'", path_, full_name);
    return a;
  }

  int64_t i64(const std::string& name) const {
    int64_t v = 0;
    H5Handle ds = open(name);
    if (H5Dread(ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) < 0)
      throw_config("{}: cannot read '{}' as an integer", path_, name);
    return v;
  }
  double f64(const std::string& name) const {
    double v = 0;
    H5Handle ds = open(name);
    if (H5Dread(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) < 0)
      throw_config("{}: cannot read '{}' as a number", path_, name);
    return v;
  }
  std::string text(const std::string& name) const {
    H5Handle ds = open(name);
    H5Handle type(H5Dget_type(ds.get()), H5Tclose);
    if (type.get() < 0 || H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0)
      throw_config("{}: '{}' is not a fixed-length string", path_, name);
    std::string s(H5Tget_size(type.get()), '\0');
    if (H5Dread(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, s.data()) < 0)
      throw_config("{}: cannot read '{}'", path_, name);
    s.erase(std::find(s.begin(), s.end(), '\0'), s.end());
    return s;
  }

  // Every dataset under `group`, by its name relative to the group ("conv1/weight").
  std::vector<std::string> datasets(const std::string& group) const {
    std::vector<std::string> names;
    if (!exists(group)) throw_config("{}: not a complete cnnscale checkpoint: '{}' is missing", path_, group);
    H5Handle g(H5Gopen2(file_, group.c_str(), H5P_DEFAULT), H5Gclose);
    if (g.get() < 0) throw_config("{}: '{}' is not a group", path_, group);
    auto visit = [](hid_t gid, const char* name, const H5L_info_t*, void* data) -> herr_t {
      hid_t obj = H5Oopen(gid, name, H5P_DEFAULT);
      if (obj < 0) return -1;
      if (H5Iget_type(obj) == H5I_DATASET) static_cast<std::vector<std::string>*>(data)->push_back(name);
      H5Oclose(obj);
      return 0;
    };
    if (H5Lvisit(g.get(), H5_INDEX_NAME, H5_ITER_INC, visit, &names) < 0)
      throw_config("{}: cannot list '{}'", path_, group);
    return names;
  }

 private:
  hid_t file_;
  std::string path_;
};

}  // namespace

void write_checkpoint(const std::string& path, const CheckpointContents& contents) {
  silence_hdf5();
  const std::string tmp = path + ".tmp";
  try {
    H5Handle file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (file.get() < 0) throw_runtime("{}: cannot create checkpoint file", tmp);
    {
      Writer w(file.get(), tmp);
      for (const auto& a : contents.weights) w.floats("weights/" + a.name, a.shape, a.values);
      for (const auto& a : contents.history) w.floats("history/" + a.name, a.shape, a.values);
      for (const auto& a : contents.state) w.floats("state/" + a.name, a.shape, a.values);
      const CheckpointMeta& m = contents.meta;
      w.i64("solver/iteration", m.iteration);
      w.i64("solver/epoch", m.epoch);
      w.f64("solver/lr", m.lr);
      w.text("rng/loader_state", m.loader_rng_state);
      w.i64("rng/loader_epoch", m.loader_epoch);
      w.i64("rng/loader_position", m.loader_position);
      w.text("config/run", m.run_config);
      w.text("config/network", m.network);
      w.text("format", "cnnscale-checkpoint-1");
    }
    if (file.close() < 0) throw_runtime("{}: HDF5 failed to close (flush) the file", tmp);
    fsync_path(tmp, false);
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) throw_runtime("{}: cannot rename to {}: {}", tmp, path, ec.message());
    fsync_path(fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string(), true);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
}

CheckpointContents read_checkpoint(const std::string& path) {
  silence_hdf5();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw_config("{}: checkpoint not found", path);
  if (H5Fis_hdf5(path.c_str()) <= 0) throw_config("{}: not an HDF5 file", path);
  H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (file.get() < 0) throw_config("{}: cannot open as HDF5", path);
  Reader r(file.get(), path);
  if (r.text("format") != "cnnscale-checkpoint-1")
    throw_config("{}: unknown checkpoint format '{}'", path, r.text("format"));
  CheckpointContents c;
  for (const auto& n : r.datasets("weights")) c.weights.push_back(r.floats("weights/" + n, n));
  for (const auto& n : r.datasets("history")) c.history.push_back(r.floats("history/" + n, n));
  if (r.exists("state"))
    for (const auto& n : r.datasets("state")) c.state.push_back(r.floats("state/" + n, n));
  CheckpointMeta& m = c.meta;
  m.iteration = r.i64("solver/iteration");
  m.epoch = r.i64("solver/epoch");
  m.lr = r.f64("solver/lr");
  m.loader_rng_state = r.text("rng/loader_state");
  m.loader_epoch = r.i64("rng/loader_epoch");
  m.loader_position = r.i64("rng/loader_position");
  m.run_config = r.text("config/run");
  m.network = r.text("config/network");
  return c;
}

namespace {

CheckpointArray download_array(Backend& backend, const std::string& name, const Tensor& t) {
  CheckpointArray a;
  a.name = name;
  a.shape = t.shape().dims();
  a.values.resize(static_cast<size_t>(t.numel()));
  backend.download(t, a.values.data());
  return a;
}

// Uploads `arrays` into `targets` (name -> tensor); both sets of names must be equal.
void upload_arrays(Backend& backend, const std::vector<CheckpointArray>& arrays,
                   const std::vector<std::pair<std::string, Tensor>>& targets, const std::string& file,
                   const std::string& kind) {
  std::map<std::string, const CheckpointArray*> by_name;
  for (const auto& a : arrays) by_name[a.name] = &a;
  for (const auto& [name, tensor] : targets) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw_config("{}: checkpoint has no {} for '{}' of the network", file, kind, name);
    Shape s(it->second->shape);
    if (!(s == tensor.shape()))
      throw_config("{}: {} '{}' has shape {} in the checkpoint but {} in the network", file, kind, name, s.to_string(),
                   tensor.shape().to_string());
    backend.upload(it->second->values.data(), tensor);
    by_name.erase(it);
  }
  if (!by_name.empty())
    throw_config("{}: checkpoint has {} '{}' that the network lacks", file, kind, by_name.begin()->first);
}

}  // namespace

CheckpointContents capture_checkpoint(const Net& net, const SgdSolver& solver, CheckpointMeta meta) {
  Backend& backend = net.backend();
  CheckpointContents c;
  c.meta = std::move(meta);
  const auto& params = solver.params();
  for (size_t i = 0; i < params.size(); ++i) {
    c.weights.push_back(download_array(backend, params[i].name, params[i].param->data));
    c.history.push_back(download_array(backend, params[i].name, solver.history()[i]));
  }
  for (const auto& [name, tensor] : net.state()) c.state.push_back(download_array(backend, name, tensor));
  return c;
}

void restore_checkpoint(const CheckpointContents& contents, const std::string& file, Net& net, SgdSolver& solver) {
  Backend& backend = net.backend();
  std::vector<std::pair<std::string, Tensor>> weights, history;
  for (size_t i = 0; i < solver.params().size(); ++i) {
    weights.emplace_back(solver.params()[i].name, solver.params()[i].param->data);
    history.emplace_back(solver.params()[i].name, solver.history()[i]);
  }
  upload_arrays(backend, contents.weights, weights, file, "weights");
  upload_arrays(backend, contents.history, history, file, "momentum history");
  upload_arrays(backend, contents.state, net.state(), file, "state");
  // The host arrays die with `contents`: make sure the uploads have consumed them.
  backend.synchronize();
}

CheckpointDir::CheckpointDir(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  CNNSCALE_CHECK(keep_ >= 1, "keep must be >= 1, got {}", keep_);
}

std::string CheckpointDir::path_for(int64_t iteration) const {
  return (fs::path(dir_) / fmt::format("checkpoint-{:09d}.h5", iteration)).string();
}

std::vector<std::string> CheckpointDir::list() const {
  static const std::regex pattern(R"(checkpoint-(\d+)\.h5)");
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return {};
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    std::smatch m;
    std::string name = entry.path().filename().string();
    if (entry.is_regular_file(ec) && std::regex_match(name, m, pattern))
      found.emplace_back(std::stoll(m[1].str()), entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::optional<std::string> CheckpointDir::latest() const {
  auto all = list();
  if (all.empty()) return std::nullopt;
  return all.back();
}

std::string CheckpointDir::save(const CheckpointContents& contents) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw_runtime("{}: cannot create checkpoint directory: {}", dir_, ec.message());
  std::string path = path_for(contents.meta.iteration);
  write_checkpoint(path, contents);
  auto all = list();
  for (size_t i = 0; i + static_cast<size_t>(keep_) < all.size(); ++i) fs::remove(all[i], ec);
  return path;
}

}  // namespace cnnscale
