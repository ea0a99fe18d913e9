// Tables, JSON and result folders of the kernel benchmarks.
#include "experiment/kernel_bench_output.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <tuple>

#include "core/error.hpp"
#include "core/hdf5_file.hpp"
#include "io/atomic_file.hpp"

namespace cnnscale::report {

namespace {

std::string opt(const std::optional<double>& v, const char* spec) {
  return v ? fmt::format(fmt::runtime(spec), *v) : "-";
}

std::string variant_name(const measure::KernelBenchRow& r) {
  return r.library + " " + r.algorithm;
}

nlohmann::json nullable(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json row_json(const measure::KernelBenchRow& r, const std::string& kind, const std::string& sweep_axis) {
  nlohmann::json j{{"problem", r.problem},
                   {"label", r.label},
                   {"library", r.library},
                   {"algorithm", r.algorithm},
                   {"supported", r.supported},
                   {"status", r.status},
                   {"workspace_bytes", r.workspace_bytes},
                   {"setup_ms", nullable(r.setup_ms)},
                   {"memory_bytes", r.memory_bytes},
                   {"flops", r.flops}};
  if (kind == "spmm") {
    j["m"] = r.sparse.m;
    j["n"] = r.sparse.n;
    j["k"] = r.sparse.k;
    j["sparsity"] = r.sparse.sparsity;
    j["nnz"] = r.nnz;
    j["speedup_vs_dense"] = nullable(r.speedup_vs_dense);
  } else if (kind == "rnn") {
    j["pass"] = r.pass;
    j["cell"] = rnn_cell_name(r.rnn.cell);
    j["hidden"] = r.rnn.hidden;
    j["batch"] = r.rnn.batch;
    j["time_steps"] = r.rnn.time_steps;
  } else if (kind == "gemm") {
    j["m"] = r.gemm.m;
    j["n"] = r.gemm.n;
    j["k"] = r.gemm.k;
    j["trans_a"] = r.gemm.trans_a;
    j["trans_b"] = r.gemm.trans_b;
    if (!r.padded_from.empty()) j["padded_from"] = r.padded_from;
  } else {
    j["pass"] = r.pass;
    if (!sweep_axis.empty()) j["sweep_value"] = r.sweep_value;
    for (auto [name, v] : {std::pair{"n", r.conv.n},
                           {"c", r.conv.c},
                           {"h", r.conv.h},
                           {"w", r.conv.w},
                           {"k", r.conv.k},
                           {"r", r.conv.r},
                           {"s", r.conv.s},
                           {"pad_h", r.conv.pad_h},
                           {"pad_w", r.conv.pad_w},
                           {"stride_h", r.conv.stride_h},
                           {"stride_w", r.conv.stride_w}})
      j[name] = v;
  }
  if (r.supported && r.timing.repeats > 0) {
    j["median_ms"] = r.timing.median_ms;
    j["min_ms"] = r.timing.min_ms;
    j["max_ms"] = r.timing.max_ms;
    j["repeats"] = r.timing.repeats;
    j["calls_per_repeat"] = r.timing.calls_per_repeat;
    j["tflops"] = r.tflops;
    j["peak_fraction"] = r.peak_fraction > 0 ? nlohmann::json(r.peak_fraction) : nlohmann::json(nullptr);
    j["watts"] = nullable(r.watts);
    j["joules_per_call"] = nullable(r.joules_per_call);
    j["energy_seconds"] = r.watts ? nlohmann::json(r.energy_seconds) : nlohmann::json(nullptr);
    if (!r.energy_note.empty()) j["energy_note"] = r.energy_note;
  }
  if (!r.check.empty()) {
    j["check"] = r.check;
    j["check_error"] = nullable(r.check_error);
    j["check_tolerance"] = r.check_tolerance;
  }
  j["fastest"] = r.fastest;
  j["lowest_energy"] = r.lowest_energy;
  return j;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// Where sparse wins: per shape (m, n, k), the best sparse variant's speedup over the dense GEMM at
// each sparsity listed, and the lowest sparsity from which it stays above 1.
std::string sparse_crossover(const measure::KernelBenchResult& r) {
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::map<double, double>> best;  // shape -> sparsity -> speedup
  for (const measure::KernelBenchRow& x : r.rows) {
    if (!x.speedup_vs_dense) continue;
    double& b = best[{x.sparse.m, x.sparse.n, x.sparse.k}][x.sparse.sparsity];
    b = std::max(b, *x.speedup_vs_dense);
  }
  if (best.empty()) return "";
  std::string out = "# sparse against dense: the best cuSPARSE variant's speedup over the dense GEMM of the shape\n";
  for (const auto& [shape, by_sparsity] : best) {
    const auto [m, n, k] = shape;
    std::string points, wins = "sparse never wins here";
    std::optional<double> from;
    for (const auto& [sparsity, speedup] : by_sparsity) {
      points += fmt::format(" {:g}%: {:.2f}x", 100 * sparsity, speedup);
      if (speedup > 1.0 && !from) from = sparsity;
      if (speedup <= 1.0) from.reset();
    }
    if (from) wins = fmt::format("sparse wins from {:g}% zeros", 100 * *from);
    out += fmt::format("#   m={} n={} k={}:{}; {}\n", m, n, k, points, wins);
  }
  return out;
}

}  // namespace

std::string kernel_bench_table(const measure::KernelBenchResult& r) {
  std::string out = fmt::format("# cnnscale bench {}: {}\n# precision {}{}; ", r.kind, r.device, r.precision,
                                r.kind == "conv" ? ", layout " + r.layout : "");
  out += r.peak_tflops > 0 ? fmt::format("peak {:.3g} TFLOP/s ({})\n", r.peak_tflops, r.peak_method)
                           : "no peak measured\n";
  out += fmt::format("# energy: {}{}\n", r.energy_method.empty() ? "-" : r.energy_method,
                     r.power_limit_watts ? fmt::format(" (enforced power limit {:.0f} W)", *r.power_limit_watts) : "");
  out +=
      "# per problem (and pass): the fastest variant, its median time per call, TFLOP/s, share of the peak, power and "
      "energy per call; the lowest-energy variant where it is another; variants that ran / listed\n";
  const bool conv = r.kind == "conv" || r.kind == "rnn";  // kinds with passes
  out += fmt::format("{:>4} {:<40} {:<10} {:<44} {:>10} {:>8} {:>6} {:>6} {:>10} {:>6} {}\n", "#", "problem",
                     conv ? "pass" : "", "fastest variant", "ms", "TFLOP/s", "%peak", "W", "mJ/call", "ok", "check");
  // Rows of one (problem, pass) are adjacent: gather each group's summary.
  size_t i = 0;
  while (i < r.rows.size()) {
    size_t j = i;
    const measure::KernelBenchRow *fast = nullptr, *frugal = nullptr;
    int ran = 0, listed = 0;
    std::string check = r.checked ? "ok" : "";
    while (j < r.rows.size() && r.rows[j].problem == r.rows[i].problem && r.rows[j].pass == r.rows[i].pass) {
      const measure::KernelBenchRow& x = r.rows[j];
      ++listed;
      ran += x.supported ? 1 : 0;
      if (x.fastest) fast = &x;
      if (x.lowest_energy) frugal = &x;
      if (x.check == "MISMATCH")
        check = "MISMATCH: " + variant_name(x);
      else if (x.check.rfind("not checked", 0) == 0 && check == "ok")
        check = "not checked";
      ++j;
    }
    const measure::KernelBenchRow& head = r.rows[i];
    if (fast) {
      out += fmt::format(
          "{:>4} {:<40} {:<10} {:<44} {:>10.4f} {:>8.3g} {:>6} {:>6} {:>10} {:>3}/{:<2} {}\n", head.problem, head.label,
          head.pass, variant_name(*fast).substr(0, 44), fast->timing.median_ms, fast->tflops,
          fast->peak_fraction > 0 ? fmt::format("{:.1f}", 100 * fast->peak_fraction) : "-", opt(fast->watts, "{:.0f}"),
          fast->joules_per_call ? fmt::format("{:.4f}", *fast->joules_per_call * 1e3) : "-", ran, listed, check);
      if (frugal && frugal != fast)
        out += fmt::format("{:>4} {:<40} {:<10} {:<44} {:>10.4f} {:>8.3g} {:>6} {:>6} {:>10}   lowest energy\n", "", "",
                           "", variant_name(*frugal).substr(0, 44), frugal->timing.median_ms, frugal->tflops, "",
                           opt(frugal->watts, "{:.0f}"), fmt::format("{:.4f}", *frugal->joules_per_call * 1e3));
    } else {
      out += fmt::format("{:>4} {:<40} {:<10} no variant ran ({})\n", head.problem, head.label, head.pass,
                         head.status.empty() ? "unsupported" : head.status);
    }
    i = j;
  }
  if (r.kind == "spmm") out += sparse_crossover(r);
  return out;
}

nlohmann::json kernel_bench_json(const measure::KernelBenchResult& r, const std::string& utc_time,
                                 const std::string& host) {
  nlohmann::json rows = nlohmann::json::array();
  for (const measure::KernelBenchRow& x : r.rows) rows.push_back(row_json(x, r.kind, r.sweep_axis));
  return {{"kind", r.kind},
          {"device", r.device},
          {"host", host},
          {"time", utc_time},
          {"precision", r.precision},
          {"layout", r.kind == "conv" ? nlohmann::json(r.layout) : nlohmann::json(nullptr)},
          {"peak_tflops", r.peak_tflops > 0 ? nlohmann::json(r.peak_tflops) : nlohmann::json(nullptr)},
          {"peak_method", r.peak_method},
          {"energy_method", r.energy_method},
          {"energy_window_seconds", r.energy_window_seconds},
          {"energy_settle_seconds", r.energy_settle_seconds},
          {"energy_within", r.energy_within > 0 ? nlohmann::json(r.energy_within) : nlohmann::json(nullptr)},
          {"power_limit_watts", nullable(r.power_limit_watts)},
          {"checked", r.checked},
          {"source", r.source},
          {"status", r.stopped_before ? "interrupted" : "complete"},
          {"resume_from", r.stopped_before ? nlohmann::json(*r.stopped_before + 1) : nlohmann::json(nullptr)},
          {"sweep_axis", r.sweep_axis.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.sweep_axis)},
          {"rows", rows}};
}

std::string write_bench_folder(const std::string& parent_dir, const std::string& stem, const nlohmann::json& j,
                               const std::vector<std::string>& columns, const std::vector<std::string>& text_attributes,
                               const std::vector<std::string>& number_attributes) {
  namespace fs = std::filesystem;
  const fs::path parent(parent_dir);
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw_runtime("{}: cannot create the results folder ({})", parent.string(), ec.message());
  fs::path final_dir = parent / stem;
  for (int i = 1; fs::exists(final_dir, ec); ++i) final_dir = parent / fmt::format("{}-{}", stem, i);
  // The process id keeps two runs that pick the same name in one second off each other's folder.
  const fs::path tmp = parent / fmt::format(".tmp-{}-{}", final_dir.filename().string(), ::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) throw_runtime("{}: cannot create ({})", tmp.string(), ec.message());
  // Nothing half-written stays behind: the temporary folder goes with any error below.
  struct RemoveOnError {
    const fs::path& dir;
    bool done = false;
    ~RemoveOnError() {
      std::error_code ignored;
      if (!done) fs::remove_all(dir, ignored);
    }
  } cleanup{tmp};
  write_synced_file((tmp / "summary.json").string(), j.dump(2) + "\n");
  // cases.csv: one row per case, the JSON rows' scalar fields in the order given.
  std::string csv;
  for (size_t c = 0; c < columns.size(); ++c) csv += (c ? "," : "") + columns[c];
  csv += "\n";
  for (const nlohmann::json& row : j["rows"]) {
    for (size_t c = 0; c < columns.size(); ++c) {
      const auto it = row.find(columns[c]);
      std::string v;
      if (it != row.end() && !it->is_null()) v = it->is_string() ? it->get<std::string>() : it->dump();
      csv += (c ? "," : "") + csv_field(v);
    }
    csv += "\n";
  }
  write_synced_file((tmp / "cases.csv").string(), csv);
  // cases.h5: the same columns, one dataset each (numbers as f64, text and flags as strings), and
  // the summary's scalar fields named in `attributes` on the root.
  {
    h5::Writer w((tmp / "cases.h5").string(), "results file");
    // A missing or null value keeps its attribute's type (a text or a number that is absent).
    for (const std::string& key : text_attributes) {
      const auto it = j.find(key);
      w.attr_str(w.root(), key,
                 it != j.end() && it->is_string() ? std::optional<std::string>(it->get<std::string>()) : std::nullopt);
    }
    for (const std::string& key : number_attributes) {
      const auto it = j.find(key);
      w.attr_value(w.root(), key, it != j.end() && it->is_number() ? h5::Value{it->get<double>()} : h5::Value{});
    }
    for (const std::string& col : columns) {
      bool numeric = true;
      for (const nlohmann::json& row : j["rows"]) {
        const auto it = row.find(col);
        if (it != row.end() && !it->is_null() && !it->is_number()) numeric = false;
      }
      if (numeric) {
        std::vector<double> v;
        for (const nlohmann::json& row : j["rows"]) {
          const auto it = row.find(col);
          v.push_back(it != row.end() && it->is_number() ? it->get<double>() : std::nan(""));
        }
        w.f64(w.root(), col, v);
      } else {
        std::vector<std::string> v;
        for (const nlohmann::json& row : j["rows"]) {
          const auto it = row.find(col);
          v.push_back(it == row.end() || it->is_null() ? "" : it->is_string() ? it->get<std::string>() : it->dump());
        }
        w.strings(w.root(), col, v);
      }
    }
    w.close();
  }
  fsync_dir(tmp.string());
  fs::rename(tmp, final_dir, ec);
  if (ec) throw_runtime("{}: cannot publish the results folder ({})", final_dir.string(), ec.message());
  cleanup.done = true;
  fsync_dir(parent.string());
  return final_dir.string();
}

std::string write_kernel_bench_folder(const std::string& results_root, const std::string& experiment,
                                      const measure::KernelBenchResult& r, const nlohmann::json& j,
                                      const std::string& utc_stamp) {
  const std::string stem = fmt::format("{}{}-{}{}-{}", r.kind, r.sweep_axis.empty() ? "" : "-sweep-" + r.sweep_axis,
                                       r.precision, r.kind == "conv" && r.layout == "NHWC" ? "-nhwc" : "", utc_stamp);
  std::vector<std::string> cols =
      r.kind == "gemm"   ? std::vector<std::string>{"problem", "m", "n", "k", "trans_a", "trans_b", "padded_from"}
      : r.kind == "spmm" ? std::vector<std::string>{"problem", "m", "n", "k", "sparsity", "nnz"}
      : r.kind == "rnn"
          ? std::vector<std::string>{"problem", "pass", "cell", "hidden", "batch", "time_steps"}
          : std::vector<std::string>{"problem", "pass", "sweep_value", "n",     "c",     "h",        "w",
                                     "k",       "r",    "s",           "pad_h", "pad_w", "stride_h", "stride_w"};
  for (const char* c :
       {"library",          "algorithm",     "supported",   "status",          "workspace_bytes", "setup_ms",
        "memory_bytes",     "flops",         "median_ms",   "min_ms",          "max_ms",          "repeats",
        "tflops",           "peak_fraction", "watts",       "joules_per_call", "energy_seconds",  "energy_note",
        "speedup_vs_dense", "check",         "check_error", "fastest",         "lowest_energy"})
    if (r.kind == "spmm" || std::string(c) != "speedup_vs_dense") cols.push_back(c);
  return write_bench_folder((std::filesystem::path(results_root) / experiment / "bench").string(), stem, j, cols,
                            {"kind", "device", "precision", "peak_method", "energy_method"}, {"peak_tflops"});
}

}  // namespace cnnscale::report
