// `cnnscale infer`: forward-only throughput, latency percentiles and joules per image of a network
// (initialised, or trained: --checkpoint) over a list of batch sizes or the largest that fits, in
// one precision, on one device per process. Under mpirun every rank streams its own batches on its
// own device; rank 0 prints each rank's figures and the job's (images/s and watts summed). The run
// is infer/infer_run's; this file parses and prints.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/results_options.hpp"
#include "app/setting_options.hpp"
#include "experiment/command_settings.hpp"
#include "experiment/option_groups.hpp"
#include "infer/infer_run.hpp"
#include "io/infer_results.hpp"

namespace cnnscale::app {

namespace {

struct InferArgs {
  infer::InferRequest request;  // every entry of infer's table, and where the result goes
  bool json = false;
};

SettingFields infer_fields(infer::InferRequest& a);

std::string fmt_opt(const std::optional<double>& v, const char* format) {
  if (!v) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, *v);
  return buf;
}

// single-stream, server and server-search: rank 0's rate (server: achieved queries/s) and the job's.
void print_scenario(const infer::InferRequest& a, const infer::InferRun& run) {
  const infer::ScenarioFigures& f = *run.scenario;
  const InferResult& j = run.result;
  const bool distributed = run.distributed;
  const double rate = run.rate;
  std::printf("%s on %s, %s, %s scenario%s\n", j.net.value().c_str(), run.backend_description.c_str(),
              a.precision.c_str(), f.scenario.c_str(),
              distributed ? (", rank 0 of " + std::to_string(run.ranks)).c_str() : "");
  auto ms = [](double s) { return 1e3 * s; };
  if (f.single_stream) {
    const infer::LatencyStats& l = f.single_stream->latency;
    std::printf("%lld queries in %.2f s: %.1f queries/s; latency p50 %.3f ms, p90 %.3f ms (MLPerf's metric), "
                "p99 %.3f ms%s\n",
                static_cast<long long>(f.single_stream->queries), f.single_stream->seconds, rate, ms(l.p50),
                ms(l.p90), ms(l.p99),
                f.energy.joules_per_sample ? fmt::format("; {:.5f} J/query", *f.energy.joules_per_sample).c_str()
                                           : "");
  }
  auto server_line = [&](const infer::ServerResult& r) {
    std::printf("offered %.1f/s, achieved %.1f/s, %lld queries in %lld batches (mean %.2f), p50 %.3f ms, p99 %.3f ms "
                "(bound %.3f ms: %s, %.1f%% within)\n",
                r.offered_rate, r.achieved_rate, static_cast<long long>(r.queries), static_cast<long long>(r.batches),
                r.mean_batch, ms(r.latency.p50), ms(r.latency.p99), ms(r.latency_bound),
                r.meets_bound ? "met" : "missed", 100 * r.within_bound);
  };
  if (f.search) {
    for (const infer::ServerResult& t : f.search->trials) server_line(t);
    std::printf("highest rate meeting the bound: %.1f queries/s (resolution %.1f)\n", f.search->best_rate,
                f.search->resolution);
  } else if (f.server) {
    server_line(*f.server);
  }
  std::printf("batch sizes prepared: %s; padding %.1f%% of the samples computed%s\n",
              fmt::format("{}", fmt::join(f.prepared_sizes, ",")).c_str(), 100 * f.padded_fraction,
              distributed ? fmt::format("; job {:.1f} queries/s", j.job_queries_per_s.value()).c_str() : "");
}

// offline: the run's line, then a row per batch size (and under mpirun the job's figures).
void print_offline(const infer::InferRequest& a, const infer::InferRun& run) {
  const infer::InferPlan& plan = run.plan;
  const bool distributed = run.distributed;
  const std::vector<InferBatch>& batches = run.result.batches.value();
  std::printf("%s on %s, %s, %s input%s, %zu batch norm(s) folded, %zu epilogue(s) fused%s\n",
              run.result.net.value().c_str(), run.backend_description.c_str(),
              plan.int8 ? "int8" : precision_name(plan.precision).c_str(), infer::input_fill_name(plan.engine.fill).c_str(),
              a.checkpoint.empty() ? ", initialised weights" : (", weights of " + a.checkpoint).c_str(),
              run.folded_batch_norms, run.fused_epilogues,
              distributed ? (", rank 0 of " + std::to_string(run.ranks)).c_str() : "");
  if (!run.on_cpu)
    std::printf("CUDA graph: %s (%lld forward passes replayed)\n", run.cuda_graph.c_str(),
                static_cast<long long>(run.graph_replays));
  if (run.max)
    std::printf("largest batch in %.2f GiB: %lld (model: %.3f GiB + %.3f MiB per sample)\n",
                static_cast<double>(run.max->limit_bytes) / double(int64_t{1} << 30),
                static_cast<long long>(run.rows.back().batch),
                static_cast<double>(run.max->fixed_bytes) / double(int64_t{1} << 30),
                static_cast<double>(run.max->bytes_per_sample) / double(1 << 20));
  std::printf("%7s %12s %10s %10s %10s %11s %9s %11s %9s %9s\n", "batch", "images/s", "p50 ms", "p90 ms", "p99 ms",
              "J/image", "W", "images/J", "SM MHz", "peak GiB");
  for (size_t i = 0; i < run.rows.size(); ++i) {
    const infer::BatchFigures& f = run.rows[i];
    std::printf("%7lld %12.1f %10.3f %10.3f %10.3f %11s %9s %11s %9s %9.3f\n", static_cast<long long>(f.batch),
                f.images_per_s, 1e3 * f.latency.p50, 1e3 * f.latency.p90, 1e3 * f.latency.p99,
                fmt_opt(f.joules_per_image, "%.5f").c_str(), fmt_opt(f.watts, "%.1f").c_str(),
                fmt_opt(f.images_per_joule, "%.1f").c_str(), fmt_opt(f.sm_clock_mhz, "%.0f").c_str(),
                static_cast<double>(f.peak_memory_bytes) / double(int64_t{1} << 30));
    if (distributed)
      std::printf("%7s job of %d ranks: %.1f images/s%s\n", "", run.ranks, batches[i].job_images_per_s.value(),
                  batches[i].job_watts.has_value() ? fmt::format(", {:.1f} W", batches[i].job_watts.value()).c_str() : "");
  }
}

void run_infer_command(InferArgs& args) {
  infer::InferRequest& a = args.request;
  a.settings = setting_values(infer_settings(), infer_fields(a));
  const infer::InferRun run = infer::run_infer(a);
  if (!run.rank0) return;
  if (args.json) {
    std::printf("%s\n", infer_result_json(run.result).dump().c_str());
    std::fflush(stdout);
    return;
  }
  if (run.scenario)
    print_scenario(a, run);
  else
    print_offline(a, run);
}

// Where each setting of infer's table (experiment/command_settings.hpp) is held.
SettingFields infer_fields(infer::InferRequest& a) {
  return {{"network", &a.net},
          {"checkpoint", &a.checkpoint},
          {"batch", &a.batches},
          {"calibration", &a.calibration},
          {"precision", &a.precision},
          {"device", &a.device},
          {"gpu_mix", &a.gpus},
          {"fill", &a.fill},
          {"seconds", &a.measure.min_seconds},
          {"latency_seconds", &a.measure.latency_seconds},
          {"warmup", &a.measure.warmup},
          {"memory_limit", &a.memory_limit_gib},
          {"power_hz", &a.power_hz},
          {"seed", &a.seed},
          {"fold", &a.fold},
          {"fc_gemv", &a.fc_gemv},
          {"fuse", &a.fuse},
          {"graph", &a.graph},
          {"scenario", &a.scenario},
          {"rate", &a.rate},
          {"max_batch", &a.max_batch},
          {"latency_bound", &a.latency_bound},
          {"rate_lo", &a.rate_lo},
          {"rate_hi", &a.rate_hi},
          {"rate_steps", &a.rate_steps},
          {"min_queries", &a.min_queries}};
}

}  // namespace

void register_infer(CLI::App& app) {
  auto args = std::make_shared<InferArgs>();
  infer::InferRequest& a = args->request;
  CLI::App* cmd = app.add_subcommand(
      "infer", "Inference throughput, latency percentiles and joules per image over batch sizes or in MLPerf-style "
               "scenarios (forward only), in one process or on every rank of mpirun/srun");
  add_table_options(*cmd, infer_settings(), fields_by_name(infer_fields(a)));
  cmd->add_flag("--json", args->json, "Print one JSON line on stdout instead of the table")
      ->group(option_group::kResults);
  add_results_options(*cmd, {.root = a.results_root,
                             .experiment = a.experiment,
                             .no_results = a.no_results,
                             .results_help = "rank 0 saves the run's JSON object to DIR/<experiment>/infer/ for "
                                             "`cnnscale report` (default: $CNNSCALE_RESULTS; without either nothing "
                                             "is saved)",
                             .run_id = &a.run_id,
                             .run_id_help = "Name of the result file, DIR/<experiment>/infer/ID.json (as a sweep "
                                            "names its runs); refused when it exists (default: network, precision, "
                                            "scenario, device and time)"});
  cmd->callback([args] { run_infer_command(*args); });
}

}  // namespace cnnscale::app
