// The kernel benchmarks' tables, and their results as the schema's struct (io/kernel_bench_results.hpp).
#include "experiment/kernel_bench_output.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <optional>
#include <tuple>

namespace cnnscale::report {

namespace {

std::string opt(const std::optional<double>& v, const char* spec) {
  return v ? fmt::format(fmt::runtime(spec), *v) : "-";
}

std::string variant_name(const measure::KernelBenchRow& r) {
  return r.library + " " + r.algorithm;
}

// The case as the schema has it: the problem's fields of the kind only.
KernelBenchCase case_of(const measure::KernelBenchRow& r, const std::string& kind, const std::string& sweep_axis) {
  KernelBenchCase c;
  c.problem = r.problem;
  c.label = r.label;
  c.library = r.library;
  c.algorithm = r.algorithm;
  c.supported = r.supported;
  c.status = r.status;
  c.workspace_bytes = r.workspace_bytes;
  c.setup_ms = number_or_null(r.setup_ms);
  c.memory_bytes = r.memory_bytes;
  c.flops = r.flops;
  if (kind == "spmm") {
    c.m = r.sparse.m;
    c.n = r.sparse.n;
    c.k = r.sparse.k;
    c.sparsity = r.sparse.sparsity;
    c.nnz = r.nnz;
    c.speedup_vs_dense = number_or_null(r.speedup_vs_dense);
  } else if (kind == "rnn") {
    c.pass = r.pass;
    c.cell = rnn_cell_name(r.rnn.cell);
    c.hidden = r.rnn.hidden;
    c.batch = r.rnn.batch;
    c.time_steps = r.rnn.time_steps;
  } else if (kind == "gemm") {
    c.m = r.gemm.m;
    c.n = r.gemm.n;
    c.k = r.gemm.k;
    c.trans_a = r.gemm.trans_a;
    c.trans_b = r.gemm.trans_b;
    if (!r.padded_from.empty()) c.padded_from = r.padded_from;
  } else {
    c.pass = r.pass;
    if (!sweep_axis.empty()) c.sweep_value = r.sweep_value;
    c.n = r.conv.n;
    c.c = r.conv.c;
    c.h = r.conv.h;
    c.w = r.conv.w;
    c.k = r.conv.k;
    c.r = r.conv.r;
    c.s = r.conv.s;
    c.pad_h = r.conv.pad_h;
    c.pad_w = r.conv.pad_w;
    c.stride_h = r.conv.stride_h;
    c.stride_w = r.conv.stride_w;
  }
  if (r.supported && r.timing.repeats > 0) {
    c.median_ms = r.timing.median_ms;
    c.min_ms = r.timing.min_ms;
    c.max_ms = r.timing.max_ms;
    c.repeats = int64_t{r.timing.repeats};
    c.calls_per_repeat = r.timing.calls_per_repeat;
    c.tflops = r.tflops;
    c.peak_fraction = r.peak_fraction > 0 ? NumberFigure(r.peak_fraction) : NumberFigure::null();
    c.watts = number_or_null(r.watts);
    c.joules_per_call = number_or_null(r.joules_per_call);
    c.energy_seconds = r.watts ? NumberFigure(r.energy_seconds) : NumberFigure::null();
    if (!r.energy_note.empty()) c.energy_note = r.energy_note;
  }
  if (!r.check.empty()) {
    c.check = r.check;
    c.check_error = number_or_null(r.check_error);
    c.check_tolerance = r.check_tolerance;
  }
  c.fastest = r.fastest;
  c.lowest_energy = r.lowest_energy;
  return c;
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

KernelBenchSummary kernel_bench_summary(const measure::KernelBenchResult& r, const std::string& utc_time,
                                        const std::string& host) {
  KernelBenchSummary s;
  s.kind = r.kind;
  s.device = r.device;
  s.host = host;
  s.time = utc_time;
  s.precision = r.precision;
  s.layout = r.kind == "conv" ? TextFigure(r.layout) : TextFigure::null();
  s.peak_tflops = r.peak_tflops > 0 ? NumberFigure(r.peak_tflops) : NumberFigure::null();
  s.peak_method = r.peak_method;
  s.energy_method = r.energy_method;
  s.energy_window_seconds = r.energy_window_seconds;
  s.energy_settle_seconds = r.energy_settle_seconds;
  s.energy_within = r.energy_within > 0 ? NumberFigure(r.energy_within) : NumberFigure::null();
  s.power_limit_watts = number_or_null(r.power_limit_watts);
  s.checked = r.checked;
  s.source = r.source;
  s.status = std::string(r.stopped_before ? "interrupted" : "complete");
  s.resume_from = r.stopped_before ? CountFigure(*r.stopped_before + 1) : CountFigure::null();
  s.sweep_axis = r.sweep_axis.empty() ? TextFigure::null() : TextFigure(r.sweep_axis);
  std::vector<KernelBenchCase> rows;
  for (const measure::KernelBenchRow& x : r.rows) rows.push_back(case_of(x, r.kind, r.sweep_axis));
  s.rows = std::move(rows);
  return s;
}

nlohmann::json kernel_bench_json(const measure::KernelBenchResult& r, const std::string& utc_time,
                                 const std::string& host) {
  return kernel_bench_result_json(kernel_bench_summary(r, utc_time, host));
}

}  // namespace cnnscale::report
