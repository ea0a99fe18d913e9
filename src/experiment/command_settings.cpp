// The tables of time's, calibrate's and each bench's settings (command_settings.hpp); infer's is in
// infer_settings.cpp. To add a setting: one entry below, its field where the command binds its table
// (the app/ file of the command), and the code that uses it.
#include "experiment/command_settings.hpp"

#include <map>

#include "core/error.hpp"
#include "experiment/option_groups.hpp"
#include "experiment/setting_decl.hpp"
#include "experiment/train_settings.hpp"
#include "measure/bench_shapes.hpp"

namespace cnnscale {

namespace {

using namespace decl;
using namespace option_group;

bool on_gpu(const RunContext& c) {
  return c.gpu;
}

Setting gpu_only(Setting s) {
  s.applies = on_gpu;
  return s;
}

// The GPU backend's algorithm choices, as train declares them (train_settings_run.cpp): time takes
// the same options; it records no configuration and has no experiment.
SettingTable gpu_algorithm_settings() {
  SettingTable all;
  for (const char* name : {"conv_search", "layout", "batchnorm"}) {
    Setting s = *find_train_setting(name);
    s.section.clear();
    s.record = Record::Never;
    s.report_label.clear();
    all.push_back(std::move(s));
  }
  return all;
}

// The kernel-level view's switches, the same for every command that has it (time, bench conv):
// `launched` says whose kernels are traced, `work` what one profiled run of them is.
std::vector<Setting> kernel_view_settings(const std::string& launched, const std::string& work) {
  return {flag("kernels", false,
               "GPU: also trace every kernel " + launched +
                   " (CUPTI): name, launches, time, grid, block, registers, shared memory, theoretical occupancy"),
          text("metrics", "",
               "Hardware metrics per kernel (CUPTI's range profiler, in passes as --metric-replay says; implies "
               "--kernels): default, or a comma list of metric keys (docs/time-netinfo.md)"),
          choice("metric_replay", "kernel", {"kernel", "work"},
                 "With --metrics, how the metric set's passes are had: kernel (each kernel run once per pass, its "
                 "memory saved and restored between passes) or work (" +
                     work + " run once per pass, each kernel measured after the ones before it, nothing restored)")};
}

SettingTable make_time_settings() {
  SettingTable all;
  const GroupedAdd add{all};
  add(kTimeRun, text("net", "", "Network name (networks/NAME.yaml) or YAML path", "net"));  // positional
  add(kTimeRun, with_unit(integer("batch", 64, "Batch size"), "samples"));
  add(kTimeRun, with_unit(integer("iterations", 50, "Timed iterations (after the warm-up)"), "iterations"));
  add(kTimeRun, with_unit(integer("warmup", 5, "Untimed iterations first"), "iterations"));
  add(kDeviceStep, text("device", "cpu", "cpu, gpu or gpu:N"));
  add(kDeviceStep, choice("precision", "fp32", {"fp32", "tf32", "bf16", "fp16"},
                          "fp32, tf32, bf16 or fp16 (GPU only, except fp32)"));
  // CLI11 checks a value only when it is given: 0, the "not given" default, is refused as a value.
  add(kDeviceStep,
      gpu_only(integer("sm_count", 0, "Run on a partition of N SMs of the GPU (a green context; rounded up)", 1, kBig,
                       CliCheck::AtLeast)));
  add(kTimeRun,
      list(SettingType::IntegerList, "input_shape", nullptr, "Per-sample input C,H,W (default: the network's)"));
  add(kTimeRun, integer("classes", 0, "Number of classes (default: the network's)", 1, kBig, CliCheck::AtLeast));
  add(kTimeRun, integer("seed", 1, "Seed of weight init and the random input"));
  add(kDeviceStep, flag("fuse", true,
                        "Time every layer as written instead of with batch norm and convolution epilogues fused, as "
                        "training runs them",
                        "--no-fuse"));
  add(kTimeInference, flag("inference", false,
                           "Time the network as `cnnscale infer` runs it: batch norms folded, epilogues fused, forward "
                           "passes alone in the test phase"));
  add(kTimeInference, flag("fold", true, "With --inference: keep batch norms as layers", "--no-fold"));
  add(kTimeInference,
      text("calibration", "",
           "With --inference: run the convolutions of this calibration table (cnnscale calibrate --out) in "
           "int8, as infer --precision int8 does"));
  for (Setting& s : kernel_view_settings("each layer's passes, the update and the input copy launch", "the step"))
    add(kKernelView, std::move(s));
  add(kKernelView, with_unit(integer("kernel_steps", 3, "With --kernels: traced steps (after the warm-up)", 1, kBig,
                                     CliCheck::AtLeast),
                             "iterations"));
  add(kKernelView, integer("top", 10, "With --kernels: the step's top kernels listed", 1, kBig, CliCheck::AtLeast));
  for (Setting& s : gpu_algorithm_settings()) all.push_back(std::move(s));
  return all;
}

SettingTable make_calibrate_settings() {
  SettingTable all;
  const GroupedAdd add{all};
  add(kCalibrateInputs, text("checkpoint", "", "Weights (and network) of a `train` checkpoint"));
  add(kCalibrateInputs, text("net", "", "Network name or YAML path (default: the checkpoint's own)"));
  add(kCalibrateInputs, text("data", "fashion-mnist",
                             "Real dataset: calibration samples from its training set, accuracy on its test set"));
  add(kCalibrateInputs, text("data_dir", "", "Dataset folder (default: the dataset's usual location)"));
  add(kCalibrateInputs,
      with_unit(integer("samples", 1000, "Calibration samples: the first N of the training set"), "samples"));
  add(kCalibrateInputs,
      with_unit(integer("batch", 100, "Batch size of the calibration and evaluation passes"), "samples"));
  // Checked when the run starts (calibration_method_from_name), with the methods' own message.
  add(kCalibrateThresholds,
      text("method", "percentile",
           "Input thresholds: percentile (--percentile of the non-zero |x|), entropy (least KL divergence, "
           "as TensorRT) or max (the largest |x|)"));
  add(kCalibrateThresholds,
      with_unit(number("percentile", 99.99, "--method percentile: the percentile of |x| kept", 0, 100, true), "%"));
  add(kCalibrateInputs, integer("test_samples", -1,
                                "Test samples of the accuracy cost: -1 the whole test set, 0 none, N the first N", -1));
  add(kCalibrateInputs, text("device", "cpu", "cpu or gpu:N (the passes run in fp32)"));
  return all;
}

SettingTable make_allreduce_settings() {
  SettingTable all;
  const GroupedAdd add{all};
  add(kAllreduceSizes,
      with_unit(text("min_bytes", "8", "smallest size in bytes (K, M, G suffixes: powers of 1024)", "-b,--minbytes"),
                "bytes"));
  add(kAllreduceSizes, with_unit(text("max_bytes", "1G", "largest size in bytes", "-e,--maxbytes"), "bytes"));
  add(kAllreduceSizes, integer("step_factor", 2, "multiply the size by this factor between steps", 0, kBig,
                               CliCheck::Later, "-f,--stepfactor"));
  add(kAllreduceSizes,
      integer("warmup", 5, "untimed allreduces per size before timing", 0, kBig, CliCheck::Later, "-w,--warmup_iters"));
  add(kAllreduceSizes,
      integer("iters", 20, "back-to-back allreduces per timed repeat", 0, kBig, CliCheck::Later, "-n,--iters"));
  add(kAllreduceSizes,
      integer("repeats", 5,
              "timed repeats per size, each after a barrier: the median, min and max per allreduce over them", 0, kBig,
              CliCheck::Later, "-r,--repeats"));
  add(kAllreduceDevice, choice("device", "gpu", {"gpu", "cpu"},
                               "gpu: NCCL on the GPU of each rank's node-local rank; cpu: MPI_Allreduce"));
  add(kAllreduceDevice,
      gpu_only(choice("algo", "ring", {"ring", "tree", "auto"},
                      "NCCL algorithm (sets NCCL_ALGO; an NCCL_ALGO already in the environment wins); gpu only")));
  add(kAllreduceDevice,
      gpu_only(integer("max_ctas", 0,
                       "most CTAs (SMs) each allreduce may run on (sets NCCL_MAX_CTAS; one already in the "
                       "environment wins; 0: NCCL's choice); gpu only",
                       0, 64, CliCheck::Range)));
  add(kAllreduceDevice,
      gpu_only(choice("cta_policy", "default", {"default", "efficiency", "zero"},
                      "NCCL's CTA policy (the communicator's config, NCCL >= 2.27): efficiency (the fewest "
                      "CTAs that reach decent bandwidth), zero (no CTAs where NCCL has such collectives) or "
                      "default; gpu only")));
  add(kAllreduceDevice,
      gpu_only(choice("priority", "high", {"high", "low"},
                      "priority of NCCL's stream: high (the greatest, as train's default) or low (the "
                      "least); gpu only")));
  add(kAllreduceDevice,
      gpu_only(choice("issue", "graph", {"graph", "host"},
                      "gpu: graph (the timed allreduces of a size captured once into a CUDA graph and "
                      "replayed, as a graphed training step issues them) or host (each issued from the host "
                      "in turn: adds NCCL's enqueue of every collective, which small sizes notice)")));
  add(kAllreduceSizes,
      choice("dtype", "fp32", {"fp32", "bf16", "fp16"},
             "element type: fp32, or bf16/fp16 as the 16-bit gradient exchange (train --allreduce-dtype) "
             "sends it; sizes count bytes either way",
             "-d,--dtype"));
  add(kAllreduceSizes, flag("check", false, "fill a known per-rank pattern and verify every sum (exit 1 if wrong)"));
  add(kBenchEnergy, with_unit(gpu_only(number("energy_window", 2.0,
                                              "GPU: seconds between two updates of each GPU's NVML energy counter over "
                                              "further allreduces per size (W, nJ per byte, and the same above an idle "
                                              "window's power); 0: no energy",
                                              0, 600, false, CliCheck::Range)),
                              "s"));
  add(kBenchEnergy, with_unit(gpu_only(number("energy_settle", 0.5,
                                              "GPU: seconds of those allreduces before the window opens, for the power "
                                              "controller to settle",
                                              0, 60, false, CliCheck::Range)),
                              "s"));
  add(kAllreduceSizes,
      with_unit(number("timeout", 300.0, "seconds a rank waits for a collective before it gives up (exit 3)", 0, 1e6,
                       true, CliCheck::Range),
                "s"));
  return all;
}

SettingTable make_kernel_settings(const std::string& kind) {
  const bool gemm = kind == "gemm", spmm = kind == "spmm", rnn = kind == "rnn", conv = kind == "conv";
  SettingTable all;
  const GroupedAdd add{all};
  add(kBenchDevice, text("device", "cpu", "cpu, gpu or gpu:N"));
  add(kBenchDevice,
      text("precision", "fp32",
           rnn    ? "fp32 (FMA math, no TF32), tf32, bf16 or fp16 (tensor cores, fp32 inside the cell)"
           : gemm ? "fp32 (no TF32), tf32, bf16, fp16 or int8 (int32 sums; dimensions padded to multiples of "
                    "4 as DeepBench does); the CPU runs fp32"
                  : "fp32 (FMA math, no TF32), tf32, bf16 or fp16; the CPU runs fp32"));
  if (spmm)  // DeepBench has no sparse training set
    add(kBenchProblems, choice("set", "inference-server", {"inference-server", "inference-device"},
                               "DeepBench's sparse set: inference-server or inference-device (data/bench/)"));
  else if (conv)  // Li et al.'s Table I too
    add(kBenchProblems, choice("set", "training", measure::conv_bench_set_names(),
                               "DeepBench's set: training, inference-server or inference-device, or li-table1: Li "
                               "et al.'s Table I (data/bench/)"));
  else
    add(kBenchProblems, choice("set", "training", measure::bench_set_names(),
                               "DeepBench's set: training, inference-server or inference-device (data/bench/)"));
  add(kBenchProblems, text("shapes", "", "a CSV shape list in data/bench/'s format instead of a set"));
  add(kBenchProblems, list(SettingType::TextList, "shape", nullptr,
                           rnn    ? "one problem hidden,batch,time_steps,cell (cell: vanilla, lstm or gru; repeatable)"
                           : spmm ? "one problem m,n,k,sparsity (repeatable; sparsity: the fraction of A that is zero)"
                           : gemm ? "one problem m,n,k[,trans_a,trans_b] (repeatable)"
                                  : "one problem w,h,c,n,k,s,r,pad_w,pad_h,stride_w,stride_h (repeatable)"));
  if (!spmm && !rnn) {
    add(kBenchProblems,
        text("net", "",
             gemm ? "the fully connected layers of a network (networks/NAME.yaml) as GEMMs"
                  : "the ungrouped convolutions of a network (networks/NAME.yaml), each distinct shape once"));
    add(kBenchProblems,
        with_unit(integer("batch", 64, "samples per call with --net", 1, kBig, CliCheck::AtLeast), "samples"));
  }
  add(kBenchProblems,
      integer("limit", 0, "only N problems of the list (the first N, or N from --from)", 1, kBig, CliCheck::AtLeast));
  add(kBenchProblems, integer("from", 1, "start at the list's problem N (1-based): a long set split over several runs",
                              1, kBig, CliCheck::AtLeast));
  if (rnn)
    add(kBenchProblems,
        list(SettingType::TextList, "pass", {"inference", "training"},
             "passes to time: inference (forward) and training (forward, backward-data, backward-weights)"));
  if (conv) {
    add(kBenchProblems, list(SettingType::TextList, "pass", {"fwd", "bwd_data", "bwd_filter"},
                             "passes to time: fwd, bwd_data, bwd_filter"));
    add(kBenchDevice,
        choice("layout", "nchw", {"nchw", "nhwc"}, "memory order of activations and filters (nhwc on a GPU only)"));
    add(kBenchProblems,
        choice("sweep", "", {"b", "i", "f", "k", "s"},
               "Li et al.'s sweep of one axis of (batch b, input i, filters f, kernel k, stride s) around "
               "--sweep-base, every algorithm per point (their Figures 3 and 5)"));
    add(kBenchProblems, text("sweep_base", "64,128,64,11,1,3", "the base tuple b,i,f,k,s[,c] (c: input channels)"));
    add(kBenchProblems,
        list(SettingType::IntegerList, "sweep_values", nullptr, "the swept axis' values (default: the axis' range)"));
    // Li et al.'s Fig. 4 and 6: what each algorithm runs, from one traced call after its timing.
    for (Setting& s :
         kernel_view_settings("one call of each algorithm and pass launches, after its timing", "each variant's call"))
      add(kKernelView, std::move(s));
  }
  add(kBenchTiming, with_unit(integer("warmup", 3, "untimed calls first", 0, kBig, CliCheck::AtLeast), "calls"));
  add(kBenchTiming,
      integer("repeats", 10, "timed repeats (median, min, max per call over them)", 1, kBig, CliCheck::AtLeast));
  add(kBenchTiming, with_unit(number("min_repeat_ms", 2.0, "back-to-back calls per repeat: enough to last this long", 0,
                                     1e6, true, CliCheck::Range),
                              "ms"));
  add(kBenchTiming,
      with_unit(number("max_seconds", 2.0,
                       "seconds the timed repeats of one variant may last: slower variants get fewer repeats "
                       "(at least 3, the count is in the results) and warm-up calls only while they fit half "
                       "of it; 0: always --repeats",
                       0, 1e6, false, CliCheck::Range),
                "s"));
  // -1, outside the range a value may take: the device's default.
  add(kBenchEnergy,
      with_unit(number("energy_window", -1.0,
                       "seconds between two updates of the energy counter over which each variant's power "
                       "is read (default 0.5 on a GPU, 0 on the CPU; 0: no energy)",
                       0, 60, false, CliCheck::Range),
                "s"));
  add(kBenchEnergy,
      with_unit(number("energy_settle", 0.5,
                       "seconds of back-to-back calls before each energy window, for the power controller to "
                       "settle",
                       0, 60, false, CliCheck::Range),
                "s"));
  // 0, outside the range: every variant.
  add(kBenchEnergy,
      number("energy_within", 0.0,
             "read the power only of variants at most this many times slower than their problem's fastest "
             "(a variant x times slower costs fewer joules only below 1/x of the fastest's power); default: "
             "every variant",
             1, 1e6, false, CliCheck::Range));
  add(kBenchTiming, flag("check", false,
                         "compare every variant's output with a double-precision host reference (problems up to "
                         "--check-max-macs); a disagreeing variant is reported in the check column, not hidden"));
  add(kBenchTiming, with_unit(number("check_max_macs", 2e8, "largest problem --check computes a reference for", 0, 1e15,
                                     true, CliCheck::Range),
                              "MACs"));
  add(kBenchTiming, flag("peak", true, "skip the square-GEMM peak the TFLOP/s are set against", "--no-peak"));
  add(kBenchTiming, integer("seed", 1, "seed of the inputs"));
  return all;
}

SettingTable make_data_settings() {
  SettingTable all;
  all.push_back(text("data", "fashion-mnist", "a real dataset, hdf5:DIR or list:FILE?size=HxW"));
  all.push_back(text("data_dir", "", "the dataset's folder (Fashion-MNIST)"));
  all.push_back(with_unit(integer("batch", 256, "samples a batch", 1, kBig, CliCheck::AtLeast), "samples"));
  all.push_back(integer("batches", 40, "batches a pass (at most an epoch)", 1, kBig, CliCheck::AtLeast));
  all.push_back(list(SettingType::IntegerList, "threads", {1, 2, 4}, "thread counts filling a batch"));
  all.push_back(
      with_unit(integer("crop_pad", 0, "augment as train --crop-pad does", 0, kBig, CliCheck::AtLeast), "pixels"));
  all.push_back(flag("mirror", false, "augment as train --mirror does"));
  all.push_back(flag("bytes", false,
                     "batches as a GPU run takes them from the host: the stored bytes and each sample's draw, "
                     "normalised and augmented later on the device (default: float batches, as CPU runs and "
                     "--host-decode fill them)"));
  return all;
}

}  // namespace

const SettingTable& time_settings() {
  static const SettingTable table = make_time_settings();
  return table;
}

const SettingTable& calibrate_settings() {
  static const SettingTable table = make_calibrate_settings();
  return table;
}

const SettingTable& allreduce_bench_settings() {
  static const SettingTable table = make_allreduce_settings();
  return table;
}

const SettingTable& kernel_bench_settings(const std::string& kind) {
  static const std::map<std::string, std::vector<Setting>> tables = [] {
    std::map<std::string, std::vector<Setting>> t;
    for (const char* k : {"gemm", "conv", "spmm", "rnn"}) t[k] = make_kernel_settings(k);
    return t;
  }();
  const auto it = tables.find(kind);
  if (it == tables.end()) throw_runtime("no kernel bench '{}'", kind);
  return it->second;
}

const SettingTable& data_bench_settings() {
  static const SettingTable table = make_data_settings();
  return table;
}

}  // namespace cnnscale
