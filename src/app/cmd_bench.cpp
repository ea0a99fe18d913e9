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
#include "app/setting_options.hpp"
#include "core/environment.hpp"
#include "core/error.hpp"
#include "core/precision.hpp"
#include "experiment/command_settings.hpp"
#include "experiment/report_allreduce.hpp"
#include "io/allreduce_results.hpp"
#include "io/provenance.hpp"
#include "io/results_writer.hpp"
#include "job/job.hpp"
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

// Where each setting of the allreduce bench's table (experiment/command_settings.hpp) is held.
SettingFields allreduce_fields(AllreduceArgs& a) {
  return {{"min_bytes", &a.min_bytes},   {"max_bytes", &a.max_bytes},       {"step_factor", &a.step_factor},
          {"warmup", &a.warmup},         {"iters", &a.iters},               {"repeats", &a.repeats},
          {"device", &a.device},         {"algo", &a.algo},                 {"max_ctas", &a.max_ctas},
          {"cta_policy", &a.cta_policy}, {"priority", &a.priority},         {"issue", &a.issue},
          {"dtype", &a.dtype},           {"check", &a.check},               {"energy_window", &a.energy_window},
          {"energy_settle", &a.energy_settle}, {"timeout", &a.timeout}};
}

void register_allreduce(CLI::App& bench) {
  auto args = std::make_shared<AllreduceArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "allreduce", "In-place float sum allreduce over all ranks: time, algbw and busbw per size (as nccl-tests)");
  add_table_options(*cmd, allreduce_bench_settings(), fields_by_name(allreduce_fields(*args)));
  cmd->add_flag("--json", args->json, "print one JSON object instead of the table");
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
    // Every rank of the launch (also mpirun -np 1, whose MPI_Allreduce is then timed): the job binds
    // each GPU rank to its node-local rank's GPU, checks that no two share one, and connects NCCL.
    const MpiEnv* mpi = MpiEnv::current();
    Job job(mpi && mpi->initialized());
    validate_allreduce_bench(cfg, job.size());
    const bool save = !args->no_results && !args->results_root.empty();
    if (!save && cmd->count("--experiment") > 0)
      throw_config("bench allreduce --experiment names the results subfolder: give --results DIR too");
    const std::string dir = save ? report::allreduce_bench_dir(args->results_root, args->experiment) : "";
    if (save) {
      // Rank 0's verdict goes to every rank, so that all of them stop before the first collective.
      const std::string verdict = job.gather(job.rank() == 0 ? check_results_dir(*args, dir) : std::string())[0];
      if (!verdict.empty()) {
        // One line for the whole job: rank 0 reports it and main's MPI_Abort ends every rank with
        // exit 2; the others wait for that in a collective rank 0 never joins.
        if (job.rank() != 0) job.start_together();
        throw ConfigError(verdict);
      }
    }
    AllreduceBenchRanks ranks{job.rank(), job.size()};
    if (cfg.gpu) {
      ranks.backend = &job.open_backend(job.device_for_ranks("gpu", {}));
      ranks.device = job.bind_devices()[static_cast<size_t>(job.rank())];
      // A GPU job's communicator is NCCL's, whose CUDA events time the host-issued allreduces.
      ranks.comm = dynamic_cast<DeviceCommunicator*>(&job.connect({cfg.algo, cfg.nccl, cfg.timeout_seconds}));
    }
    const auto [utc_time, utc_stamp] = utc_times(std::chrono::system_clock::now());
    Provenance provenance = start_provenance();
    provenance.hosts = distinct_hosts(job.gather(job.host()));
    const AllreduceBenchResult result = run_allreduce_bench(cfg, ranks);
    set_end(provenance);
    long long wrong = 0;
    for (const auto& row : result.rows) wrong += row.wrong > 0 ? row.wrong : 0;
    if (job.rank() == 0) {
      AllreduceResult summary = allreduce_result(result, cfg.check, utc_time, job.host());
      summary.provenance = provenance;
      summary.settings = setting_values(allreduce_bench_settings(), allreduce_fields(*args));
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
