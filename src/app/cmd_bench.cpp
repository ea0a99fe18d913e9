// `cnnscale bench allreduce`: nccl-tests-style allreduce sweep (-b/-e/-f sizes, -w warm-up, -n
// timed iterations) on GPUs (NCCL) or host memory (MPI), printed as a table or JSON by rank 0, and
// saved by rank 0 as the result folder ROOT/<experiment>/allreduce/<device>-n<ranks>-<algo>-<time>/
// (summary.json, cases.csv, cases.h5) for `report`.
// Runs as one process or under mpirun/srun with one rank per GPU.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "app/bench_kernels.hpp"
#include "app/commands.hpp"
#include "core/environment.hpp"
#include "core/error.hpp"
#include "core/precision.hpp"
#include "experiment/report_allreduce.hpp"
#include "io/allreduce_results.hpp"
#include "io/provenance.hpp"
#include "io/results_writer.hpp"
#include "measure/nvml.hpp"
#include "parallel/allreduce_bench.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/mpi_env.hpp"

namespace cnnscale::app {

namespace {

struct AllreduceArgs {
  std::string min_bytes = "8", max_bytes = "1G";
  int64_t step_factor = 2;
  int warmup = 5, iters = 20, repeats = 5;
  std::string device = "gpu";
  std::string algo = "ring";
  int max_ctas = 0;
  std::string cta_policy = "default";
  std::string priority = "high";
  std::string issue = "graph";
  std::string dtype = "fp32";
  bool check = false, json = false;
  double timeout = 300.0;
  double energy_window = 2.0;
  double energy_settle = 0.5;
  std::string results_root;  // "": no results file (unless $CNNSCALE_RESULTS gives one)
  std::string experiment = "bench";
  bool no_results = false;
};

// Rank 0's check of the results folder: "" when it can write there, else the error. Only rank 0
// touches the filesystem (the others may not share it).
std::string check_results_dir(const AllreduceArgs& a, const std::string& dir) {
  try {
    check_results_name("--experiment", a.experiment);  // a path component, as train's
  } catch (const ConfigError& e) {
    return e.what();
  }
  try {
    report::prepare_allreduce_bench_dir(dir);
  } catch (const ConfigError& e) {
    return fmt::format("bench allreduce --results {}: {}", a.results_root, e.what());
  }
  return "";
}

// The element type's name in nccl-tests' tables (its -d values).
std::string nccl_tests_type(const std::string& dtype) {
  return dtype == "bf16" ? "bfloat16" : dtype == "fp16" ? "half" : "float";
}

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

// The --json object, also the results file's summary (io/allreduce_results.hpp, results/README.md).
AllreduceResult allreduce_result(const AllreduceBenchResult& r, bool checked, const std::string& utc_time,
                                 const std::string& host) {
  const bool energy = !r.energy_method.empty();
  const auto measured = [](double v) { return std::isnan(v) ? NumberFigure::null() : NumberFigure(v); };
  std::vector<AllreduceSizeResult> rows;
  for (const auto& row : r.rows) {
    AllreduceSizeResult s;
    s.bytes = row.bytes;
    s.count = row.count;
    s.type = std::string(nccl_tests_type(r.dtype));
    s.time_us = row.time_us;
    s.time_min_us = row.min_us;
    s.time_max_us = row.max_us;
    s.algbw_gbs = row.algbw_gbs;
    s.busbw_gbs = row.busbw_gbs;
    s.wrong = row.wrong >= 0 ? CountFigure(row.wrong) : CountFigure::null();
    if (energy) {
      s.energy_iters = row.energy_iters;
      s.energy_seconds = row.energy_seconds;
      s.joules = measured(row.joules);
      s.nj_per_byte = measured(row.nj_per_byte);
      s.dynamic_nj_per_byte = measured(row.dynamic_nj_per_byte);
      s.watts_per_device = measured(row.watts);
    }
    rows.push_back(s);
  }
  AllreduceResult out;
  out.benchmark = std::string("allreduce");
  out.format = std::string(kAllreduceBenchFormat);
  out.time = utc_time;
  out.host = host;
  out.op = std::string("sum");
  out.dtype = r.dtype;
  out.in_place = true;
  out.ranks = r.ranks;
  out.device = r.device;
  out.algo = r.algo;
  out.issue = r.issue;
  out.max_ctas = r.nccl.max_ctas > 0 ? CountFigure(r.nccl.max_ctas) : CountFigure::null();
  // NCCL's CTA policy and stream priority as asked for: null for the defaults, as max_ctas.
  out.cta_policy = r.nccl.cta_policy != CtaPolicy::Default ? TextFigure(std::string(to_string(r.nccl.cta_policy))) : TextFigure::null();
  out.priority = r.nccl.low_priority ? TextFigure(std::string("low")) : TextFigure::null();
  out.library = r.library;
  out.rank_devices = r.rank_devices;
  out.warmup_iters = r.warmup_iters;
  out.iters = r.iters;
  out.repeats = r.repeats;
  out.time_definition = std::string("median per allreduce over repeats, each repeat's slowest rank");
  out.busbw_definition = std::string("algbw * 2(n-1)/n");
  out.checked = checked;
  out.rows = rows;
  // What NCCL read from the environment besides the algorithm (on these hosts NCCL_NVLS_ENABLE=0).
  if (r.device == "gpu") out.nccl_env = environment_line("NCCL_");
  if (energy) {
    out.energy_method = r.energy_method;
    out.energy_window_seconds = r.energy_window_seconds;
    out.energy_settle_seconds = r.energy_settle_seconds;
    out.idle_watts_per_device = measured(r.idle_watts);
  }
  return out;
}

void register_allreduce(CLI::App& bench) {
  auto args = std::make_shared<AllreduceArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "allreduce", "In-place float sum allreduce over all ranks: time, algbw and busbw per size (as nccl-tests)");
  cmd->add_option("-b,--minbytes", args->min_bytes, "smallest size in bytes (K, M, G suffixes: powers of 1024)")
      ->capture_default_str();
  cmd->add_option("-e,--maxbytes", args->max_bytes, "largest size in bytes")->capture_default_str();
  cmd->add_option("-f,--stepfactor", args->step_factor, "multiply the size by this factor between steps")
      ->capture_default_str();
  cmd->add_option("-w,--warmup_iters", args->warmup, "untimed allreduces per size before timing")
      ->capture_default_str();
  cmd->add_option("-n,--iters", args->iters, "back-to-back allreduces per timed repeat")->capture_default_str();
  cmd->add_option("-r,--repeats", args->repeats,
                  "timed repeats per size, each after a barrier: the median, min and max per allreduce over them")
      ->capture_default_str();
  cmd->add_option("--device", args->device, "gpu: NCCL on the GPU of each rank's node-local rank; cpu: MPI_Allreduce")
      ->check(CLI::IsMember({"gpu", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--algo", args->algo,
                  "NCCL algorithm (sets NCCL_ALGO; an NCCL_ALGO already in the environment wins); gpu only")
      ->check(CLI::IsMember({"ring", "tree", "auto"}))
      ->capture_default_str();
  cmd->add_option("--max-ctas", args->max_ctas,
                  "most CTAs (SMs) each allreduce may run on (sets NCCL_MAX_CTAS; one already in the environment "
                  "wins; 0: NCCL's choice); gpu only")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_option("--cta-policy", args->cta_policy,
                  "NCCL's CTA policy (the communicator's config, NCCL >= 2.27): efficiency (the fewest CTAs that "
                  "reach decent bandwidth), zero (no CTAs where NCCL has such collectives) or default; gpu only")
      ->check(CLI::IsMember({"default", "efficiency", "zero"}))
      ->capture_default_str();
  cmd->add_option("--priority", args->priority,
                  "priority of NCCL's stream: high (the greatest, as train's default) or low (the least); gpu only")
      ->check(CLI::IsMember({"high", "low"}))
      ->capture_default_str();
  cmd->add_option("--issue", args->issue,
                  "gpu: graph (the timed allreduces of a size captured once into a CUDA graph and replayed, as a "
                  "graphed training step issues them) or host (each issued from the host in turn: adds NCCL's "
                  "enqueue of every collective, which small sizes notice)")
      ->check(CLI::IsMember({"graph", "host"}))
      ->capture_default_str();
  cmd->add_option("-d,--dtype", args->dtype,
                  "element type: fp32, or bf16/fp16 as the 16-bit gradient exchange (train --allreduce-dtype) sends "
                  "it; sizes count bytes either way")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_flag("--check", args->check, "fill a known per-rank pattern and verify every sum (exit 1 if wrong)");
  cmd->add_flag("--json", args->json, "print one JSON object instead of the table");
  cmd->add_option("--energy-window", args->energy_window,
                  "GPU: seconds between two updates of each GPU's NVML energy counter over further allreduces per "
                  "size (W, nJ per byte, and the same above an idle window's power); 0: no energy")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  cmd->add_option("--energy-settle", args->energy_settle,
                  "GPU: seconds of those allreduces before the window opens, for the power controller to settle")
      ->check(CLI::Range(0.0, 60.0))
      ->capture_default_str();
  cmd->add_option("--timeout", args->timeout, "seconds a rank waits for a collective before it gives up (exit 3)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  // As train: a batch script or a test harness can move (here: turn on) every run's results.
  if (const char* env = std::getenv("CNNSCALE_RESULTS"); env && *env) args->results_root = env;
  CLI::Option* results =
      cmd->add_option("--results", args->results_root,
                      "rank 0 saves the JSON object to DIR/<experiment>/allreduce/ (default: $CNNSCALE_RESULTS; "
                      "without either nothing is saved)");
  cmd->add_option("--experiment", args->experiment, "experiment name (the results subfolder)")->capture_default_str();
  cmd->add_flag("--no-results", args->no_results, "save nothing, even with $CNNSCALE_RESULTS set")->excludes(results);
  cmd->callback([args, cmd] {
    AllreduceBenchConfig cfg;
    cfg.min_bytes = parse_byte_size(args->min_bytes, "-b");
    cfg.max_bytes = parse_byte_size(args->max_bytes, "-e");
    cfg.step_factor = args->step_factor;
    cfg.warmup_iters = args->warmup;
    cfg.iters = args->iters;
    cfg.repeats = args->repeats;
    cfg.gpu = args->device == "gpu";
    if (!cfg.gpu && cmd->count("--algo") > 0)
      throw_config("bench allreduce: --algo chooses NCCL's algorithm and needs --device gpu");
    cfg.algo = parse_allreduce_algo(args->algo);
    if (!cfg.gpu && args->max_ctas > 0)
      throw_config("bench allreduce: --max-ctas limits NCCL's CTAs and needs --device gpu");
    cfg.nccl.max_ctas = args->max_ctas;
    cfg.nccl.cta_policy = parse_cta_policy(args->cta_policy, "--cta-policy");
    if (!cfg.gpu && cfg.nccl.cta_policy != CtaPolicy::Default)
      throw_config("bench allreduce: --cta-policy sets NCCL's CTA policy and needs --device gpu");
    cfg.nccl.low_priority = args->priority == "low";
    if (!cfg.gpu && cfg.nccl.low_priority)
      throw_config("bench allreduce: --priority sets the priority of NCCL's stream and needs --device gpu");
    if (!cfg.gpu && cmd->count("--issue") > 0 && args->issue == "graph")
      throw_config("bench allreduce: --issue graph replays NCCL allreduces from a CUDA graph and needs --device gpu");
    cfg.graph = args->issue == "graph";
    cfg.check = args->check;
    cfg.dtype = parse_float_type(args->dtype, "--dtype");
    cfg.timeout_seconds = args->timeout;
    // Energy is the GPUs' NVML counter; host-memory allreduces have no per-rank device counter.
    if (!cfg.gpu && cmd->count("--energy-window") > 0 && args->energy_window > 0)
      throw_config("bench allreduce: --energy-window reads each GPU's energy counter and needs --device gpu");
    if (cfg.gpu && args->energy_window > 0) {
      cfg.energy_window_seconds = args->energy_window;
      cfg.energy_settle_seconds = args->energy_settle;
      cfg.energy_counter_name = "NVML total energy counter (nvmlDeviceGetTotalEnergyConsumption, mJ)";
      // Null without a readable counter (open_gpu_power_reader warned once).
      cfg.open_energy_counter = [](const std::string& uuid) -> EnergyCounter {
        return measure::energy_joules(measure::open_gpu_power_reader(uuid));
      };
    }
    const MpiEnv* mpi = MpiEnv::current();
    CNNSCALE_CHECK(mpi != nullptr, "bench allreduce needs the process's MpiEnv (made by main)");
    const bool save = !args->no_results && !args->results_root.empty();
    if (!save && cmd->count("--experiment") > 0)
      throw_config("bench allreduce --experiment names the results subfolder: give --results DIR too");
    const std::string dir = save ? report::allreduce_bench_dir(args->results_root, args->experiment) : "";
    if (save) {
      // Rank 0's verdict goes to every rank, so that all of them stop before the first collective.
      std::vector<char> verdict;
      if (mpi->rank() == 0) {
        const std::string error = check_results_dir(*args, dir);
        verdict.assign(error.begin(), error.end());
      }
      mpi->broadcast(verdict, 0);
      if (!verdict.empty()) {
        // One line for the whole job: rank 0 reports it and main's MPI_Abort ends every rank with
        // exit 2; the others wait for that in a broadcast rank 0 never sends.
        if (mpi->rank() != 0) {
          std::vector<char> never;
          mpi->broadcast(never, 0);
        }
        throw ConfigError(std::string(verdict.begin(), verdict.end()));
      }
    }
    const auto [utc_time, utc_stamp] = utc_times(std::chrono::system_clock::now());
    Provenance provenance = start_provenance();
    provenance.hosts = distinct_hosts(mpi->allgather(mpi->host()));
    const AllreduceBenchResult result = run_allreduce_bench(cfg);
    set_end(provenance);
    long long wrong = 0;
    for (const auto& row : result.rows) wrong += row.wrong > 0 ? row.wrong : 0;
    if (mpi->rank() == 0) {
      AllreduceResult summary = allreduce_result(result, cfg.check, utc_time, mpi->host());
      summary.provenance = provenance;
      const nlohmann::json j = allreduce_result_json(summary);
      if (args->json)
        std::cout << j.dump(2) << "\n";
      else
        std::cout << table(result, cfg.check);
      std::cout.flush();
      // A failed check saves nothing: the report would average wrong sums with good ones.
      if (save && wrong == 0) {
        const std::string path =
            report::write_allreduce_bench_folder(dir, report::allreduce_bench_stem(result, utc_stamp), j);
        std::fprintf(stderr, "results: %s\n", path.c_str());
      }
    }
    if (wrong > 0)
      throw_runtime("bench allreduce --check: {} element(s) summed wrongly (see the #wrong column)", wrong);
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
