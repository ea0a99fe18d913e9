// Writes and reads the results files of one run through the HDF5 C API (strings as variable-length
// UTF-8 so h5py returns str for attributes), nlohmann-json and plain CSV. Every file is written as
// "<name>.tmp" and renamed; the run folder is "<run-id>.partial" until everything is in it.
#include "io/results_writer.hpp"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/log.hpp"
#include "io/atomic_file.hpp"
#include "io/hdf5_util.hpp"

namespace cnnscale {

namespace {

namespace fs = std::filesystem;
using h5::H5Handle;

// Variable-length UTF-8 string type; owned by the caller through the handle.
H5Handle vlen_string_type() {
  H5Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  if (t.get() < 0 || H5Tset_size(t.get(), H5T_VARIABLE) < 0 || H5Tset_cset(t.get(), H5T_CSET_UTF8) < 0)
    throw_runtime("HDF5 failed to make a string type");
  return t;
}

class H5Out {
 public:
  H5Out(hid_t file, std::string path) : file_(file), path_(std::move(path)) {}

  H5Handle group(const std::string& name) {
    H5Handle g(H5Gcreate2(file_, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    check(g.get(), "create group " + name);
    return g;
  }

  // Attributes: a null (unknown) value is an attribute with an empty (H5S_NULL) dataspace, which
  // h5py reads as h5py.Empty; the type says what it would have been.
  void attr_f64(hid_t obj, const std::string& name, double v) {
    attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
  }
  void attr_i64(hid_t obj, const std::string& name, int64_t v) { attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v); }
  void attr_null(hid_t obj, const std::string& name, hid_t type) { attr(obj, name, type, type, nullptr); }
  void attr_str(hid_t obj, const std::string& name, const std::optional<std::string>& v) {
    H5Handle t = vlen_string_type();
    if (!v) return attr_null(obj, name, t.get());
    const char* p = v->c_str();
    attr(obj, name, t.get(), t.get(), &p);
  }
  void attr_str_array(hid_t obj, const std::string& name, const std::vector<std::string>& values) {
    H5Handle t = vlen_string_type();
    std::vector<const char*> ptrs;
    for (const auto& s : values) ptrs.push_back(s.c_str());
    hsize_t n = ptrs.size();
    H5Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
    check(space.get(), "dataspace for attribute " + name);
    H5Handle a(H5Acreate2(obj, name.c_str(), t.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    check(a.get(), "create attribute " + name);
    if (n) check(H5Awrite(a.get(), t.get(), ptrs.data()), "write attribute " + name);
  }

  // Datasets; dims may contain zeros (no iterations, no samples).
  H5Handle dataset(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims, hid_t file_type,
                   hid_t mem_type, const void* data) {
    H5Handle space(
        dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
        H5Sclose);
    check(space.get(), "dataspace for " + name);
    H5Handle ds(H5Dcreate2(loc, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    check(ds.get(), "create dataset " + name);
    hsize_t n = 1;
    for (hsize_t d : dims) n *= d;
    if (n) check(H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "write dataset " + name);
    return ds;
  }
  void f64(hid_t loc, const std::string& name, const std::vector<double>& v) {
    dataset(loc, name, {v.size()}, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v.data());
  }
  void i64(hid_t loc, const std::string& name, const std::vector<int64_t>& v) {
    dataset(loc, name, {v.size()}, H5T_STD_I64LE, H5T_NATIVE_INT64, v.data());
  }
  void strings(hid_t loc, const std::string& name, const std::vector<std::string>& v) {
    H5Handle t = vlen_string_type();
    std::vector<const char*> ptrs;
    for (const auto& s : v) ptrs.push_back(s.c_str());
    dataset(loc, name, {v.size()}, t.get(), t.get(), ptrs.data());
  }
  void text(hid_t loc, const std::string& name, const std::string& s) {
    H5Handle t = vlen_string_type();
    const char* p = s.c_str();
    dataset(loc, name, {}, t.get(), t.get(), &p);
  }

  void check(int64_t r, const std::string& what) const {
    if (r < 0) throw_runtime("{}: HDF5 failed to {}", path_, what);
  }

 private:
  void attr(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type, const void* value) {
    H5Handle space(H5Screate(value ? H5S_SCALAR : H5S_NULL), H5Sclose);
    check(space.get(), "dataspace for attribute " + name);
    H5Handle a(H5Acreate2(obj, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    check(a.get(), "create attribute " + name);
    if (value) check(H5Awrite(a.get(), mem_type, value), "write attribute " + name);
  }

  hid_t file_;
  std::string path_;
};

void require_same_length(size_t expected, size_t got, const std::string& what) {
  if (expected != got) throw_runtime("results: {} has {} values, expected {}", what, got, expected);
}

void write_h5(const std::string& path, const RunResults& r, const ResultsWriteOptions& opt) {
  auto step = [&](std::string_view s) {
    if (opt.after_step) opt.after_step(s);
  };
  H5Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  if (file.get() < 0) throw_runtime("{}: cannot create results file", path);
  H5Out w(file.get(), path);
  const hid_t root = file.get();
  w.attr_str(root, "format", std::string(kResultsFormat));
  w.attr_str(root, "experiment", r.experiment);
  w.attr_str(root, "run_id", r.run_id);
  w.attr_str(root, "status", r.status);

  {
    H5Handle g = w.group("/config");
    w.text(g.get(), "text", r.config_text);
  }
  step("h5:config");

  {
    H5Handle g = w.group("/system");
    w.attr_str(g.get(), "cuda_version", r.system.cuda_version);
    w.attr_str(g.get(), "cudnn_version", r.system.cudnn_version);
    w.attr_str(g.get(), "nccl_version", r.system.nccl_version);
    w.attr_str(g.get(), "mpi_version", r.system.mpi_version);
    w.strings(g.get(), "hosts", r.system.hosts);
    H5Handle gpus = w.group("/system/gpus");
    std::vector<int64_t> rank;
    std::vector<std::string> host, name, uuid, driver;
    std::vector<double> limit;
    for (const auto& gi : r.system.gpus) {
      rank.push_back(gi.rank);
      host.push_back(gi.host.value_or(""));  // "" is the unknown string in string columns
      name.push_back(gi.name.value_or(""));
      uuid.push_back(gi.uuid.value_or(""));
      driver.push_back(gi.driver.value_or(""));
      limit.push_back(gi.power_limit_w);
    }
    w.i64(gpus.get(), "rank", rank);
    w.strings(gpus.get(), "host", host);
    w.strings(gpus.get(), "name", name);
    w.strings(gpus.get(), "uuid", uuid);
    w.strings(gpus.get(), "driver", driver);
    w.f64(gpus.get(), "power_limit_w", limit);
  }
  step("h5:system");

  {
    const Timeline& t = r.timeline;
    require_same_length(static_cast<size_t>(t.iterations() * t.ranks() * kTimelinePhaseCount), t.seconds().size(),
                        "timeline seconds");
    H5Handle g = w.group("/timeline");
    H5Handle ds = w.dataset(g.get(), "seconds",
                            {static_cast<hsize_t>(t.iterations()), static_cast<hsize_t>(t.ranks()),
                             static_cast<hsize_t>(kTimelinePhaseCount)},
                            H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, t.seconds().data());
    w.attr_str_array(ds.get(), "phases",
                     std::vector<std::string>(kTimelinePhaseNames.begin(), kTimelinePhaseNames.end()));
    w.attr_str(ds.get(), "units", std::string("s"));
    w.i64(g.get(), "iteration", t.iteration());
    w.dataset(g.get(), "warmup", {t.warmup().size()}, H5T_STD_U8LE, H5T_NATIVE_UINT8, t.warmup().data());
  }
  step("h5:timeline");

  {
    H5Handle g = w.group("/power");
    w.attr_i64(g.get(), "count", static_cast<int64_t>(r.power.size()));
    for (size_t k = 0; k < r.power.size(); ++k) {
      const PowerSeries& p = r.power[k];
      const size_t n = p.t_s.size();
      require_same_length(n, p.power_w.size(), "power_w");
      require_same_length(n, p.avg_power_w.size(), "avg_power_w");
      require_same_length(n, p.energy_mj.size(), "energy_mj");
      require_same_length(n, p.sm_clock_mhz.size(), "sm_clock_mhz");
      require_same_length(n, p.temperature_c.size(), "temperature_c");
      H5Handle s = w.group(fmt::format("/power/gpu{}", k));
      w.attr_i64(s.get(), "rank", p.rank);
      w.attr_str(s.get(), "uuid", p.uuid);
      w.f64(s.get(), "t_s", p.t_s);
      w.f64(s.get(), "power_w", p.power_w);
      w.f64(s.get(), "avg_power_w", p.avg_power_w);
      w.f64(s.get(), "energy_mj", p.energy_mj);
      w.f64(s.get(), "sm_clock_mhz", p.sm_clock_mhz);
      w.f64(s.get(), "temperature_c", p.temperature_c);
    }
  }
  step("h5:power");

  {
    H5Handle g = w.group("/epochs");
    std::vector<int64_t> epoch, iteration;
    std::vector<double> loss, top1, top5, lr;
    for (const auto& e : r.epochs) {
      epoch.push_back(e.epoch);
      iteration.push_back(e.iteration);
      loss.push_back(e.loss);
      top1.push_back(e.top1);
      top5.push_back(e.top5);
      lr.push_back(e.lr);
    }
    w.i64(g.get(), "epoch", epoch);
    w.i64(g.get(), "iteration", iteration);
    w.f64(g.get(), "loss", loss);
    w.f64(g.get(), "top1", top1);
    w.f64(g.get(), "top5", top5);
    w.f64(g.get(), "lr", lr);
  }
  step("h5:epochs");

  {
    auto write_values = [&](hid_t g, const std::map<std::string, SummaryValue>& values) {
      for (const auto& [name, v] : values) {
        if (std::holds_alternative<double>(v))
          w.attr_f64(g, name, std::get<double>(v));
        else if (std::holds_alternative<std::string>(v))
          w.attr_str(g, name, std::get<std::string>(v));
        else
          w.attr_null(g, name, H5T_IEEE_F64LE);
      }
    };
    H5Handle g = w.group("/summary");
    write_values(g.get(), r.summary);
    H5Handle m = w.group("/summary/methods");
    for (const auto& [name, method] : r.methods) w.attr_str(m.get(), name, method);
    if (!r.rank_summary.empty()) {
      H5Handle ranks = w.group("/summary/ranks");
      for (size_t i = 0; i < r.rank_summary.size(); ++i) {
        H5Handle rg = w.group("/summary/ranks/" + std::to_string(i));
        write_values(rg.get(), r.rank_summary[i]);
      }
    }
  }
  step("h5:summary");

  if (file.close() < 0) throw_runtime("{}: HDF5 failed to close (flush) the file", path);
}

// ---- reading ----

class H5In {
 public:
  H5In(hid_t file, std::string path) : file_(file), path_(std::move(path)) {}

  bool exists(hid_t loc, const std::string& name) const { return H5Lexists(loc, name.c_str(), H5P_DEFAULT) > 0; }

  H5Handle group(hid_t loc, const std::string& name) const {
    if (!exists(loc, name)) throw_config("{}: not a complete cnnscale results file: '{}' is missing", path_, name);
    H5Handle g(H5Gopen2(loc, name.c_str(), H5P_DEFAULT), H5Gclose);
    if (g.get() < 0) throw_config("{}: '{}' is not a group", path_, name);
    return g;
  }

  std::vector<std::string> attr_names(hid_t obj) const {
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

  // Null (H5S_NULL), a number or a string.
  SummaryValue attr(hid_t obj, const std::string& name) const {
    if (H5Aexists(obj, name.c_str()) <= 0) throw_config("{}: attribute '{}' is missing", path_, name);
    H5Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
    H5Handle space(H5Aget_space(a.get()), H5Sclose);
    H5Handle type(H5Aget_type(a.get()), H5Tclose);
    if (a.get() < 0 || space.get() < 0 || type.get() < 0) throw_config("{}: cannot open attribute '{}'", path_, name);
    if (H5Sget_simple_extent_type(space.get()) == H5S_NULL) return std::monostate{};
    const H5T_class_t cls = H5Tget_class(type.get());
    if (cls == H5T_STRING) {
      if (H5Tis_variable_str(type.get()) <= 0) throw_config("{}: attribute '{}' is not a UTF-8 string", path_, name);
      H5Handle mem = vlen_string_type();
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
  std::optional<std::string> attr_str(hid_t obj, const std::string& name) const {
    SummaryValue v = attr(obj, name);
    if (std::holds_alternative<std::monostate>(v)) return std::nullopt;
    if (!std::holds_alternative<std::string>(v)) throw_config("{}: attribute '{}' is not a string", path_, name);
    return std::get<std::string>(v);
  }
  int64_t attr_i64(hid_t obj, const std::string& name) const {
    if (H5Aexists(obj, name.c_str()) <= 0) throw_config("{}: attribute '{}' is missing", path_, name);
    H5Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
    int64_t v = 0;
    if (a.get() < 0 || H5Aread(a.get(), H5T_NATIVE_INT64, &v) < 0)
      throw_config("{}: cannot read attribute '{}' as an integer", path_, name);
    return v;
  }
  std::vector<std::string> attr_str_array(hid_t obj, const std::string& name) const {
    H5Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
    if (a.get() < 0) throw_config("{}: attribute '{}' is missing", path_, name);
    H5Handle space(H5Aget_space(a.get()), H5Sclose);
    hssize_t n = H5Sget_simple_extent_npoints(space.get());
    if (n < 0) throw_config("{}: cannot read attribute '{}'", path_, name);
    std::vector<char*> ptrs(static_cast<size_t>(n), nullptr);
    H5Handle mem = vlen_string_type();
    if (n && H5Aread(a.get(), mem.get(), ptrs.data()) < 0) throw_config("{}: cannot read attribute '{}'", path_, name);
    std::vector<std::string> out;
    for (char* p : ptrs) {
      out.emplace_back(p ? p : "");
      H5free_memory(p);
    }
    return out;
  }

  // Opens a dataset and returns its shape.
  H5Handle dataset(hid_t loc, const std::string& name, std::vector<hsize_t>& dims) const {
    if (!exists(loc, name)) throw_config("{}: not a complete cnnscale results file: '{}' is missing", path_, name);
    H5Handle ds(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose);
    if (ds.get() < 0) throw_config("{}: '{}' is not a dataset", path_, name);
    H5Handle space(H5Dget_space(ds.get()), H5Sclose);
    int rank = space.get() < 0 ? -1 : H5Sget_simple_extent_ndims(space.get());
    dims.assign(static_cast<size_t>(std::max(rank, 0)), 0);
    if (rank < 0 || H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
      throw_config("{}: cannot read the shape of '{}'", path_, name);
    return ds;
  }
  template <typename T>
  std::vector<T> read(hid_t loc, const std::string& name, hid_t mem_type, std::vector<hsize_t>* shape = nullptr) const {
    std::vector<hsize_t> dims;
    H5Handle ds = dataset(loc, name, dims);
    size_t n = 1;
    for (hsize_t d : dims) n *= d;
    std::vector<T> v(n);
    if (n && H5Dread(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
      throw_config("{}: cannot read '{}'", path_, name);
    if (shape) *shape = dims;
    return v;
  }
  std::vector<double> f64(hid_t loc, const std::string& name) const {
    return read<double>(loc, name, H5T_NATIVE_DOUBLE);
  }
  std::vector<int64_t> i64(hid_t loc, const std::string& name) const {
    return read<int64_t>(loc, name, H5T_NATIVE_INT64);
  }
  std::vector<std::string> strings(hid_t loc, const std::string& name) const {
    H5Handle mem = vlen_string_type();
    std::vector<char*> ptrs = read<char*>(loc, name, mem.get());
    std::vector<std::string> out;
    for (char* p : ptrs) {
      out.emplace_back(p ? p : "");
      H5free_memory(p);
    }
    return out;
  }

 private:
  hid_t file_;
  std::string path_;
};

std::optional<std::string> unless_empty(const std::string& s) {
  return s.empty() ? std::nullopt : std::optional<std::string>(s);
}

// ---- summary.json and CSV ----

// Summary figures that count something (ranks, samples, iterations, epochs, threads, a 0/1 switch):
// JSON integers, 12 not 12.0. Every other number is a measurement or derived from one and stays a
// JSON number even when it happens to be whole.
bool is_count_key(const std::string& name) {
  static const std::set<std::string> counts = {"world_size",
                                               "global_batch",
                                               "seed",
                                               "iterations",
                                               "iterations_per_epoch",
                                               "allreduce_overlap",
                                               "whole_epochs",
                                               "whole_iterations",
                                               "window_iterations",
                                               "window_extension_iterations",
                                               "threads_per_rank",
                                               "rank",
                                               "local_batch",
                                               "loop_pooled_repeats"};
  return counts.count(name) > 0;
}

nlohmann::json summary_number_json(const std::string& name, double v) {
  if (!std::isfinite(v)) return nlohmann::json();
  // Below 2^53 every whole double is exact as an int64; a count that is not whole stays a number.
  if (is_count_key(name) && v == std::floor(v) && std::abs(v) < 9007199254740992.0)
    return nlohmann::json(static_cast<int64_t>(v));
  return nlohmann::json(v);
}

}  // namespace

nlohmann::json summary_values_json(const std::map<std::string, SummaryValue>& values) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, v] : values) {
    if (std::holds_alternative<double>(v))
      out[name] = summary_number_json(name, std::get<double>(v));
    else if (std::holds_alternative<std::string>(v))
      out[name] = std::get<std::string>(v);
    else
      out[name] = nullptr;
  }
  return out;
}

namespace {

nlohmann::json summary_json(const RunResults& r) {
  using nlohmann::json;
  auto opt = [](const std::optional<std::string>& s) { return s ? json(*s) : json(nullptr); };
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json j;
  j["format"] = kResultsFormat;
  j["experiment"] = r.experiment;
  j["run_id"] = r.run_id;
  j["status"] = r.status;
  j["summary"] = summary_values_json(r.summary);
  j["methods"] = r.methods;
  j["ranks"] = json::array();
  for (const auto& rank : r.rank_summary) j["ranks"].push_back(summary_values_json(rank));
  json gpus = json::array();
  for (const auto& g : r.system.gpus)
    gpus.push_back({{"rank", g.rank},
                    {"host", opt(g.host)},
                    {"name", opt(g.name)},
                    {"uuid", opt(g.uuid)},
                    {"driver", opt(g.driver)},
                    {"power_limit_w", num(g.power_limit_w)}});
  j["system"] = {{"hosts", r.system.hosts},
                 {"gpus", gpus},
                 {"cuda_version", opt(r.system.cuda_version)},
                 {"cudnn_version", opt(r.system.cudnn_version)},
                 {"nccl_version", opt(r.system.nccl_version)},
                 {"mpi_version", opt(r.system.mpi_version)}};
  int64_t warmup = 0;
  for (uint8_t w : r.timeline.warmup()) warmup += w;
  j["timeline"] = {
      {"iterations", r.timeline.iterations()}, {"ranks", r.timeline.ranks()}, {"warmup_iterations", warmup}};
  return j;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// Numbers in the shortest form that reads back exactly ("nan" for NaN, which pandas reads as NaN);
// null is an empty field.
std::string csv_value(const SummaryValue& v) {
  if (std::holds_alternative<double>(v)) return fmt::format("{}", std::get<double>(v));
  if (std::holds_alternative<std::string>(v)) return csv_field(std::get<std::string>(v));
  return "";
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else if (c != '\r') {
      out.back() += c;
    }
  }
  return out;
}

std::string csv_row(const RunResults& r, const std::vector<std::string>& columns) {
  std::string row;
  for (size_t i = 0; i < columns.size(); ++i) {
    if (i) row += ',';
    const std::string& c = columns[i];
    if (c == "experiment") {
      row += csv_field(r.experiment);
    } else if (c == "run_id") {
      row += csv_field(r.run_id);
    } else if (auto it = r.summary.find(c); it != r.summary.end()) {
      row += csv_value(it->second);
    }
  }
  return row + "\n";
}

std::string csv_line(const std::vector<std::string>& fields) {
  std::string s;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) s += ',';
    s += csv_field(fields[i]);
  }
  return s + "\n";
}

void check_name(const std::string& what, const std::string& s) {
  if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos || s.find('\0') != std::string::npos)
    throw_config("results: {} '{}' cannot be a folder name", what, s);
}

}  // namespace

void check_results_name(const std::string& flag, const std::string& name) {
  static const std::regex name_re("[A-Za-z0-9][A-Za-z0-9._+=-]*");
  if (!std::regex_match(name, name_re))
    throw_config("{} '{}': use letters, digits and . _ + = - (not starting with . or -)", flag, name);
}

std::string make_run_id(const std::string& config_text, std::chrono::system_clock::time_point now) {
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  // FNV-1a: stable, no dependency; uniqueness only has to hold among runs of one second.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  };
  mix(config_text);
  mix(host);
  mix(std::to_string(::getpid()));
  mix(std::to_string(now.time_since_epoch().count()));
  return fmt::format("{}-{:08x}", stamp, static_cast<uint32_t>(h ^ (h >> 32)));
}

std::vector<std::string> summary_csv_header(const RunResults& results) {
  std::vector<std::string> h = {"experiment", "run_id"};
  for (const auto& [name, v] : results.summary) h.push_back(name);
  return h;
}

std::string results_status(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "summary.json");
  if (!in) return "";
  try {
    const auto j = nlohmann::json::parse(in);
    if (!j.contains("status")) return std::string(kRunComplete);  // written before the field existed
    return j["status"].is_string() ? j["status"].get<std::string>() : "";
  } catch (const nlohmann::json::exception&) {
    return "";
  }
}

bool run_folder_writable(const std::string& run_dir) {
  std::error_code ec;
  return !fs::exists(run_dir, ec) || results_status(run_dir) == kRunInterrupted;
}

std::string write_run_results(const RunResults& results, const ResultsWriteOptions& options) {
  h5::silence_hdf5();
  check_name("experiment", results.experiment);
  check_name("run id", results.run_id);
  for (const auto& [name, v] : results.summary)
    if (name == "experiment" || name == "run_id" || name.empty())
      throw_config("results: '{}' cannot be a summary name", name);
  auto step = [&](std::string_view s) {
    if (options.after_step) options.after_step(s);
  };

  const fs::path exp_dir = fs::path(options.root) / results.experiment;
  const fs::path final_dir = exp_dir / results.run_id;
  const fs::path partial = exp_dir / (results.run_id + ".partial");
  std::error_code ec;
  fs::create_directories(exp_dir, ec);
  if (ec) throw_runtime("{}: cannot create: {}", exp_dir.string(), ec.message());
  if (!run_folder_writable(final_dir.string()))
    throw_runtime("{}: results of this run id exist already", final_dir.string());
  // The one folder a write may replace: an interrupted run's, superseded by its resumption.
  const bool replace_interrupted = fs::exists(final_dir);
  // A leftover of a killed run with this very id: nothing in it was published.
  fs::remove_all(partial, ec);
  if (!fs::create_directory(partial, ec) || ec) throw_runtime("{}: cannot create: {}", partial.string(), ec.message());

  try {
    const std::string h5_path = (partial / "run.h5").string();
    const std::string h5_tmp = h5_path + ".tmp";
    write_h5(h5_tmp, results, options);
    h5::fsync_path(h5_tmp, false);
    fs::rename(h5_tmp, h5_path);
    step("run.h5");
    write_file_atomically((partial / "summary.json").string(), summary_json(results).dump(2) + "\n");
    step("summary.json");
    write_file_atomically((partial / "summary.csv").string(),
                          csv_line(summary_csv_header(results)) + csv_row(results, summary_csv_header(results)));
    step("summary.csv");
    h5::fsync_path(partial.string(), true);
    if (replace_interrupted) {
      // Moved aside first so that a crash in between leaves either folder whole, never a mix.
      const fs::path old = exp_dir / (results.run_id + ".interrupted-old");
      fs::remove_all(old, ec);
      fs::rename(final_dir, old);
      fs::rename(partial, final_dir);
      fs::remove_all(old, ec);
    } else {
      fs::rename(partial, final_dir);
    }
    h5::fsync_path(exp_dir.string(), true);
  } catch (...) {
    fs::remove_all(partial, ec);
    throw;
  }
  return final_dir.string();
}

RunResults read_run_results(const std::string& path) {
  h5::silence_hdf5();
  std::error_code ec;
  const std::string file_path = fs::is_directory(path, ec) ? (fs::path(path) / "run.h5").string() : path;
  if (!fs::is_regular_file(file_path, ec)) throw_config("{}: results file not found", file_path);
  if (H5Fis_hdf5(file_path.c_str()) <= 0) throw_config("{}: not an HDF5 file", file_path);
  H5Handle file(H5Fopen(file_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (file.get() < 0) throw_config("{}: cannot open as HDF5", file_path);
  H5In in(file.get(), file_path);
  const hid_t root = file.get();
  if (H5Aexists(root, "format") <= 0 || in.attr_str(root, "format") != std::string(kResultsFormat))
    throw_config("{}: not a {} file", file_path, kResultsFormat);

  RunResults r;
  r.experiment = in.attr_str(root, "experiment").value_or("");
  r.run_id = in.attr_str(root, "run_id").value_or("");
  if (H5Aexists(root, "status") > 0) r.status = in.attr_str(root, "status").value_or(std::string(kRunComplete));
  {
    H5Handle g = in.group(root, "config");
    std::vector<std::string> text;
    H5Handle mem = vlen_string_type();
    char* p = nullptr;
    std::vector<hsize_t> dims;
    H5Handle ds = in.dataset(g.get(), "text", dims);
    if (H5Dread(ds.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p) < 0)
      throw_config("{}: cannot read /config/text", file_path);
    r.config_text = p ? p : "";
    H5free_memory(p);
  }
  {
    H5Handle g = in.group(root, "system");
    r.system.cuda_version = in.attr_str(g.get(), "cuda_version");
    r.system.cudnn_version = in.attr_str(g.get(), "cudnn_version");
    r.system.nccl_version = in.attr_str(g.get(), "nccl_version");
    r.system.mpi_version = in.attr_str(g.get(), "mpi_version");
    r.system.hosts = in.strings(g.get(), "hosts");
    H5Handle gpus = in.group(g.get(), "gpus");
    auto rank = in.i64(gpus.get(), "rank");
    auto host = in.strings(gpus.get(), "host");
    auto name = in.strings(gpus.get(), "name");
    auto uuid = in.strings(gpus.get(), "uuid");
    auto driver = in.strings(gpus.get(), "driver");
    auto limit = in.f64(gpus.get(), "power_limit_w");
    for (size_t n : {host.size(), name.size(), uuid.size(), driver.size(), limit.size()})
      if (n != rank.size()) throw_config("{}: /system/gpus columns differ in length", file_path);
    for (size_t i = 0; i < rank.size(); ++i)
      r.system.gpus.push_back(GpuInfo{rank[i], unless_empty(host[i]), unless_empty(name[i]), unless_empty(uuid[i]),
                                      unless_empty(driver[i]), limit[i]});
  }
  {
    H5Handle g = in.group(root, "timeline");
    std::vector<hsize_t> dims;
    auto seconds = in.read<double>(g.get(), "seconds", H5T_NATIVE_DOUBLE, &dims);
    if (dims.size() != 3 || dims[2] != static_cast<hsize_t>(kTimelinePhaseCount))
      throw_config("{}: /timeline/seconds is not (iterations, ranks, {})", file_path, kTimelinePhaseCount);
    {
      H5Handle ds = in.dataset(g.get(), "seconds", dims);
      auto phases = in.attr_str_array(ds.get(), "phases");
      if (!std::equal(phases.begin(), phases.end(), kTimelinePhaseNames.begin(), kTimelinePhaseNames.end()))
        throw_config("{}: /timeline/seconds has phases [{}], expected [{}]", file_path, fmt::join(phases, ", "),
                     fmt::join(kTimelinePhaseNames, ", "));
    }
    auto iteration = in.i64(g.get(), "iteration");
    auto warmup = in.read<uint8_t>(g.get(), "warmup", H5T_NATIVE_UINT8);
    if (iteration.size() != dims[0] || warmup.size() != dims[0])
      throw_config("{}: /timeline iteration/warmup lengths differ from the seconds array", file_path);
    r.timeline.assign(static_cast<int64_t>(dims[1]), std::move(iteration), std::move(warmup), std::move(seconds));
  }
  {
    H5Handle g = in.group(root, "power");
    const int64_t count = in.attr_i64(g.get(), "count");
    for (int64_t k = 0; k < count; ++k) {
      H5Handle s = in.group(g.get(), fmt::format("gpu{}", k));
      PowerSeries p;
      p.rank = in.attr_i64(s.get(), "rank");
      p.uuid = in.attr_str(s.get(), "uuid");
      p.t_s = in.f64(s.get(), "t_s");
      p.power_w = in.f64(s.get(), "power_w");
      p.avg_power_w = in.f64(s.get(), "avg_power_w");
      p.energy_mj = in.f64(s.get(), "energy_mj");
      p.sm_clock_mhz = in.f64(s.get(), "sm_clock_mhz");
      p.temperature_c = in.f64(s.get(), "temperature_c");
      for (size_t n :
           {p.power_w.size(), p.avg_power_w.size(), p.energy_mj.size(), p.sm_clock_mhz.size(), p.temperature_c.size()})
        if (n != p.t_s.size()) throw_config("{}: /power/gpu{} columns differ in length", file_path, k);
      r.power.push_back(std::move(p));
    }
  }
  {
    H5Handle g = in.group(root, "epochs");
    auto epoch = in.i64(g.get(), "epoch");
    auto iteration = in.i64(g.get(), "iteration");
    auto loss = in.f64(g.get(), "loss");
    auto top1 = in.f64(g.get(), "top1");
    auto top5 = in.f64(g.get(), "top5");
    auto lr = in.f64(g.get(), "lr");
    for (size_t n : {iteration.size(), loss.size(), top1.size(), top5.size(), lr.size()})
      if (n != epoch.size()) throw_config("{}: /epochs columns differ in length", file_path);
    for (size_t i = 0; i < epoch.size(); ++i)
      r.epochs.push_back(EpochRecord{epoch[i], iteration[i], loss[i], top1[i], top5[i], lr[i]});
  }
  {
    H5Handle g = in.group(root, "summary");
    for (const auto& name : in.attr_names(g.get())) r.summary[name] = in.attr(g.get(), name);
    H5Handle m = in.group(g.get(), "methods");
    for (const auto& name : in.attr_names(m.get())) {
      auto s = in.attr_str(m.get(), name);
      if (!s) throw_config("{}: /summary/methods/{} is null", file_path, name);
      r.methods[name] = *s;
    }
    if (in.exists(g.get(), "ranks")) {
      H5Handle ranks = in.group(g.get(), "ranks");
      for (size_t i = 0; in.exists(ranks.get(), std::to_string(i)); ++i) {
        H5Handle rg = in.group(ranks.get(), std::to_string(i));
        auto& values = r.rank_summary.emplace_back();
        for (const auto& name : in.attr_names(rg.get())) values[name] = in.attr(rg.get(), name);
      }
    }
  }
  return r;
}

void append_summary_csv(const std::string& csv_path, const RunResults& results) {
  int fd = ::open(csv_path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw_runtime("{}: cannot open: {}", csv_path, std::strerror(errno));
  // The lock goes with the descriptor: closing it (also on a throw) releases it.
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::flock(fd, LOCK_EX) != 0) throw_runtime("{}: cannot lock: {}", csv_path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_runtime("{}: cannot stat", csv_path);

  std::vector<std::string> columns;
  std::string out;
  if (st.st_size == 0) {
    columns = summary_csv_header(results);
    out = csv_line(columns);
  } else {
    // The header is the first line; read it in chunks until its newline.
    std::string head;
    char buf[4096];
    off_t off = 0;
    while (head.find('\n') == std::string::npos) {
      ssize_t n = ::pread(fd, buf, sizeof buf, off);
      if (n < 0) throw_runtime("{}: cannot read: {}", csv_path, std::strerror(errno));
      if (n == 0) break;
      head.append(buf, static_cast<size_t>(n));
      off += n;
    }
    if (head.find('\n') == std::string::npos) throw_config("{}: the header line has no end", csv_path);
    columns = split_csv_line(head.substr(0, head.find('\n')));
    if (columns.size() < 2 || columns[0] != "experiment" || columns[1] != "run_id")
      throw_config("{}: not a cnnscale summary CSV (header starts '{}')", csv_path, head.substr(0, 40));
    std::set<std::string> known(columns.begin(), columns.end());
    for (const auto& [name, v] : results.summary)
      if (!known.count(name)) log::warn("{}: no column '{}'; run {} leaves it out", csv_path, name, results.run_id);
    // A file cut short by a killed writer would glue our row onto its last line.
    char last = '\n';
    if (::pread(fd, &last, 1, st.st_size - 1) == 1 && last != '\n') out = "\n";
  }
  out += csv_row(results, columns);
  write_all(fd, out, csv_path);
  if (::fsync(fd) != 0) throw_runtime("{}: fsync failed", csv_path);
}

}  // namespace cnnscale
