// What `cnnscale bench gemm|conv|spmm|rnn` does, below the command: the problem list (a DeepBench
// set from data/bench/, a CSV list of one's own, --shape, a network's layers or a sweep, sliced by
// --from and --limit), every variant the device offers timed with the shared harness
// (measure/kernel_bench_suite), and the run as the results schema's struct, saved as a result
// folder for `report`. The command parses and prints.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/kernel_bench_results.hpp"
#include "io/kernel_profile_results.hpp"
#include "io/setting_values.hpp"
#include "measure/kernel_bench_suite.hpp"

namespace cnnscale {

// A kernel bench's settings (experiment/command_settings.cpp declares each kind's, their flags and
// defaults) and where its result goes.
struct KernelBenchRequest {
  std::string kind;  // gemm, conv, spmm or rnn
  std::string device = "cpu";
  std::string precision = "fp32";
  std::string set = "training";
  std::string shapes_file;
  std::string net;
  int64_t batch = 64;
  std::vector<std::string> shapes;
  int64_t limit = 0;
  int64_t from = 1;
  double energy_within = 0;
  std::vector<std::string> passes{"fwd", "bwd_data", "bwd_filter"};
  std::string layout = "nchw";
  std::string sweep, sweep_base = "64,128,64,11,1,3";
  std::vector<int64_t> sweep_values;
  int warmup = 3, repeats = 10;
  double min_repeat_ms = 2.0;
  double max_seconds = 2.0;
  double energy_window = -1;  // -1: the device's default
  double energy_settle = 0.5;
  bool check = false;
  double check_max_macs = 2e8;
  bool peak = true;
  uint64_t seed = 1;
  bool kernels = false;                  // conv: --kernels (or --metrics): each variant's kernels traced
  std::string metrics;                   // conv: --metrics, "default" or a comma list of keys
  std::string metric_replay = "kernel";  // conv: --metric-replay
  // Which of these the command line gave, where a default and a value given differ in meaning.
  bool set_given = false, sweep_base_given = false, batch_given = false, experiment_given = false,
       metrics_given = false,  // an empty --metrics is still one, refused as such
      metric_replay_given = false;
  std::string results_root, experiment = "bench";  // "" root: nothing saved
  bool no_results = false;
  SettingValues settings;  // every entry of the kind's table as the run was given it (the result records it)
  std::function<void(const std::string&)> progress;  // a line per problem and variant; null: none
};

// The problems to run (those of the request's kind) and how, as far as known before a device.
struct KernelBenchPlan {
  std::vector<std::string> metric_keys;  // conv --metrics, parsed and checked; empty: none
  std::vector<GemmProblem> gemms;
  std::vector<ConvProblem> convs;
  std::vector<SparseProblem> sparse;
  std::vector<RnnProblem> rnns;
  std::vector<std::string> names;  // --net: each problem's layer
  size_t listed = 0, kept = 0;     // problems in the list, and in its --from/--limit slice
  measure::KernelBenchOptions options;
};

// ConfigError for every setting that is wrong or does not go with the others, and the problem list
// read (a set's or a shapes file, a network's layers), before a device is opened.
KernelBenchPlan check_kernel_bench_request(const KernelBenchRequest& r);

struct KernelBenchRun {
  measure::KernelBenchResult result;  // the rows, for the table
  KernelBenchSummary summary;         // the result as saved, provenance and settings included
  std::string utc_stamp;              // the start, in the result folder's name
  size_t kept = 0;                    // problems run or due (the slice)
  // conv --kernels: what each variant's call ran (saved beside the bench folder, under kernels/).
  std::optional<KernelProfileSummary> kernel_profile;
};

// Checks `r` and benchmarks its problems on one device, as a job of one process (under mpirun
// too: the ranks are independent runs). A stop signal ends the run at the next variant: the
// problem in hand is dropped, the result has the whole problems before and says where it stopped.
KernelBenchRun run_kernel_bench(const KernelBenchRequest& r);

// The run's result folder under r's results root; its path, "" when nothing is saved.
std::string save_kernel_bench(const KernelBenchRequest& r, const KernelBenchRun& run);
// The kernel profile's folder (conv --kernels) under r's results root; "" when nothing is saved.
std::string save_kernel_bench_kernels(const KernelBenchRequest& r, const KernelBenchRun& run);

}  // namespace cnnscale
