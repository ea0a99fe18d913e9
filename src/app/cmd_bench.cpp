// `cnnscale bench allreduce`: nccl-tests-style allreduce sweep (-b/-e/-f sizes, -w warm-up, -n
// timed iterations) on GPUs (NCCL) or host memory (MPI), printed as a table or JSON by rank 0, and
// saved by rank 0 as the result folder ROOT/<experiment>/allreduce/<device>-n<ranks>-<algo>-<time>/
// (summary.json, cases.csv, cases.h5) for `report`.
// Runs as one process or under mpirun/srun with one rank per GPU. The run is
// experiment/allreduce_bench_run's; this file parses and prints.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "app/bench_kernels.hpp"
#include "app/commands.hpp"
#include "app/results_options.hpp"
#include "app/setting_options.hpp"
#include "core/error.hpp"
#include "experiment/allreduce_bench_run.hpp"
#include "experiment/command_settings.hpp"
#include "experiment/option_groups.hpp"
#include "io/allreduce_results.hpp"

namespace cnnscale::app {

namespace {

struct AllreduceArgs {
  AllreduceBenchRequest request;  // every entry of the bench's table, and where the result goes
  bool json = false;
};

std::string table(const AllreduceBenchResult& r, bool checked) {
  std::string out =
      fmt::format("# cnnscale bench allreduce: {} rank(s), device {}, {}\n", r.ranks, r.device, r.library);
  out += fmt::format(
      "# in-place sum of {}; {} warm-up, then {} repeats of {} timed allreduces per size{}; time = median per "
      "allreduce over the repeats, each repeat's slowest rank (min and max: the fastest and slowest repeat)\n",
      nccl_tests_type(r.dtype), r.warmup_iters, r.repeats, r.iters,
      r.issue == "graph"  ? ", replayed from a CUDA graph"
      : r.device == "gpu" ? ", each issued from the host"
                          : "");
  out += "# algbw = size / time; busbw = algbw * 2(n-1)/n (nccl-tests); GB = 1e9 bytes\n";
  const bool energy = !r.energy_method.empty();
  if (energy) {
    out += fmt::format("# energy: {}\n", r.energy_method);
    out += "# nJ/B = joules of all ranks' devices per allreduce / size; above idle: less the idle power";
    out += std::isnan(r.idle_watts) ? " (idle not measured)\n"
                                    : fmt::format(" ({:.1f} W per device)\n", r.idle_watts);
  }
  for (size_t i = 0; i < r.rank_devices.size(); ++i) out += fmt::format("#   rank {}: {}\n", i, r.rank_devices[i]);
  out += "#\n";
  out += fmt::format("# {:>12} {:>12} {:>8} {:>12} {:>10} {:>10} {:>13} {:>13} {:>8}", "size (B)", "count", "type",
                     "time (us)", "min (us)", "max (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong");
  if (energy) out += fmt::format(" {:>9} {:>10} {:>12}", "W/device", "nJ/B", "above idle");
  out += "\n";
  double busbw_sum = 0;
  for (const auto& row : r.rows) {
    out += fmt::format("  {:>12} {:>12} {:>8} {:>12.2f} {:>10.2f} {:>10.2f} {:>13.3f} {:>13.3f} {:>8}\n", row.bytes,
                       row.count, nccl_tests_type(r.dtype), row.time_us, row.min_us, row.max_us, row.algbw_gbs,
                       row.busbw_gbs, row.wrong < 0 ? "N/A" : std::to_string(row.wrong));
    if (energy) {
      out.pop_back();  // the newline, to append the energy columns
      const auto num = [](double v, int width, int digits) {
        return std::isnan(v) ? fmt::format("{:>{}}", "N/A", width) : fmt::format("{:>{}.{}f}", v, width, digits);
      };
      out += fmt::format(" {} {} {}\n", num(row.watts, 9, 1), num(row.nj_per_byte, 10, 4),
                         num(row.dynamic_nj_per_byte, 12, 4));
    }
    busbw_sum += row.busbw_gbs;
  }
  out += fmt::format("# Avg bus bandwidth: {:.3f} GB/s (mean over sizes, as nccl-tests)\n",
                     r.rows.empty() ? 0.0 : busbw_sum / static_cast<double>(r.rows.size()));
  if (checked) {
    long long wrong = 0;
    for (const auto& row : r.rows) wrong += row.wrong;
    out += wrong == 0 ? "# check: passed (every element of every size on every rank)\n"
                      : fmt::format("# check: FAILED ({} wrong elements)\n", wrong);
  }
  return out;
}

// Where each setting of the allreduce bench's table (experiment/command_settings.hpp) is held.
SettingFields allreduce_fields(AllreduceBenchRequest& a) {
  return {{"min_bytes", &a.min_bytes},   {"max_bytes", &a.max_bytes},       {"step_factor", &a.step_factor},
          {"warmup", &a.warmup},         {"iters", &a.iters},               {"repeats", &a.repeats},
          {"device", &a.device},         {"algo", &a.algo},                 {"max_ctas", &a.max_ctas},
          {"cta_policy", &a.cta_policy}, {"priority", &a.priority},         {"issue", &a.issue},
          {"dtype", &a.dtype},           {"check", &a.check},               {"energy_window", &a.energy_window},
          {"energy_settle", &a.energy_settle}, {"timeout", &a.timeout}};
}

void register_allreduce(CLI::App& bench) {
  auto args = std::make_shared<AllreduceArgs>();
  AllreduceBenchRequest& a = args->request;
  CLI::App* cmd = bench.add_subcommand(
      "allreduce", "In-place float sum allreduce over all ranks: time, algbw and busbw per size (as nccl-tests)");
  add_table_options(*cmd, allreduce_bench_settings(), fields_by_name(allreduce_fields(a)));
  using option_group::kResults;
  cmd->add_flag("--json", args->json, "print one JSON object instead of the table")->group(kResults);
  add_results_options(*cmd, {.root = a.results_root,
                             .experiment = a.experiment,
                             .no_results = a.no_results,
                             .results_help = "rank 0 saves the JSON object to DIR/<experiment>/allreduce/ (default: "
                                             "$CNNSCALE_RESULTS; without either nothing is saved)"});
  cmd->callback([args, cmd] {
    AllreduceBenchRequest& a = args->request;
    a.algo_given = cmd->count("--algo") > 0;
    a.issue_given = cmd->count("--issue") > 0;
    a.energy_window_given = cmd->count("--energy-window") > 0;
    a.experiment_given = cmd->count("--experiment") > 0;
    a.settings = setting_values(allreduce_bench_settings(), allreduce_fields(a));
    const AllreduceBenchRun run = run_allreduce_bench_job(a);
    if (run.rank0) {
      if (args->json)
        std::cout << allreduce_result_json(run.summary).dump(2) << "\n";
      else
        std::cout << table(run.bench, run.checked);
      std::cout.flush();
      const std::string path = save_allreduce_bench(run);
      if (!path.empty()) std::fprintf(stderr, "results: %s\n", path.c_str());
    }
    if (run.wrong > 0)
      throw_runtime("bench allreduce --check: {} element(s) summed wrongly (see the #wrong column)", run.wrong);
  });
}

}  // namespace

void register_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand(
      "bench", "Benchmarks of the building blocks (GEMM, convolution, RNN, sparse, allreduce, the input pipeline)");
  bench->require_subcommand(1);
  register_kernel_benches(*bench);
  register_allreduce(*bench);
  register_data_bench(*bench);
}

}  // namespace cnnscale::app
