// `bench allreduce` results files (see report_allreduce.hpp): writing them without ever exposing
// or replacing a half-written file, finding and parsing them, and the report's table by rank count.
#include "experiment/report_allreduce.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <system_error>
#include <tuple>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/precision.hpp"
#include "experiment/report_data.hpp"
#include "io/allreduce_results.hpp"
#include "io/atomic_file.hpp"
#include "io/bench_folder.hpp"
#include "parallel/data_parallel.hpp"

namespace cnnscale::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Lower-case letters, digits and '_' only: safe in file names and CSV column names.
std::string name_part(const std::string& s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    out += std::isalnum(u) ? static_cast<char>(std::tolower(u)) : '_';
  }
  return out.empty() ? "_" : out;
}

std::string size_label(int64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (u + 1 < std::size(units) && v >= 1024) v /= 1024, ++u;
  return v == std::floor(v) ? fmt::format("{:.0f} {}", v, units[u]) : fmt::format("{:.4g} {}", v, units[u]);
}

std::string ranks_text(const std::string& device, int n) {
  if (device == "gpu") return n == 1 ? "1 GPU" : fmt::format("{} GPUs", n);
  if (device == "cpu") return n == 1 ? "1 CPU rank" : fmt::format("{} CPU ranks", n);
  return fmt::format("{} {} rank(s)", n, device);
}

// "2 × NVIDIA H200 on 1 host" from rank_devices entries "<host> gpu:<i> <model> GPU-<uuid>"
// (or "<host> cpu").
std::string devices_text(const std::vector<std::string>& rank_devices) {
  std::map<std::string, int> models;
  std::set<std::string> hosts;
  for (const std::string& line : rank_devices) {
    std::istringstream is(line);
    std::vector<std::string> words;
    for (std::string w; is >> w;) words.push_back(w);
    if (words.empty()) continue;
    hosts.insert(words[0]);
    if (words.size() > 2 && (words.back().starts_with("GPU-") || words.back().starts_with("MIG-"))) words.pop_back();
    std::string model;
    for (size_t i = 2; i < words.size(); ++i) model += (model.empty() ? "" : " ") + words[i];
    if (model.empty()) model = words.size() > 1 && words[1] == "cpu" ? "CPU" : (words.size() > 1 ? words[1] : "?");
    ++models[model];
  }
  std::string out;
  for (const auto& [model, count] : models) out += fmt::format("{}{} × {}", out.empty() ? "" : " + ", count, model);
  return fmt::format("{} on {} host{}", out, hosts.size(), hosts.size() == 1 ? "" : "s");
}

struct BenchSetting {
  std::string device, algo, dtype;
  std::string issue = "host";  // GPU allreduces replayed from a CUDA graph ("graph") or host-issued
  NcclTuning nccl;             // asked for: NCCL_MAX_CTAS (0: NCCL's choice), CTA policy, stream priority
  // the study's GPUs first; per algorithm, fp32 before the 16-bit exchanges, graph before host,
  // NCCL's own CTA count before capped ones, NCCL's CTA policy before the others, high priority before low
  auto order() const {
    return std::make_tuple(device != "gpu", device, algo, dtype != "fp32", dtype, issue, nccl.max_ctas, nccl.cta_policy,
                           nccl.low_priority);
  }
  // "tree", with a 16-bit element type "tree bf16", for host-issued GPU allreduces "tree host-issued"
  // (graph replay, the default since it was recorded, names nothing), with a CTA cap "tree <=8 CTAs",
  // with a CTA policy "tree efficiency", on a low-priority stream "tree low priority"
  std::string name() const {
    std::string base = dtype == "fp32" ? algo : fmt::format("{} {}", algo, dtype);
    if (device == "gpu" && issue == "host") base += " host-issued";
    if (nccl.max_ctas > 0) base += fmt::format(" <={} CTAs", nccl.max_ctas);
    if (nccl.cta_policy != CtaPolicy::Default) base += fmt::format(" {}", to_string(nccl.cta_policy));
    if (nccl.low_priority) base += " low priority";
    return base;
  }
  bool operator<(const BenchSetting& o) const { return order() < o.order(); }
};

// One column group: the files of a setting at one rank count.
struct Group {
  BenchSetting setting;
  int ranks = 0;
  std::vector<const AllreduceBenchFile*> files;
  // "8 GPUs" or, with several settings, "8 GPUs, tree" (headers) / "8 GPUs tree" (inside lists).
  std::string label(bool qualify, const char* sep = ", ") const {
    const std::string ranks_part = ranks_text(setting.device, ranks);
    return qualify ? fmt::format("{}{}{}", ranks_part, sep, setting.name()) : ranks_part;
  }
  std::string csv(bool qualify) const {
    return (qualify ? name_part(setting.device) + "_" + name_part(setting.name()) + "_" : "") + fmt::format("n{}", ranks);
  }
  Stat stat(int64_t bytes, double AllreduceBenchRow::*member) const {
    std::vector<double> values;
    for (const AllreduceBenchFile* f : files)
      for (const AllreduceBenchRow& r : f->bench.rows)
        if (r.bytes == bytes) values.push_back(r.*member);
    return stat_of(values);
  }
};

// "A" when every group has the same value, else "A (2, 4 GPUs); B (8 GPUs)".
std::string per_group(const std::vector<Group>& groups, bool qualify,
                      const std::function<std::string(const Group&)>& value) {
  std::vector<std::pair<std::string, std::vector<std::string>>> values;  // value -> group labels, first seen first
  for (const Group& g : groups) {
    const std::string v = value(g);
    auto it = std::find_if(values.begin(), values.end(), [&](const auto& p) { return p.first == v; });
    if (it == values.end()) it = values.insert(values.end(), {v, {}});
    it->second.push_back(g.label(qualify, " "));
  }
  if (values.size() == 1) return values[0].first;
  std::string out;
  for (const auto& [v, labels] : values) {
    std::string which;
    for (const std::string& l : labels) which += (which.empty() ? "" : ", ") + l;
    out += fmt::format("{}{} ({})", out.empty() ? "" : "; ", v, which);
  }
  return out;
}

// The distinct values of `value` over a group's files, joined with " / ".
std::string distinct(const Group& g, const std::function<std::string(const AllreduceBenchFile&)>& value) {
  std::vector<std::string> seen;
  for (const AllreduceBenchFile* f : g.files)
    if (std::string v = value(*f); std::find(seen.begin(), seen.end(), v) == seen.end()) seen.push_back(v);
  std::string out;
  for (const std::string& v : seen) out += (out.empty() ? "" : " / ") + v;
  return out;
}

}  // namespace

std::string allreduce_bench_dir(const std::string& root, const std::string& experiment) {
  return (fs::path(root) / experiment / "allreduce").string();
}

std::string allreduce_bench_stem(const AllreduceBenchResult& bench, const std::string& utc_stamp) {
  const std::string dtype = bench.dtype == "fp32" ? "" : fmt::format("-{}", name_part(bench.dtype));
  return fmt::format("{}-n{}-{}{}-{}", name_part(bench.device), bench.ranks, name_part(bench.algo), dtype, utc_stamp);
}

void prepare_allreduce_bench_dir(const std::string& dir) { prepare_writable_dir(dir); }

std::string write_allreduce_bench_folder(const std::string& dir, const std::string& stem, const json& j) {
  return write_bench_folder(
      dir, stem, j,
      {"bytes", "count", "type", "time_us", "time_min_us", "time_max_us", "algbw_gbs", "busbw_gbs", "wrong",
       "energy_iters", "energy_seconds", "joules", "nj_per_byte", "dynamic_nj_per_byte", "watts_per_device"},
      {"benchmark", "format", "time", "host", "device", "algo", "dtype", "issue", "library", "energy_method"},
      {"ranks", "iters", "repeats", "warmup_iters", "energy_window_seconds", "energy_settle_seconds",
       "idle_watts_per_device"});
}

AllreduceBenchFile parse_allreduce_bench(const json& j, const std::string& path) {
  if (!j.is_object()) throw_config("{}: not a JSON object", path);
  const AllreduceResult a = allreduce_result_from_json(j, path);
  const auto text = [&](const TextFigure& t, const char* key) {
    if (!t.has_value()) throw_config("{}: \"{}\" is not a string", path, key);
    return t.value();
  };
  const auto count = [&](const CountFigure& c, const char* key) {
    if (!c.has_value()) throw_config("{}: \"{}\" is not an integer", path, key);
    return c.value();
  };
  if (text(a.benchmark, "benchmark") != "allreduce") throw_config("{}: \"benchmark\" is not \"allreduce\"", path);
  if (const std::string format = text(a.format, "format"); format != kAllreduceBenchFormat)
    throw_config("{}: format \"{}\" is not \"{}\"", path, format, kAllreduceBenchFormat);
  AllreduceBenchFile f;
  f.path = path;
  f.result = a;
  f.time = text(a.time, "time");
  f.host = text(a.host, "host");
  AllreduceBenchResult& b = f.bench;
  b.ranks = static_cast<int>(count(a.ranks, "ranks"));
  if (b.ranks < 1) throw_config("{}: \"ranks\" is {}", path, b.ranks);
  b.device = text(a.device, "device");
  b.algo = text(a.algo, "algo");
  // Files written before 16-bit sums existed summed floats and have no "dtype".
  if (a.dtype.written()) b.dtype = text(a.dtype, "dtype");  // else the struct's fp32
  // Files written before graph replay existed issued every allreduce from the host and have no "issue".
  if (a.issue.written()) b.issue = text(a.issue, "issue");  // else the struct's "host"
  if (b.issue != "graph" && b.issue != "host")
    throw_config("{}: \"issue\" is \"{}\", not \"graph\" or \"host\"", path, b.issue);
  if (a.max_ctas.has_value()) b.nccl.max_ctas = static_cast<int>(a.max_ctas.value());
  // Files written before these were recorded ran NCCL's CTA policy on a stream of the greatest priority.
  if (a.cta_policy.has_value()) b.nccl.cta_policy = parse_cta_policy(a.cta_policy.value(), path + ": \"cta_policy\"");
  if (a.priority.has_value()) {
    const std::string& priority = a.priority.value();
    if (priority != "high" && priority != "low")
      throw_config("{}: \"priority\" is \"{}\", not \"high\" or \"low\"", path, priority);
    b.nccl.low_priority = priority == "low";
  }
  const auto element = static_cast<int64_t>(dtype_size(parse_float_type(b.dtype, path + ": \"dtype\"")));
  b.library = text(a.library, "library");
  b.warmup_iters = static_cast<int>(count(a.warmup_iters, "warmup_iters"));
  b.iters = static_cast<int>(count(a.iters, "iters"));
  if (a.energy_method.written()) {
    b.energy_method = text(a.energy_method, "energy_method");
    if (!a.energy_window_seconds.written()) throw_config("{}: missing \"energy_window_seconds\"", path);
    if (!a.idle_watts_per_device.written()) throw_config("{}: missing \"idle_watts_per_device\"", path);
    b.energy_window_seconds = a.energy_window_seconds.value_or(kMissing);
    b.idle_watts = a.idle_watts_per_device.value_or(kMissing);
  }
  b.rank_devices = a.rank_devices.value_or({});
  if (!a.rows.has_value()) throw_config("{}: \"rows\" is not an array", path);
  const std::vector<AllreduceSizeResult>& rows = a.rows.value();
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string where = fmt::format("{}: rows[{}]", path, i);
    const AllreduceSizeResult& s = rows[i];
    AllreduceBenchRow r;
    if (!s.bytes.has_value()) throw_config("{}: \"bytes\" is not an integer", where);
    r.bytes = s.bytes.value();
    if (r.bytes <= 0) throw_config("{}: \"bytes\" is {}", where, r.bytes);
    r.count = r.bytes / element;
    r.time_us = s.time_us.value_or(kMissing);
    r.algbw_gbs = s.algbw_gbs.value_or(kMissing);
    r.busbw_gbs = s.busbw_gbs.value_or(kMissing);
    if (s.wrong.has_value()) r.wrong = s.wrong.value();
    // Energy fields exist only in files of a bench that measured energy (GPU, --energy-window > 0).
    if (s.nj_per_byte.written()) {
      for (const auto& [figure, key] : {std::pair{s.energy_seconds.written(), "energy_seconds"},
                                        std::pair{s.joules.written(), "joules"},
                                        std::pair{s.dynamic_nj_per_byte.written(), "dynamic_nj_per_byte"},
                                        std::pair{s.watts_per_device.written(), "watts_per_device"}})
        if (!figure) throw_config("{}: missing \"{}\"", where, key);
      if (!s.energy_iters.has_value()) throw_config("{}: \"energy_iters\" is not an integer", where);
      r.energy_iters = s.energy_iters.value();
      r.energy_seconds = s.energy_seconds.value_or(kMissing);
      r.joules = s.joules.value_or(kMissing);
      r.nj_per_byte = s.nj_per_byte.value_or(kMissing);
      r.dynamic_nj_per_byte = s.dynamic_nj_per_byte.value_or(kMissing);
      r.watts = s.watts_per_device.value_or(kMissing);
    }
    b.rows.push_back(r);
  }
  return f;
}

std::vector<AllreduceBenchFile> find_allreduce_benches(const std::string& results_dir, int* skipped) {
  // Files of earlier versions (allreduce/<stem>.json) and result folders (allreduce/<stem>/summary.json).
  std::vector<fs::path> paths = find_json_files(results_dir, "allreduce");
  for (const fs::path& p : find_json_files_named(results_dir, "summary.json"))
    if (p.parent_path().parent_path().filename() == "allreduce" &&
        !p.parent_path().filename().string().starts_with(".") && !fs::exists(p.parent_path() / "run.h5"))
      paths.push_back(p);
  std::sort(paths.begin(), paths.end());

  std::vector<AllreduceBenchFile> files;
  int bad = 0;
  for (const fs::path& p : paths) {
    try {
      std::ifstream in(p);
      if (!in) throw_runtime("cannot open");
      std::stringstream ss;
      ss << in.rdbuf();
      const json j = json::parse(ss.str());
      // A folder's summary.json without "benchmark" (another command's, under an experiment named
      // allreduce) is not a broken one of ours.
      if (p.filename() == "summary.json" && j.is_object() && !j.contains("benchmark")) {
        log::debug("report: {} is not a bench allreduce summary", p.string());
        continue;
      }
      // Another benchmark's file in an allreduce folder is not a broken one of ours.
      if (j.is_object() && j.contains("benchmark") && j["benchmark"].is_string() && j["benchmark"] != "allreduce") {
        log::debug("report: {} is a '{}' benchmark, not allreduce", p.string(), j["benchmark"].get<std::string>());
        continue;
      }
      files.push_back(parse_allreduce_bench(j, p.string()));
    } catch (const std::exception& e) {
      ++bad;
      const std::string what = e.what();
      // parse_allreduce_bench's messages already start with the path.
      log::warn("report: skipping malformed allreduce bench file {}: {}", p.string(),
                what.starts_with(p.string() + ": ") ? what.substr(p.string().size() + 2) : what);
    }
  }
  if (skipped) *skipped = bad;
  return files;
}

namespace {

// One figure of a row, its header word, unit and CSV prefix.
struct BenchFigure {
  double AllreduceBenchRow::*member;
  const char *header, *unit, *csv;
};

// Rows per message size, a column per (setting, rank count) and figure, and the notes every
// allreduce table carries; `energy` adds the energy note instead of the one-rank busbw note.
Table lay_out(const std::vector<AllreduceBenchFile>& files, const std::vector<BenchFigure>& figures, Table t,
              bool energy) {
  std::map<std::pair<BenchSetting, int>, Group> by_key;  // ordered: setting, then ranks ascending
  std::set<int64_t> sizes;
  for (const AllreduceBenchFile& f : files) {
    const BenchSetting setting{f.bench.device, f.bench.algo, f.bench.dtype, f.bench.issue, f.bench.nccl};
    Group& g = by_key[{setting, f.bench.ranks}];
    g.setting = setting;
    g.ranks = f.bench.ranks;
    g.files.push_back(&f);
    for (const AllreduceBenchRow& r : f.bench.rows) sizes.insert(r.bytes);
  }
  std::vector<Group> groups;
  std::vector<std::vector<const Group*>> blocks;  // the groups of one setting
  for (auto& [key, g] : by_key) groups.push_back(std::move(g));
  for (const Group& g : groups) {
    if (blocks.empty() || blocks.back().front()->setting < g.setting) blocks.emplace_back();
    blocks.back().push_back(&g);
  }
  const bool qualify = blocks.size() > 1;
  for (const auto& block : blocks)
    for (const BenchFigure& f : figures)
      for (const Group* g : block)
        t.columns.push_back({fmt::format("{} {} ({})", f.header, g->label(qualify), f.unit), f.csv + g->csv(qualify)});
  bool any_null = false;
  for (int64_t bytes : sizes) {
    std::vector<Cell> cells = {Cell::of(size_label(bytes)), Cell::of(std::to_string(bytes))};
    for (const auto& block : blocks)
      for (const BenchFigure& f : figures)
        for (const Group* g : block) {
          cells.push_back(Cell::of(g->stat(bytes, f.member)));
          any_null = any_null || cells.back().value.null();
        }
    t.rows.push_back(std::move(cells));
  }
  if (groups.empty()) return t;

  if (qualify)
    t.notes.push_back("Columns per device and the NCCL_ALGO in effect (mpi: MPI_Allreduce, Open MPI's own choice).");
  t.notes.push_back("Files (repeats): " +
                    per_group(groups, qualify, [](const Group& g) { return std::to_string(g.files.size()); }) + ".");
  t.notes.push_back("Library: " +
                    per_group(groups, qualify,
                              [](const Group& g) {
                                return distinct(g, [](const AllreduceBenchFile& f) { return f.bench.library; });
                              }) +
                    ".");
  std::string devices;
  for (const Group& g : groups)
    devices += fmt::format("{}{}: {}", devices.empty() ? "" : "; ", g.label(qualify),
                           distinct(g, [](const AllreduceBenchFile& f) { return devices_text(f.bench.rank_devices); }));
  t.notes.push_back("Devices: " + devices + ".");
  t.notes.push_back("Allreduces per size: " +
                    per_group(groups, qualify,
                              [](const Group& g) {
                                return distinct(g, [](const AllreduceBenchFile& f) {
                                  return fmt::format("-w {} warm-up, -n {} timed", f.bench.warmup_iters, f.bench.iters);
                                });
                              }) +
                    ".");
  if (energy) {
    t.notes.push_back(
        "Idle power per GPU, over a window before the sweep: " +
        per_group(groups, qualify,
                  [](const Group& g) {
                    return distinct(g, [](const AllreduceBenchFile& f) {
                      return std::isnan(f.bench.idle_watts) ? std::string("not measured")
                                                             : fmt::format("{:.0f} W", f.bench.idle_watts);
                    });
                  }) +
        ". Energy window per size: " +
        per_group(groups, qualify,
                  [](const Group& g) {
                    return distinct(g, [](const AllreduceBenchFile& f) {
                      return fmt::format("{:g} s", f.bench.energy_window_seconds);
                    });
                  }) +
        ".");
  } else if (std::any_of(groups.begin(), groups.end(), [](const Group& g) { return g.ranks == 1; })) {
    t.notes.push_back(
        "One rank: busbw is 0 by definition (2(n−1)/n = 0, nothing crosses a bus); its time is the "
        "call's local cost.");
  }
  if (any_null)
    t.notes.push_back(energy ? "— : no file of that setting and rank count measured that size, or a GPU's counter "
                               "was unreadable in its window."
                             : "— : no file of that setting and rank count measured that size.");
  return t;
}

}  // namespace

Table allreduce_table(const std::vector<AllreduceBenchFile>& files) {
  // busbw side by side across rank counts (the comparison nccl-tests users make), then the times.
  return lay_out(files,
                 {{&AllreduceBenchRow::busbw_gbs, "busbw", "GB/s", "busbw_gbs_"},
                  {&AllreduceBenchRow::time_us, "time", "µs", "time_us_"}},
                 Table{"allreduce",
                       "Allreduce bus bandwidth by rank count",
                       "`cnnscale bench allreduce` (in-place sum over all ranks, of fp32 unless the column names bf16 "
                       "or fp16): bus bandwidth and time per allreduce, one row per message size and a column per "
                       "rank count. busbw = algbw × 2(n−1)/n as nccl-tests (algbw = size / time, GB = 10⁹ bytes); "
                       "each value is the mean time of -n back-to-back allreduces of the slowest rank; mean ± sample "
                       "std over the files of one setting (repeats).",
                       {{"size", "size", false}, {"bytes", "bytes", false}},
                       {},
                       {}},
                 /*energy=*/false);
}

Table allreduce_energy_table(const std::vector<AllreduceBenchFile>& files) {
  // One rank moves nothing (NCCL's in-place sum over one rank is a no-op): its window is the idle
  // power, and a figure per byte of it would be noise over nothing.
  std::vector<AllreduceBenchFile> measured;
  bool single = false;
  for (const AllreduceBenchFile& f : files) {
    if (f.bench.energy_method.empty()) continue;
    if (f.bench.ranks > 1)
      measured.push_back(f);
    else
      single = true;
  }
  Table t = lay_out(measured,
                 {{&AllreduceBenchRow::dynamic_nj_per_byte, "above idle", "nJ/B", "dynamic_nj_per_byte_"},
                  {&AllreduceBenchRow::nj_per_byte, "energy", "nJ/B", "nj_per_byte_"},
                  {&AllreduceBenchRow::watts, "power", "W per GPU", "watts_"}},
                 Table{"allreduce_energy",
                       "Allreduce energy per byte by rank count",
                       "`cnnscale bench allreduce` on GPUs: the energy of every rank's GPU per allreduce, per byte "
                       "of the message (nJ/B), from each GPU's NVML energy counter over a window of back-to-back "
                       "allreduces after the timed ones (--energy-window seconds); above idle: less each GPU's power "
                       "in an idle window before the sweep, the energy the exchange itself costs; power: the mean "
                       "per GPU over the window. Mean ± sample std over the files of one setting (repeats).",
                       {{"size", "size", false}, {"bytes", "bytes", false}},
                       {},
                       {}},
                 /*energy=*/true);
  if (single && !t.rows.empty())
    t.notes.push_back("Files of one rank are left out: an allreduce over one rank moves no data.");
  return t;
}

}  // namespace cnnscale::report
