// `cnnscale bench gemm|conv|rnn|spmm` results: the --json object (also the result folder's
// summary.json) as a typed struct whose schema table (kernel_bench_results.cpp) writes it and reads it
// back for the report, and the result folder RESULTS/<experiment>/bench/<stem>/ (summary.json,
// cases.csv, cases.h5). A case's problem fields depend on the kind: a member per JSON key, absent
// where the kind has none. Fields that files of earlier versions lack are optional.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "io/provenance_field.hpp"
#include "io/result_schema.hpp"
#include "io/setting_values.hpp"

namespace cnnscale {

// One variant of one problem (and pass).
struct KernelBenchCase {
  CountFigure problem;
  TextFigure label, pass;
  CountFigure sweep_value;
  // gemm and spmm: C (m x n) = A (m x k) B (k x n); conv: n is the batch and k the filters.
  CountFigure m, n, k;
  FlagFigure trans_a, trans_b;
  TextFigure padded_from;
  NumberFigure sparsity;
  CountFigure nnz;
  NumberFigure speedup_vs_dense;
  CountFigure c, h, w, r, s, pad_h, pad_w, stride_h, stride_w;
  TextFigure cell;
  CountFigure hidden, batch, time_steps;
  TextFigure library, algorithm;
  FlagFigure supported;
  TextFigure status;
  CountFigure workspace_bytes;
  NumberFigure setup_ms;
  CountFigure memory_bytes;
  NumberFigure flops;
  NumberFigure median_ms, min_ms, max_ms;
  CountFigure repeats, calls_per_repeat;
  NumberFigure tflops, peak_fraction, watts, joules_per_call, energy_seconds;
  TextFigure energy_note, check;
  NumberFigure check_error, check_tolerance;
  FlagFigure fastest, lowest_energy;
  static std::span<const SchemaField<KernelBenchCase>> fields();
  bool operator==(const KernelBenchCase&) const = default;
};

struct KernelBenchSummary {
  TextFigure kind, device, host, time, precision, layout;
  NumberFigure peak_tflops;
  TextFigure peak_method, energy_method;
  NumberFigure energy_window_seconds, energy_settle_seconds, energy_within, power_limit_watts;
  FlagFigure checked;
  TextFigure source, status;
  CountFigure resume_from;
  TextFigure sweep_axis;
  Figure<std::vector<KernelBenchCase>> rows;
  Figure<Provenance> provenance;  // absent in files written before it was recorded
  Figure<SettingValues> settings;  // the kind's table (experiment/command_settings.hpp); absent likewise
  static std::span<const SchemaField<KernelBenchSummary>> fields();
  bool operator==(const KernelBenchSummary&) const = default;
};

nlohmann::json kernel_bench_result_json(const KernelBenchSummary& s);
// ConfigError naming `file` and the key path for a field of the wrong type or a required one
// missing, and for a kind other than gemm, conv, rnn or spmm.
KernelBenchSummary kernel_bench_result_from_json(const nlohmann::json& j, const std::string& file);

// The folder RESULTS/<experiment>/bench/<kind>[-sweep-<axis>]-<precision>[-nhwc]-<stamp> (-1, -2, ...
// when taken): summary.json, and cases.csv and cases.h5 with a column per case field (the problem's
// fields of the kind first); returns its path.
std::string write_kernel_bench_folder(const std::string& results_root, const std::string& experiment,
                                      const KernelBenchSummary& s, const std::string& utc_stamp);

}  // namespace cnnscale
