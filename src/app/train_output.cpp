// What `cnnscale train` tells its user on rank 0: the banner before training, the closing lines on
// stderr (throughput, phases, memory, CUDA graph, energy, results folder, how to resume) and the
// --json line on stdout.
#include <cmath>
#include <cstdio>

#include "app/commands.hpp"
#include "app/train_output.hpp"
#include "core/stop_signal.hpp"
#include "io/results_writer.hpp"

namespace cnnscale::app {

namespace {
nlohmann::json nullable(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }
}  // namespace

void print_train_banner(const TrainArgs& a, const TrainInputs& in, const Trainer& trainer, const ParallelRun& par) {
  std::fprintf(stderr,
               "cnnscale train: %s (%lld parameters) on %s (%lld samples%s), batch %lld, %lld iterations "
               "(%lld per epoch), %s, precision %s on %s\n",
               in.spec.name().c_str(), static_cast<long long>(in.spec.total_params()), in.train->name().c_str(),
               static_cast<long long>(in.train->size()),
               in.test ? fmt::format(", test {}", in.test->size()).c_str() : "",
               static_cast<long long>(par.global_batch()), static_cast<long long>(trainer.total_iterations()),
               static_cast<long long>(trainer.iterations_per_epoch()), a.solver.describe().c_str(),
               precision_name(a.options.precision).c_str(), par.backend().description().c_str());
  if (par.active()) std::fprintf(stderr, "%s\n", par.describe(trainer).c_str());
}

void print_train_outcome(const Trainer& trainer, const TrainOutcome& o) {
  const TrainResult& r = o.result;
  std::fprintf(stderr,
               "done: %lld iterations in %.1f s, %.1f samples/s (steady state, %lld iterations), final loss %.4f",
               static_cast<long long>(r.iterations), r.seconds, o.job.samples_per_s,
               static_cast<long long>(r.timed_iterations), r.final_loss);
  if (r.test) std::fprintf(stderr, ", test top-1 %.4f top-%d %.4f", r.test->top1, r.test->top5_k, r.test->top5);
  std::fprintf(stderr, "\n");
  // This rank's (rank 0's) phase means; the per-iteration timeline is in r.phases for results files.
  const PhaseSummary& ps = r.phase_summary;
  std::fprintf(stderr, "phases (ms/iteration, mean of %lld after warm-up):", static_cast<long long>(ps.iterations));
  for (int p = 0; p < kStepPhases; ++p)
    std::fprintf(stderr, " %s %.3f", step_phase_name(p), 1e3 * ps.mean_seconds[static_cast<size_t>(p)]);
  std::fprintf(stderr, ", total %.3f\n", 1e3 * ps.mean_total);
  const RunSummary& summary = o.results.summary;
  std::fprintf(stderr, "memory: peak %.3f GiB held by one rank's backend (tensors and workspaces)",
               summary.peak_memory_bytes.value_or(0) / double(int64_t{1} << 30));
  if (summary.precision.value_or("") == "fp16")
    std::fprintf(stderr, "; fp16 loss scale %g at the end, %lld step(s) skipped for overflow",
                 summary.final_grad_scale.value_or(1), static_cast<long long>(summary.skipped_steps.value_or(0)));
  std::fprintf(stderr, "\n");
  // How the steps were queued: a GPU matter only, as the CPU backend runs every op as it is called.
  if (o.on_gpu) {
    const GraphFigures graph = graph_figures(r);
    if (graph.replays > 0)
      std::fprintf(stderr, "CUDA graph: on (%lld steps replayed)\n", static_cast<long long>(graph.replays));
    else
      std::fprintf(stderr, "CUDA graph: %s\n", cuda_graph_text(graph).c_str());
  }
  if (summary.matmul_peak_tflops.has_value()) {
    std::fprintf(stderr, "MFU: ");
    if (summary.mfu.has_value())
      std::fprintf(stderr, "%.1f%% (%.1f model TFLOP/s", 100 * summary.mfu.value(), summary.gflops.value() / 1e3);
    else
      std::fprintf(stderr, "- (no steady window");
    std::fprintf(stderr, " over a measured %s peak of %.1f TFLOP/s per device)\n", summary.precision.value_or("").c_str(),
                 summary.matmul_peak_tflops.value());
  }
  if (summary.joules_per_batch.has_value())
    std::fprintf(stderr, "energy: %.3f J/batch, %.1f W (%s)\n", summary.joules_per_batch.value(),
                 summary.watts.value(), o.results.methods.at("joules_per_batch").c_str());
  else
    std::fprintf(stderr, "energy: null (%s)\n",
                 r.window ? (o.on_gpu ? r.window->gpu_method : r.window->cpu_method).c_str()
                          : "no steady window");
  if (!o.results_path.empty())
    std::fprintf(stderr, "results: %s%s\n", o.results_path.c_str(), r.interrupted ? " (status: interrupted)" : "");
  if (r.interrupted)
    std::fprintf(stderr, "interrupted at iteration %lld of %lld%s: %s; exit code %d (requeue)\n",
                 static_cast<long long>(r.iterations), static_cast<long long>(trainer.total_iterations()),
                 r.interrupted_in.empty() ? "" : (" (in " + r.interrupted_in + " after training)").c_str(),
                 o.last_checkpoint.empty() ? "no checkpoint (no --checkpoint-dir)"
                                           : ("continue with --resume auto from " + o.last_checkpoint).c_str(),
                 kExitRequeue);
}

void print_train_json(const TrainArgs& a, const TrainInputs& in, const Trainer& trainer, const ParallelRun& par,
                      const TrainOutcome& o) {
  const TrainResult& r = o.result;
  using nlohmann::json;
  json j = {{"net", in.spec.name()},
            {"data", in.train->name()},
            {"device", par.backend().device().to_string()},
            {"precision", precision_name(a.options.precision)},
            {"allreduce_dtype", float_type_name(a.parallel.exchange_dtype)},
            {"batch", par.global_batch()},
            {"seed", a.options.seed},
            {"iterations", r.iterations},
            {"start_iteration", r.start_iteration},
            {"iterations_per_epoch", r.iterations_per_epoch},
            {"epochs", r.epochs},
            {"seconds", r.seconds},
            {"samples_per_s", nullable(o.job.samples_per_s > 0 ? o.job.samples_per_s : NAN)},
            {"timed_iterations", r.timed_iterations},
            {"timed_seconds", o.job.timed_seconds},
            {"data_wait_seconds", r.data_wait_seconds},
            {"final_loss", nullable(r.final_loss)},
            {"final_lr", r.final_lr},
            {"test_top1", r.test ? json(r.test->top1) : json()},
            {"test_top5", r.test ? json(r.test->top5) : json()},
            {"test_loss", r.test ? json(r.test->loss) : json()},
            {"test_samples", r.test ? json(r.test->samples) : json()},
            {"checkpoint", o.last_checkpoint.empty() ? json() : json(o.last_checkpoint)},
            {"resumed_from", r.resumed_from.empty() ? json() : json(r.resumed_from)},
            {"skipped_steps", r.skipped_steps},
            {"final_grad_scale", r.final_grad_scale},
            // Rank 0's, as in the summary: "on", or "off: <why every step was queued op by op>".
            {"cuda_graph", cuda_graph_text(graph_figures(r))},
            {"graph_replays", r.graph_replays},
            // The job's: the largest over the ranks (summary.json has each rank's).
            {"peak_memory_bytes", static_cast<int64_t>(o.results.summary.peak_memory_bytes.value_or(0))}};
  const PhaseSummary& ps = r.phase_summary;
  json phases = {{"iterations", ps.iterations}, {"total", ps.mean_total}};
  for (int p = 0; p < kStepPhases; ++p) phases[step_phase_name(p)] = ps.mean_seconds[static_cast<size_t>(p)];
  j["phases"] = phases;  // mean seconds per iteration on rank 0, warm-up excluded
  if (par.active()) j.update(par.job_json(trainer, o.job));
  j["results"] = o.results_path.empty() ? json() : json(o.results_path);
  j["run_id"] = o.results.run_id;
  j["summary"] = summary_values_json(o.results.summary);
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

}  // namespace cnnscale::app
