// Inference results files (see report_infer.hpp) and the report's inference table.
#include "experiment/report_infer.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.hpp"
#include "experiment/command_settings.hpp"
#include "experiment/report_data.hpp"
#include "io/infer_results.hpp"

namespace cnnscale::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
// The precision an int8 run with a synthetic table is reported under.
constexpr const char* kInt8SyntheticLabel = "int8 (synthetic table)";
}  // namespace

namespace {

// infer's settings that group the table beside its fixed keys: those its table gives a report label.
std::vector<const Setting*> grouping_settings() {
  std::vector<const Setting*> out;
  for (const Setting& s : infer_settings())
    if (!s.report_label.empty()) out.push_back(&s);
  return out;
}

// InferRow::settings of a file run on `device` by `ranks` ranks.
std::vector<std::string> grouping_values(const InferResult& r, const std::string& device, int64_t ranks) {
  const json recorded = r.settings.has_value() ? r.settings.value().values : json::object();
  RunContext run;
  run.gpu = device.rfind("gpu", 0) == 0;
  run.world_size = ranks;
  std::vector<std::string> out;
  for (const Setting* s : grouping_settings()) {
    const auto it = recorded.find(s->name);
    out.push_back(!s->applies_to(run) ? "" : s->text(it != recorded.end() ? *it : s->default_value));
  }
  return out;
}

InferFile parse_infer_file(const json& j, const std::string& path) {
  const InferResult r = infer_result_from_json(j, path);
  InferFile f;
  f.path = path;
  f.result = r;
  f.scenario = r.scenario.has_value() ? r.scenario.value() : "offline";
  if (f.scenario != "offline") return f;
  if (!r.batches.has_value()) throw_config("{}: \"batches\" is missing", path);
  const int64_t ranks = r.world_size.value_or(1);
  if (ranks < 1) throw_config("{}: \"world_size\" is not a rank count", path);
  auto text = [&](const TextFigure& t, const char* key) {
    if (!t.has_value()) throw_config("{}: \"{}\" is missing or not text", path, key);
    return t.value();
  };
  // A job's devices: "gpu:0+gpu:2" when its ranks ran on different ones (so that two GPU sets of a
  // rank count stay apart), the one device when they all ran on the same kind ("cpu").
  std::string device = text(r.device, "device");
  const std::vector<std::string> all = r.devices.value_or({});
  if (std::adjacent_find(all.begin(), all.end(), std::not_equal_to<>()) != all.end())
    device = fmt::format("{}", fmt::join(all, "+"));
  const auto number = [](const NumberFigure& n) { return n.value_or(std::nan("")); };
  const std::vector<std::string> settings = grouping_values(r, device, ranks);
  for (const InferBatch& b : r.batches.value()) {
    InferRow row;
    row.settings = settings;
    row.net = text(r.net, "net");
    row.device = device;
    row.precision = text(r.precision, "precision");
    // int8 with a table infer measured on its own input is another setup than int8 with a table
    // from real data: its speed is int8's, its accuracy nobody measured.
    if (row.precision == "int8" && r.int8.has_value() && r.int8.value().calibration.value_or("") == "synthetic")
      row.precision = kInt8SyntheticLabel;
    if (!b.batch.has_value()) throw_config("{}: a batch has no \"batch\"", path);
    row.batch = b.batch.value();
    row.images_per_s = number(b.images_per_s);
    row.p50_s = number(b.latency_p50_s);
    row.p99_s = number(b.latency_p99_s);
    row.joules_per_image = number(b.joules_per_image);
    row.images_per_joule = number(b.images_per_joule);
    row.peak_memory_bytes = b.peak_memory_bytes.has_value() ? static_cast<double>(b.peak_memory_bytes.value())
                                                            : std::nan("");
    row.ranks = ranks;
    if (ranks > 1) {  // the job's throughput and energy: its ranks' sums
      for (const auto& [figure, key] : {std::pair{&b.job_images_per_s, "job_images_per_s"},
                                        std::pair{&b.job_watts, "job_watts"},
                                        std::pair{&b.job_images_per_joule, "job_images_per_joule"}})
        if (!figure->written()) throw_config("{}: missing \"{}\"", path, key);
      row.images_per_s = number(b.job_images_per_s);
      const double watts = number(b.job_watts);
      row.joules_per_image = watts > 0 && row.images_per_s > 0 ? watts / row.images_per_s : std::nan("");
      row.images_per_joule = number(b.job_images_per_joule);
    }
    f.rows.push_back(row);
  }
  return f;
}

// Every */<folder>/*.json under `results_dir` whose "format" is `format`, parsed, with its path; a
// file that is not JSON is a ConfigError naming it, one of another format (another program's, in
// the same folder) is skipped and counted in `other`.
std::vector<std::pair<std::string, json>> our_json_files(const std::string& results_dir, const std::string& folder,
                                                         const char* format, int* other) {
  std::vector<std::pair<std::string, json>> out;
  for (const fs::path& p : find_json_files(results_dir, folder)) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    json j;
    try {
      j = json::parse(ss.str());
    } catch (const json::exception& e) {
      throw_config("{}: not JSON: {}", p.string(), e.what());
    }
    if (!j.is_object() || !j.contains("format") || j["format"] != format) {
      if (other) ++*other;
      continue;
    }
    out.emplace_back(p.string(), std::move(j));
  }
  return out;
}

}  // namespace

std::vector<InferFile> find_infer_results(const std::string& results_dir, int* skipped) {
  int other = 0;
  std::vector<InferFile> files;
  for (const auto& [path, j] : our_json_files(results_dir, "infer", kInferFormat, &other))
    files.push_back(parse_infer_file(j, path));
  if (skipped) *skipped = other;
  return files;
}

Table infer_table(const std::vector<InferFile>& files) {
  Table t;
  t.name = "inference";
  t.title = "Inference (cnnscale infer, offline)";
  t.caption =
      "Forward-only throughput of back-to-back batches, latency of batches timed alone (nearest-rank "
      "percentiles), energy per image over the throughput window and peak memory, per network, device, "
      "precision, batch size and ranks; mean ± std over the files that repeat a setting. A job of several "
      "ranks (mpirun, each streaming its own batches of that size) shows the job's images/s and energy "
      "(summed over its ranks) and rank 0's latency, device and peak memory, and its images/s against ranks x those of "
      "the 1-rank job of the same network, precision and batch size on one of its devices (1: each rank as fast as "
      "one alone).";
  t.columns = {Column("network", "net", false),
               Column("device", "device", false),
               Column("precision", "precision", false),
               Column("batch", "batch", false),
               Column("ranks", "ranks", false),
               Column("images/s", "images_per_s"),
               Column("vs ranks x 1 rank", "vs_ranks_x_one_rank", false),
               Column("p50 latency ({unit})", "latency_p50_s", true, false, Quantity::Seconds),
               Column("p99 latency ({unit})", "latency_p99_s", true, false, Quantity::Seconds),
               Column("energy per image ({unit})", "joules_per_image", true, false, Quantity::Joules),
               Column("images/J", "images_per_joule"),
               Column("peak memory (GiB)", "peak_memory_gib"),
               Column("files", "files", false)};
  // The fixed keys, then the values of infer's grouping settings (grouping_settings): a setting's
  // column is shown only where its value varies over the table, so files that never vary one read
  // as they did before it grouped them.
  using Key = std::tuple<std::string, std::string, std::string, int64_t, int64_t, std::vector<std::string>>;
  std::map<Key, std::vector<const InferRow*>> groups;
  int others = 0;
  for (const InferFile& f : files) {
    if (f.scenario != "offline") ++others;
    for (const InferRow& r : f.rows)
      groups[{r.net, r.device, r.precision, r.batch, r.ranks, r.settings}].push_back(&r);
  }
  const std::vector<const Setting*> grouping = grouping_settings();
  std::vector<std::string> labels;
  for (const Setting* s : grouping) labels.push_back(s->report_label);
  t.caption += fmt::format(" Files run with other values of {} are kept apart, in a column of that setting where it "
                           "varies (a file written before settings were recorded counts as the defaults).",
                           fmt::join(labels, ", "));
  std::vector<size_t> shown;  // the grouping settings whose value varies, by index
  for (size_t i = 0; i < grouping.size(); ++i) {
    std::set<std::string> values;
    for (const auto& [key, rows] : groups) values.insert(std::get<5>(key).at(i));
    if (values.size() > 1) shown.push_back(i);
  }
  for (size_t n = 0; n < shown.size(); ++n) {
    const std::string& label = grouping[shown[n]]->report_label;
    // CSV "setting.<label>": the figures' script tells a setting's column by it.
    t.columns.insert(t.columns.begin() + 5 + static_cast<std::ptrdiff_t>(n), Column(label, "setting." + label, false));
  }
  auto mean_ips = [](const std::vector<const InferRow*>& rows) {
    double sum = 0;
    for (const InferRow* r : rows) sum += r->images_per_s;
    return sum / static_cast<double>(rows.size());
  };
  // The 1-rank group a job of several ranks is set against: same network, precision and batch, on a
  // device the job used ("gpu:0" for "gpu:0+gpu:1"; "cpu" for CPU ranks).
  auto one_rank = [&](const Key& k) -> const std::vector<const InferRow*>* {
    std::vector<std::string> used;
    std::stringstream ss(std::get<1>(k));
    for (std::string d; std::getline(ss, d, '+');) used.push_back(d);
    for (const auto& [other, rows] : groups)
      if (std::get<4>(other) == 1 && std::get<0>(other) == std::get<0>(k) && std::get<2>(other) == std::get<2>(k) &&
          std::get<3>(other) == std::get<3>(k) && std::get<5>(other) == std::get<5>(k) &&
          std::find(used.begin(), used.end(), std::get<1>(other)) != used.end())
        return &rows;
    return nullptr;
  };
  for (const auto& [key, rows] : groups) {
    std::string vs;
    if (std::get<4>(key) > 1)
      if (const auto* single = one_rank(key); single && mean_ips(*single) > 0)
        vs = fmt::format("{:.3f}", mean_ips(rows) / (static_cast<double>(std::get<4>(key)) * mean_ips(*single)));
    auto stat = [&](double InferRow::*m, double scale) {
      std::vector<double> v;
      for (const InferRow* r : rows) v.push_back(r->*m * scale);
      return Cell::of(stat_of(v));
    };
    std::vector<Cell> row = {Cell::of(std::get<0>(key)), Cell::of(std::get<1>(key)), Cell::of(std::get<2>(key)),
                             Cell::of(std::to_string(std::get<3>(key))), Cell::of(std::to_string(std::get<4>(key)))};
    for (size_t i : shown) row.push_back(Cell::of(std::get<5>(key).at(i)));
    for (Cell c : {stat(&InferRow::images_per_s, 1), Cell::of(vs), stat(&InferRow::p50_s, 1),
                   stat(&InferRow::p99_s, 1), stat(&InferRow::joules_per_image, 1),
                   stat(&InferRow::images_per_joule, 1),
                   stat(&InferRow::peak_memory_bytes, 1.0 / double(int64_t{1} << 30)),
                   Cell::of(std::to_string(rows.size()))})
      row.push_back(std::move(c));
    t.rows.push_back(std::move(row));
  }
  if (std::any_of(groups.begin(), groups.end(),
                  [](const auto& g) { return std::get<2>(g.first) == kInt8SyntheticLabel; }))
    t.notes.push_back(
        fmt::format("{}: int8 with the scales infer measured on its own input (--calibration "
                    "synthetic): int8's speed and energy, with no accuracy measured.",
                    kInt8SyntheticLabel));
  if (others > 0)
    t.notes.push_back(fmt::format("{} single-stream/server file(s) are not in this table (their figures are in "
                                  "the files).",
                                  others));
  return t;
}

std::string calibration_results_dir(const std::string& root, const std::string& experiment) {
  return (fs::path(root) / experiment / "calibration").string();
}

std::vector<CalibrationFile> find_calibrations(const std::string& results_dir) {
  std::vector<CalibrationFile> files;
  for (const auto& [where, j] : our_json_files(results_dir, "calibration", kCalibrationFormat, nullptr)) {
    CalibrationFile f;
    f.path = where;
    f.result = calibration_result_from_json(j, where);
    const CalibrationResult& r = f.result;
    f.net = r.net.value_or("");
    f.method = r.method.value_or("");
    f.percentile = r.percentile.value_or(std::nan(""));
    f.samples = r.samples.value_or(0);
    f.checkpoint = r.checkpoint.value_or("");
    f.fp32_top1 = f.int8_top1 = f.int8_executed_top1 = std::nan("");
    if (r.accuracy.has_value()) {
      const CalibrationAccuracy& a = r.accuracy.value();
      f.test_set = a.test_set.value_or("");
      f.test_samples = a.samples.value_or(0);
      f.fp32_top1 = a.fp32_top1.value_or(std::nan(""));
      f.int8_top1 = a.int8_top1.value_or(std::nan(""));
      // Files written before int8 execution have neither.
      f.int8_executed_top1 = a.int8_executed_top1.value_or(std::nan(""));
      if (a.int8_executed.has_value()) f.executed_on = a.int8_executed.value().device.value_or("");
    }
    files.push_back(std::move(f));
  }
  return files;
}

Table int8_accuracy_table(const std::vector<CalibrationFile>& files) {
  Table t;
  t.name = "int8_accuracy";
  t.title = "int8 accuracy cost (cnnscale calibrate)";
  t.caption =
      "Test top-1 of each calibrated network in fp32, with int8 quantisation simulated (per-tensor input "
      "thresholds from the calibration samples by the method named, per-channel weight scales; quantised values, "
      "products summed in fp32) and executed (the convolutions as int8 kernels summing in int32 on the device "
      "named, the other layers in bf16 on a GPU and fp32 on the CPU), and the points each costs; mean ± std over "
      "the files that repeat a setting (the same checkpoint, test set, method and calibration samples). Empty "
      "executed cells: files written before int8 execution.";
  t.columns = {Column("network", "net", false),
               Column("checkpoint", "checkpoint", false),
               Column("test set", "test_set", false),
               Column("method", "method", false),
               Column("calibration samples", "samples", false),
               Column("fp32 top-1 (%)", "fp32_top1"),
               Column("int8 simulated top-1 (%)", "int8_top1"),
               Column("simulated cost (points)", "int8_cost_points"),
               Column("int8 executed on", "executed_on", false),
               Column("int8 executed top-1 (%)", "int8_executed_top1"),
               Column("executed cost (points)", "int8_executed_cost_points"),
               Column("files", "files", false)};
  using Key = std::tuple<std::string, std::string, std::string, std::string, int64_t, std::string>;
  std::map<Key, std::vector<const CalibrationFile*>> groups;
  int without = 0;
  for (const CalibrationFile& f : files) {
    if (std::isnan(f.fp32_top1)) {
      ++without;
      continue;
    }
    const std::string method = f.method == "percentile" ? fmt::format("percentile {}", f.percentile) : f.method;
    groups[{f.net, f.checkpoint, f.test_set, method, f.samples, f.executed_on}].push_back(&f);
  }
  for (const auto& [key, group] : groups) {
    auto stat = [&](auto value) {
      std::vector<double> v;
      for (const CalibrationFile* f : group) v.push_back(value(*f));
      return Cell::of(stat_of(v));
    };
    t.rows.push_back(
        {Cell::of(std::get<0>(key)), Cell::of(std::get<1>(key)), Cell::of(std::get<2>(key)), Cell::of(std::get<3>(key)),
         Cell::of(std::to_string(std::get<4>(key))), stat([](const CalibrationFile& f) { return 100 * f.fp32_top1; }),
         stat([](const CalibrationFile& f) { return 100 * f.int8_top1; }),
         stat([](const CalibrationFile& f) { return 100 * (f.fp32_top1 - f.int8_top1); }), Cell::of(std::get<5>(key)),
         stat([](const CalibrationFile& f) { return 100 * f.int8_executed_top1; }),
         stat([](const CalibrationFile& f) { return 100 * (f.fp32_top1 - f.int8_executed_top1); }),
         Cell::of(std::to_string(group.size()))});
  }
  if (without > 0)
    t.notes.push_back(fmt::format("{} calibration file(s) without a test set are not in this table.", without));
  return t;
}

}  // namespace cnnscale::report
