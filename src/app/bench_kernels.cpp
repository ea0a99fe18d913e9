// `cnnscale bench gemm|conv`: the problems (a DeepBench set from data/bench/, a CSV list of one's
// own, or one --shape), every variant the device offers timed with the shared harness
// (measure/kernel_bench_suite), printed as a table or JSON and saved as a result folder. The run is
// experiment/kernel_bench_job's; this file parses and prints.
#include "app/bench_kernels.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "app/commands.hpp"
#include "app/results_options.hpp"
#include "app/setting_options.hpp"
#include "core/log.hpp"
#include "core/stop_signal.hpp"
#include "experiment/command_settings.hpp"
#include "experiment/kernel_bench_job.hpp"
#include "experiment/kernel_bench_output.hpp"
#include "experiment/kernel_profile_output.hpp"
#include "experiment/option_groups.hpp"
#include "io/kernel_bench_results.hpp"

namespace cnnscale::app {

namespace {

struct KernelBenchArgs {
  KernelBenchRequest request;  // every entry of the kind's table, and where the result goes
  bool json = false, quiet = false;
};

// Whether the option was given; false for one this subcommand does not have.
bool given(const CLI::App& cmd, const char* name) {
  const CLI::Option* o = cmd.get_option_no_throw(name);
  return o != nullptr && o->count() > 0;
}

SettingFields kernel_bench_fields(KernelBenchRequest& a);

void run_kernel_bench_command(KernelBenchArgs& args, const CLI::App& cmd) {
  KernelBenchRequest& a = args.request;
  a.set_given = given(cmd, "--set");
  a.sweep_base_given = given(cmd, "--sweep-base");
  a.batch_given = given(cmd, "--batch");
  a.experiment_given = given(cmd, "--experiment");
  a.metrics_given = given(cmd, "--metrics");
  a.metric_replay_given = given(cmd, "--metric-replay");
  if (!args.quiet) a.progress = [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
  a.settings = setting_values(kernel_bench_settings(a.kind), kernel_bench_fields(a));
  const KernelBenchRun run = run_kernel_bench(a);
  const measure::KernelBenchResult& r = run.result;
  if (args.json)
    std::cout << kernel_bench_result_json(run.summary).dump(2) << "\n";
  else
    std::cout << report::kernel_bench_table(r);
  std::cout.flush();
  if (run.kernel_profile && !args.json) std::cout << "\n" << report::kernel_profile_tables(*run.kernel_profile);
  std::cout.flush();
  const std::string saved = save_kernel_bench(a, run);
  if (!saved.empty()) std::fprintf(stderr, "results: %s\n", saved.c_str());
  const std::string kernels_saved = save_kernel_bench_kernels(a, run);
  if (!kernels_saved.empty()) std::fprintf(stderr, "kernel profile: %s\n", kernels_saved.c_str());
  if (r.stopped_before) {
    const int64_t resume = *r.stopped_before + 1, last = a.from - 1 + static_cast<int64_t>(run.kept);
    log::warn("bench {}: stopped by {} before problem {} of the list; --from {}{} runs the rest", a.kind,
              stop_signal_name(stop_signal()), resume, resume,
              a.limit > 0 ? fmt::format(" --limit {}", last - resume + 1) : std::string());
    requested_exit_code() = kExitRequeue;
  }
  int mismatches = 0;
  for (const measure::KernelBenchRow& row : r.rows) mismatches += row.check == "MISMATCH";
  if (mismatches > 0)
    log::warn("bench {} --check: {} variant(s) disagree with the reference beyond the tolerance (check column)", a.kind,
              mismatches);
}

// Where each setting of a kernel bench's table (experiment/command_settings.hpp) is held; a kind's
// table names those of its own.
SettingFields kernel_bench_fields(KernelBenchRequest& a) {
  return {{"device", &a.device},
          {"precision", &a.precision},
          {"set", &a.set},
          {"shapes", &a.shapes_file},
          {"shape", &a.shapes},
          {"net", &a.net},
          {"batch", &a.batch},
          {"limit", &a.limit},
          {"from", &a.from},
          {"pass", &a.passes},
          {"layout", &a.layout},
          {"sweep", &a.sweep},
          {"sweep_base", &a.sweep_base},
          {"sweep_values", &a.sweep_values},
          {"warmup", &a.warmup},
          {"repeats", &a.repeats},
          {"min_repeat_ms", &a.min_repeat_ms},
          {"max_seconds", &a.max_seconds},
          {"energy_window", &a.energy_window},
          {"energy_settle", &a.energy_settle},
          {"energy_within", &a.energy_within},
          {"check", &a.check},
          {"check_max_macs", &a.check_max_macs},
          {"peak", &a.peak},
          {"seed", &a.seed},
          {"kernels", &a.kernels},
          {"metrics", &a.metrics},
          {"metric_replay", &a.metric_replay}};
}

void register_one(CLI::App& bench, const std::string& kind) {
  const bool gemm = kind == "gemm", spmm = kind == "spmm", rnn = kind == "rnn";
  CLI::App* cmd = bench.add_subcommand(
      kind, rnn ? "One recurrent layer (vanilla ReLU, LSTM, GRU) through cuDNN's RNN API per algorithm, inference and "
                  "training (forward, backward-data, backward-weights): time, TFLOP/s, energy per call (DeepBench's "
                  "RNN sets; GPU)"
            : spmm ? "Sparse times dense (cuSPARSE SpMM, SpMV for one column, each CSR algorithm) against the dense "
                     "GEMM of the same shape: time, speedup over dense, energy per call (DeepBench's sparse sets)"
            : gemm
                ? "GEMM per variant (cuBLAS, cuBLASLt heuristic and returned algorithms; OpenBLAS on the CPU): time, "
                  "TFLOP/s, share of a measured peak, energy per call (DeepBench's GEMM sets)"
                : "Convolution per cuDNN algorithm and pass (im2col + OpenBLAS on the CPU): time, workspace, "
                  "TFLOP/s, energy per call (DeepBench's conv sets)");
  auto a = std::make_shared<KernelBenchArgs>();
  KernelBenchRequest& request = a->request;
  request.kind = kind;
  add_table_options(*cmd, kernel_bench_settings(kind), fields_by_name(kernel_bench_fields(request)));
  // Each --shape is one problem, its extents comma-separated: repeated, never split.
  cmd->get_option("--shape")->delimiter('\0');
  using option_group::kResults;
  cmd->add_flag("--json", a->json, "print one JSON object (every variant) instead of the table")->group(kResults);
  cmd->add_flag("-q,--quiet", a->quiet, "no progress lines on stderr")->group(kResults);
  add_results_options(*cmd, {.root = request.results_root,
                             .experiment = request.experiment,
                             .no_results = request.no_results,
                             .results_help = std::string("save the result folder under DIR/<experiment>/bench/") +
                                             (kind == "conv" ? ", and with --kernels the kernel profile under "
                                                               "DIR/<experiment>/kernels/"
                                                             : "") +
                                             " (default: $CNNSCALE_RESULTS; without either nothing is saved)"});
  cmd->callback([a, cmd] { run_kernel_bench_command(*a, *cmd); });
}

}  // namespace

void register_kernel_benches(CLI::App& bench) {
  register_one(bench, "gemm");
  register_one(bench, "conv");
  register_one(bench, "spmm");
  register_one(bench, "rnn");
}

}  // namespace cnnscale::app
