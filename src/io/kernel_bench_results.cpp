// The schema tables of the kernel benchmarks' results (see kernel_bench_results.hpp), in
// results/README.md's order, and their result folder.
#include "io/kernel_bench_results.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "core/error.hpp"
#include "io/bench_folder.hpp"

namespace cnnscale {

using namespace schema_presence;

std::span<const SchemaField<KernelBenchCase>> KernelBenchCase::fields() {
  using C = KernelBenchCase;
  static const std::vector<SchemaField<C>> f = {
      field<&C::problem>("problem", "", R, "the problem's index in the list"),
      field<&C::label>("label", "", R, "the problem as tables show it"),
      field<&C::pass>("pass", "", O, "conv: fwd, bwd_data or bwd_filter; rnn: inference or training"),
      field<&C::sweep_value>("sweep_value", "", O, "conv sweeps: the swept axis' value"),
      field<&C::m>("m", "", O, "gemm, spmm: rows of C"),
      field<&C::n>("n", "", O, "gemm, spmm: columns of C; conv: the batch"),
      field<&C::k>("k", "", O, "gemm, spmm: the inner dimension; conv: filters"),
      field<&C::trans_a>("trans_a", "", O, "gemm: A transposed"),
      field<&C::trans_b>("trans_b", "", O, "gemm: B transposed"),
      field<&C::padded_from>("padded_from", "", O, "int8 gemm: the listed shape where padding to multiples of 4 changed it"),
      field<&C::sparsity>("sparsity", "", O, "spmm: the share of A's zeros"),
      field<&C::nnz>("nnz", "", O, "spmm: A's non-zeros as drawn"),
      field<&C::speedup_vs_dense>("speedup_vs_dense", "", O, "spmm: the dense GEMM's median time over this variant's"),
      field<&C::c>("c", "", O, "conv: input channels"),
      field<&C::h>("h", "", O, "conv: input height"),
      field<&C::w>("w", "", O, "conv: input width"),
      field<&C::r>("r", "", O, "conv: filter height"),
      field<&C::s>("s", "", O, "conv: filter width"),
      field<&C::pad_h>("pad_h", "", O, "conv: padding of the height"),
      field<&C::pad_w>("pad_w", "", O, "conv: padding of the width"),
      field<&C::stride_h>("stride_h", "", O, "conv: stride along the height"),
      field<&C::stride_w>("stride_w", "", O, "conv: stride along the width"),
      field<&C::cell>("cell", "", O, "rnn: vanilla, lstm or gru"),
      field<&C::hidden>("hidden", "", O, "rnn: the hidden size"),
      field<&C::batch>("batch", "", O, "rnn: the batch"),
      field<&C::time_steps>("time_steps", "", O, "rnn: the time steps"),
      field<&C::library>("library", "", R, "the variant's library"),
      field<&C::algorithm>("algorithm", "", R, "the variant's algorithm"),
      field<&C::supported>("supported", "", R, "the variant ran"),
      field<&C::status>("status", "", R, "why not, where it did not run"),
      field<&C::workspace_bytes>("workspace_bytes", "bytes", R, "the variant's workspace"),
      field<&C::setup_ms>("setup_ms", "ms", O, "host time preparing the variant (null: not measured)"),
      field<&C::memory_bytes>("memory_bytes", "bytes", R, "the call's device memory: operands and workspace"),
      field<&C::flops>("flops", "FLOP", R, "the problem's direct FLOPs per call"),
      field<&C::median_ms>("median_ms", "ms", O, "ran: median time per call over the repeats"),
      field<&C::min_ms>("min_ms", "ms", O, "ran: the fastest repeat's time per call"),
      field<&C::max_ms>("max_ms", "ms", O, "ran: the slowest repeat's time per call"),
      field<&C::repeats>("repeats", "", O, "ran: timed repeats"),
      field<&C::calls_per_repeat>("calls_per_repeat", "", O, "ran: calls per repeat"),
      field<&C::tflops>("tflops", "TFLOP/s", O, "ran: flops over the median time"),
      field<&C::peak_fraction>("peak_fraction", "", O, "ran: tflops over the peak (null: no peak)"),
      field<&C::watts>("watts", "W", O, "ran: mean power between two energy-counter updates (null: not read)"),
      field<&C::joules_per_call>("joules_per_call", "J", O, "ran: that power times the median time"),
      field<&C::energy_seconds>("energy_seconds", "s", O, "ran: the power window's length (null: no power)"),
      field<&C::energy_note>("energy_note", "", O, "ran: why no power was read"),
      field<&C::check>("check", "", O, "--check: ok, MISMATCH or not checked (why)"),
      field<&C::check_error>("check_error", "", O, "--check: the largest error against the reference"),
      field<&C::check_tolerance>("check_tolerance", "", O, "--check: the error allowed"),
      field<&C::fastest>("fastest", "", R, "the problem's fastest variant"),
      field<&C::lowest_energy>("lowest_energy", "", R, "the problem's variant of least energy per call"),
  };
  return f;
}

std::span<const SchemaField<KernelBenchSummary>> KernelBenchSummary::fields() {
  using S = KernelBenchSummary;
  static const std::vector<SchemaField<S>> f = {
      field<&S::kind>("kind", "", R, "gemm, conv, rnn or spmm"),
      field<&S::device>("device", "", R, "the backend's description of the device"),
      field<&S::host>("host", "", R, "the host"),
      field<&S::time>("time", "", R, "UTC start"),
      field<&S::precision>("precision", "", R, "the operands' format"),
      field<&S::layout>("layout", "", R, "conv: NCHW or NHWC (null for other kinds)"),
      field<&S::peak_tflops>("peak_tflops", "TFLOP/s", R, "the fastest square GEMM of the format (null: not measured)"),
      field<&S::peak_method>("peak_method", "", R, "how the peak was measured"),
      field<&S::energy_method>("energy_method", "", R, "how power and energy were measured"),
      field<&S::energy_window_seconds>("energy_window_seconds", "s", R, "--energy-window"),
      field<&S::energy_settle_seconds>("energy_settle_seconds", "s", O, "--energy-settle"),
      field<&S::energy_within>("energy_within", "", O, "the windows' repeatability bound (null: none)"),
      field<&S::power_limit_watts>("power_limit_watts", "W", O, "the device's enforced power limit (null: unknown)"),
      field<&S::checked>("checked", "", R, "--check given"),
      field<&S::source>("source", "", O, "where the problems came from"),
      field<&S::status>("status", "", O, "complete or interrupted (absent: complete)"),
      field<&S::resume_from>("resume_from", "", O, "interrupted: the --from that runs the rest (null otherwise)"),
      field<&S::sweep_axis>("sweep_axis", "", R, "conv sweeps: the swept axis (null otherwise)"),
      field<&S::rows>("rows", "", R, "one per problem (and pass) and variant"),
      field<&S::provenance>("provenance", "", O, "the build, command line, start and end time and hosts"),
      field<&S::settings>("settings", "", O, "every setting of the command's table as it ran, {name: value} (absent in older files)"),
  };
  return f;
}

nlohmann::json kernel_bench_result_json(const KernelBenchSummary& s) { return to_json_object(s); }

KernelBenchSummary kernel_bench_result_from_json(const nlohmann::json& j, const std::string& file) {
  KernelBenchSummary s = from_json_object<KernelBenchSummary>(j, file);
  const std::string kind = s.kind.value_or("");
  if (kind != "gemm" && kind != "conv" && kind != "rnn" && kind != "spmm")
    throw_config("{}: kind: \"{}\" is not a kernel benchmark (gemm, conv, rnn, spmm)", file, kind);
  return s;
}

std::string write_kernel_bench_folder(const std::string& results_root, const std::string& experiment,
                                      const KernelBenchSummary& s, const std::string& utc_stamp) {
  const std::string kind = s.kind.value_or(""), axis = s.sweep_axis.value_or("");
  const std::string stem = fmt::format("{}{}-{}{}-{}", kind, axis.empty() ? "" : "-sweep-" + axis,
                                       s.precision.value_or(""),
                                       kind == "conv" && s.layout.value_or("") == "NHWC" ? "-nhwc" : "", utc_stamp);
  std::vector<std::string> cols =
      kind == "gemm"   ? std::vector<std::string>{"problem", "m", "n", "k", "trans_a", "trans_b", "padded_from"}
      : kind == "spmm" ? std::vector<std::string>{"problem", "m", "n", "k", "sparsity", "nnz"}
      : kind == "rnn"
          ? std::vector<std::string>{"problem", "pass", "cell", "hidden", "batch", "time_steps"}
          : std::vector<std::string>{"problem", "pass", "sweep_value", "n",     "c",     "h",        "w",
                                     "k",       "r",    "s",           "pad_h", "pad_w", "stride_h", "stride_w"};
  for (const char* c :
       {"library",          "algorithm",     "supported",   "status",          "workspace_bytes", "setup_ms",
        "memory_bytes",     "flops",         "median_ms",   "min_ms",          "max_ms",          "repeats",
        "tflops",           "peak_fraction", "watts",       "joules_per_call", "energy_seconds",  "energy_note",
        "speedup_vs_dense", "check",         "check_error", "fastest",         "lowest_energy"})
    if (kind == "spmm" || std::string(c) != "speedup_vs_dense") cols.push_back(c);
  return write_bench_folder((std::filesystem::path(results_root) / experiment / "bench").string(), stem,
                            kernel_bench_result_json(s), cols,
                            {"kind", "device", "precision", "peak_method", "energy_method"}, {"peak_tflops"});
}

}  // namespace cnnscale
