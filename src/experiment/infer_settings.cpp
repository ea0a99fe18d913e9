// The table of `cnnscale infer`'s settings (command_settings.hpp). To add a setting: one entry below,
// its field in app/cmd_infer.cpp (infer_fields), and the code that uses it; an entry in_infer is then
// also a key of an inference experiment's infer: section and a matrix axis, on each run's command line
// and, where it is not its default, in the run's configuration (infer_experiment.cpp). The entries left without a
// section or record (the checkpoint, the scenarios' settings) are infer's alone: a sweep runs the
// offline scenario of initialised weights.
#include "experiment/command_settings.hpp"
#include "experiment/option_groups.hpp"
#include "experiment/setting_decl.hpp"

namespace cnnscale {

namespace {

using namespace decl;
using namespace option_group;

// Runs on a GPU only: a CPU run records none of it.
bool infer_on_gpu(const RunContext& c) { return c.gpu; }

// An inference experiment's key: matrix.<name> (the matrix gives each run its value), the top-level
// <name>, or infer.<name>, recorded in each run's configuration always (as every inference run has
// been) or only where it differs from its default (runs from before the key existed keep their ids).
Setting in_matrix(Setting s) {
  s.section = "matrix";
  s.record = Record::Always;
  return s;
}
Setting top_level(Setting s) {
  s.record = Record::Always;
  return s;
}
Setting in_infer(Setting s, Record record = Record::NotDefault) {
  s.section = "infer";
  s.record = record;
  return s;
}
Setting recorded(Setting s) { return in_infer(std::move(s), Record::Always); }
// A key the report groups inference runs by (report_infer.cpp), beside the network, device,
// precision, batch size and ranks that every file states in its own fields: runs that differ in it
// compute, or run or measure, something else and are never averaged together. Every key of the
// infer: section but the batch list (a row each) and the int8 table (in the precision) is one, so
// that a sweep over any of them (matrix.seconds) has a row per value.
Setting grouped(Setting s) {
  s.report_label = s.name;
  return s;
}

SettingTable make_infer_settings() {
  SettingTable all;
  const GroupedAdd add{all};
  add(kInferModel,
      in_matrix(
          text("network", "", "Network name (networks/NAME.yaml) or YAML path (default: the checkpoint's)", "--net")));
  add(kInferModel, text("checkpoint", "", "Weights (and network) of a `train` checkpoint (default: initialised)"));
  add(kInferBatches,
      recorded(list(SettingType::TextList, "batch", {"1", "8", "64"},
                    "Batch sizes, comma-separated, or max (the largest that fits in memory), alone or last "
                    "(1,8,max: those sizes that fit, then the largest)")));
  add(kInferModel,
      in_infer(text("calibration", "",
                    "--precision int8: the calibration table of the network (cnnscale calibrate --out), or synthetic "
                    "(max |x| / 127 of each layer's input over 8 samples of --fill: speed only, no accuracy)"),
               Record::NotDefault));
  add(kInferModel, in_matrix(choice("precision", "fp32", {"fp32", "tf32", "bf16", "fp16", "int8"},
                                    "fp32, tf32, bf16 or fp16 (GPU only, except fp32), or int8 (with --calibration)")));
  add(kInferModel,
      top_level(text("device", "cpu", "cpu, gpu or gpu:N (under mpirun: gpu binds each rank to its own)")));
  add(kInferModel, in_matrix(list(SettingType::IntegerList, "gpu_mix", nullptr,
                                  "Under mpirun: the GPU of each node-local rank", "--gpus")));
  add(kInferBatches,
      grouped(recorded(choice("fill", "gaussian", {"gaussian", "constant"},
                              "Input values: gaussian (seeded N(0,1)) or constant (0.5); never all-zero"))));
  add(kInferBatches,
      grouped(recorded(with_unit(
          number("seconds", 3.0, "Length of each batch size's throughput/energy window", 0, 3600, true), "s"))));
  add(kInferBatches,
      grouped(recorded(
          with_unit(number("latency_seconds", 1.0, "Time spent on single-batch latencies per size", 0, 3600), "s"))));
  add(kInferBatches,
      grouped(in_infer(
          with_unit(integer("warmup", 3, "Untimed batches before each batch size's windows", 0, 1e6), "batches"))));
  add(kInferBatches,
      grouped(in_infer(with_unit(
          number("memory_limit", 0.0,
                 "--batch max: memory budget in GiB (default: the GPU's memory, or half the host's free memory)", 0,
                 1e6),
          "GiB"))));
  add(kInferBatches,
      grouped(in_infer(with_unit(
          number("power_hz", 10.0, "GPU power sampling rate (a cross-check of the energy counter; 0: off)", 0, 1e4),
          "Hz"))));
  add(kInferModel, top_level(integer("seed", 1, "Seed of initialised weights and the gaussian input", 0, 4.6e18)));
  add(kInferPass,
      grouped(recorded(flag("fold", true, "Keep batch norms as layers instead of folding them into their convolutions",
                            "--no-fold"))));
  {
    Setting s = choice("fc_gemv", "auto", {"auto", "on", "off"},
                            "GPU: fully connected layers at batch 1 as cuBLAS GEMV (on), as the cuBLASLt matmul of "
                            "every other batch size (off), or whichever measures faster per layer shape (auto)");
    s.applies = infer_on_gpu;
    add(kInferPass, grouped(in_infer(std::move(s))));
  }
  add(kInferPass, grouped(recorded(flag("fuse", true,
                                        "Keep ReLUs and residual sums as layers instead of fusing them into the "
                                        "convolution before them",
                                        "--no-fuse"))));
  {
    Setting s = flag("graph", true,
                          "Queue every forward pass op by op instead of replaying each batch size's pass from a CUDA "
                          "graph captured after its first (GPU)",
                          "--no-graph");
    s.applies = infer_on_gpu;
    add(kInferPass, grouped(recorded(std::move(s))));
  }
  add(kInferScenarios,
      choice("scenario", "offline", {"offline", "single-stream", "server", "server-search"},
             "offline (throughput per --batch size), single-stream (one query at a time), server (Poisson "
             "arrivals at --rate, dynamic batching) or server-search (highest rate meeting --latency-bound)"));
  add(kInferScenarios, with_unit(number("rate", 0.0, "server: offered queries per second"), "queries/s"));
  add(kInferScenarios, integer("max_batch", 64, "server: largest dynamic batch (nets of powers of two up to it)"));
  add(kInferScenarios, with_unit(number("latency_bound", 0.015, "server: bound on the p99 latency in seconds"), "s"));
  add(kInferScenarios,
      with_unit(number("rate_lo", 0.0, "server-search: a rate that meets the bound (default: --rate-hi / 64)"),
                "queries/s"));
  add(kInferScenarios,
      with_unit(number("rate_hi", 0.0, "server-search: upper end (default: offline throughput at --max-batch)"),
                "queries/s"));
  add(kInferScenarios, integer("rate_steps", 6, "server-search: bisection steps"));
  add(kInferScenarios, integer("min_queries", 100, "single-stream: at least this many queries"));
  return all;
}

}  // namespace

const SettingTable& infer_settings() {
  static const SettingTable table = make_infer_settings();
  return table;
}

}  // namespace cnnscale
