// The --help groups of the commands' options, each name declared once: a settings table's entry names
// its group (Setting::group), a command's hand-written option takes it from here (app/cmd_*.cpp).
// The groups say what an option is for, so that `train --help` and the docs pages' "All options"
// sections (`cnnscale --options-reference COMMAND`) read by purpose rather than as one list. An option
// of no group is listed under CLI11's own "Options" (a command of few options has no groups).
#pragma once

namespace cnnscale::option_group {

// train (and, where time takes train's options, time).
inline constexpr const char* kNetworkSolver = "Network and solver";
inline constexpr const char* kEpochsData = "Epochs, batch and data";
inline constexpr const char* kDeviceStep = "Device, precision and the GPU step";
inline constexpr const char* kMeasurement = "Measurement";
inline constexpr const char* kCheckpoints = "Checkpoints and resume";
inline constexpr const char* kDataParallel = "Data parallel (under mpirun/srun)";

// infer.
inline constexpr const char* kInferModel = "Network, weights, precision and device";
inline constexpr const char* kInferBatches = "Batch sizes and measurement windows";
inline constexpr const char* kInferPass = "The forward pass";
inline constexpr const char* kInferScenarios = "Scenarios";

// time.
inline constexpr const char* kTimeRun = "Network, batch and timing";
inline constexpr const char* kTimeInference = "As infer runs it";
inline constexpr const char* kKernelView = "Kernels (CUPTI)";

// calibrate.
inline constexpr const char* kCalibrateInputs = "Network, weights, data and device";
inline constexpr const char* kCalibrateThresholds = "Thresholds";

// bench gemm, conv, spmm, rnn and allreduce.
inline constexpr const char* kBenchProblems = "Problems";
inline constexpr const char* kBenchDevice = "Device and precision";
inline constexpr const char* kBenchTiming = "Timing and checks";
inline constexpr const char* kBenchEnergy = "Energy";
inline constexpr const char* kAllreduceSizes = "Sizes, timing and checks";
inline constexpr const char* kAllreduceDevice = "Device and NCCL";

// sweep.
inline constexpr const char* kSweepPlan = "The plan";
inline constexpr const char* kSweepResults = "Results and resuming";
inline constexpr const char* kSweepEmit = "Job scripts instead of running (--emit)";

// Every measuring command: what it prints and where its results go.
inline constexpr const char* kResults = "Results and output";

}  // namespace cnnscale::option_group
