// check_allreduce_bench_request, run_allreduce_bench_job and the result (allreduce_bench_run.hpp).
#include "experiment/allreduce_bench_run.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <vector>

#include "core/environment.hpp"
#include "core/error.hpp"
#include "core/precision.hpp"
#include "experiment/report_allreduce.hpp"
#include "io/provenance.hpp"
#include "io/results_writer.hpp"
#include "job/job.hpp"
#include "measure/nvml.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/mpi_env.hpp"

namespace cnnscale {

namespace {

// Rank 0's check of the results folder: "" when it can write there, else the error. Only rank 0
// touches the filesystem (the others may not share it).
std::string check_results_dir(const AllreduceBenchRequest& r, const std::string& dir) {
  try {
    check_results_name("--experiment", r.experiment);  // a path component, as train's
  } catch (const ConfigError& e) {
    return e.what();
  }
  try {
    report::prepare_allreduce_bench_dir(dir);
  } catch (const ConfigError& e) {
    return fmt::format("bench allreduce --results {}: {}", r.results_root, e.what());
  }
  return "";
}

}  // namespace

AllreduceBenchConfig check_allreduce_bench_request(const AllreduceBenchRequest& r, int ranks) {
  AllreduceBenchConfig cfg;
  cfg.min_bytes = parse_byte_size(r.min_bytes, "-b");
  cfg.max_bytes = parse_byte_size(r.max_bytes, "-e");
  cfg.step_factor = r.step_factor;
  cfg.warmup_iters = r.warmup;
  cfg.iters = r.iters;
  cfg.repeats = r.repeats;
  cfg.gpu = r.device == "gpu";
  if (!cfg.gpu && r.algo_given)
    throw_config("bench allreduce: --algo chooses NCCL's algorithm and needs --device gpu");
  cfg.algo = parse_allreduce_algo(r.algo);
  if (!cfg.gpu && r.max_ctas > 0) throw_config("bench allreduce: --max-ctas limits NCCL's CTAs and needs --device gpu");
  cfg.nccl.max_ctas = r.max_ctas;
  cfg.nccl.cta_policy = parse_cta_policy(r.cta_policy, "--cta-policy");
  if (!cfg.gpu && cfg.nccl.cta_policy != CtaPolicy::Default)
    throw_config("bench allreduce: --cta-policy sets NCCL's CTA policy and needs --device gpu");
  cfg.nccl.low_priority = r.priority == "low";
  if (!cfg.gpu && cfg.nccl.low_priority)
    throw_config("bench allreduce: --priority sets the priority of NCCL's stream and needs --device gpu");
  if (!cfg.gpu && r.issue_given && r.issue == "graph")
    throw_config("bench allreduce: --issue graph replays NCCL allreduces from a CUDA graph and needs --device gpu");
  cfg.graph = r.issue == "graph";
  cfg.check = r.check;
  cfg.dtype = parse_float_type(r.dtype, "--dtype");
  cfg.timeout_seconds = r.timeout;
  // Energy is the GPUs' NVML counter; host-memory allreduces have no per-rank device counter.
  if (!cfg.gpu && r.energy_window_given && r.energy_window > 0)
    throw_config("bench allreduce: --energy-window reads each GPU's energy counter and needs --device gpu");
  if (cfg.gpu && r.energy_window > 0) {
    cfg.energy_window_seconds = r.energy_window;
    cfg.energy_settle_seconds = r.energy_settle;
    cfg.energy_counter_name = "NVML total energy counter (nvmlDeviceGetTotalEnergyConsumption, mJ)";
    // Null without a readable counter (open_gpu_power_reader warned once).
    cfg.open_energy_counter = [](const std::string& uuid) -> EnergyCounter {
      return measure::energy_joules(measure::open_gpu_power_reader(uuid));
    };
  }
  validate_allreduce_bench(cfg, ranks);
  const bool save = !r.no_results && !r.results_root.empty();
  if (!save && r.experiment_given)
    throw_config("bench allreduce --experiment names the results subfolder: give --results DIR too");
  return cfg;
}

AllreduceBenchRun run_allreduce_bench_job(const AllreduceBenchRequest& r) {
  // Every rank of the launch (also mpirun -np 1, whose MPI_Allreduce is then timed): the job binds
  // each GPU rank to its node-local rank's GPU, checks that no two share one, and connects NCCL.
  const MpiEnv* mpi = MpiEnv::current();
  Job job(mpi && mpi->initialized());
  const AllreduceBenchConfig cfg = check_allreduce_bench_request(r, job.size());
  AllreduceBenchRun run;
  const bool save = !r.no_results && !r.results_root.empty();
  run.dir = save ? report::allreduce_bench_dir(r.results_root, r.experiment) : "";
  if (save) {
    // Rank 0's verdict goes to every rank, so that all of them stop before the first collective.
    const std::string verdict = job.gather(job.rank() == 0 ? check_results_dir(r, run.dir) : std::string())[0];
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
  run.utc_stamp = utc_stamp;
  Provenance provenance = start_provenance();
  provenance.hosts = distinct_hosts(job.gather(job.host()));
  run.bench = run_allreduce_bench(cfg, ranks);
  set_end(provenance);
  run.checked = cfg.check;
  for (const auto& row : run.bench.rows) run.wrong += row.wrong > 0 ? row.wrong : 0;
  if (job.rank() != 0) return run;
  run.rank0 = true;
  run.summary = allreduce_result(run.bench, cfg.check, utc_time, job.host());
  run.summary.provenance = provenance;
  run.summary.settings = r.settings;
  return run;
}

std::string save_allreduce_bench(const AllreduceBenchRun& run) {
  if (!run.rank0 || run.dir.empty() || run.wrong > 0) return "";
  return report::write_allreduce_bench_folder(run.dir, report::allreduce_bench_stem(run.bench, run.utc_stamp),
                                              allreduce_result_json(run.summary));
}

std::string nccl_tests_type(const std::string& dtype) {
  return dtype == "bf16" ? "bfloat16" : dtype == "fp16" ? "half" : "float";
}

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
  out.cta_policy =
      r.nccl.cta_policy != CtaPolicy::Default ? TextFigure(std::string(to_string(r.nccl.cta_policy))) : TextFigure::null();
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

}  // namespace cnnscale
