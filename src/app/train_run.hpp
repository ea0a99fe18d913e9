// The pieces `cnnscale train` is composed of (cmd_train.cpp's run_train reads them in order):
// validate, load the network and data, describe the run, then after training describe its results
// and print what a user reads. Shared by cmd_train.cpp, train_steps.cpp and train_output.cpp only.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/train_parallel.hpp"
#include "app/train_results.hpp"
#include "data/dataset.hpp"
#include "data/fashion_mnist.hpp"
#include "experiment/train_settings.hpp"
#include "net/net.hpp"
#include "solver/run_report.hpp"
#include "solver/trainer.hpp"

namespace CLI {
class App;
}

namespace cnnscale::app {

struct TrainArgs {
  std::string net;
  std::string data;
  std::string synthetic_fill = "gaussian";
  std::string data_dir = FashionMnistDataset::kDefaultDir;
  int64_t train_samples = 0, test_samples = -1;
  std::string device = "cpu";
  std::string precision = "fp32";  // --precision; validate_train_args sets options.precision from it
  bool host_decode = false;        // --host-decode; run_train sets options.input_decode from it
  std::string conv_search = "all";  // --conv-search: all | legacy | no-width (ConvSearch)
  bool deterministic = false;       // --deterministic (AlgorithmChoice)
  std::string layout = "auto";      // --layout: auto | nchw | nhwc (LayoutChoice)
  std::string batchnorm = "auto";   // --batchnorm: auto | cudnn | cnnscale (BatchNormKernels)
  bool mfu = false;                // --mfu: measure the matmul peak after training (put_mfu)
  std::vector<int64_t> input_shape;
  int64_t classes = 0;
  int pool_batches = 8;
  TrainOptions options;  // options.batch is --batch as given: the global batch is the job's (ParallelRun)
  // -1: not given (then one epoch); given values must be >= 1.
  int64_t epochs = -1, iterations = -1;
  SolverConfig solver;
  std::string lr_policy = "fixed";
  bool json = false;
  ParallelArgs parallel;
  MeasureArgs measure;
};

// train's settings of the table (experiment/train_settings.hpp), each bound to its field of `a`:
// their options (train_setting_options.cpp), and a setting's value as the run has it.
void add_setting_options(CLI::App& cmd, TrainArgs& a);
nlohmann::json setting_value(const TrainArgs& a, const TrainSetting& s);

// Every check that needs no file, device or peer: ConfigError (exit 2) before anything is loaded.
// Completes `a.options` from the flags.
void validate_train_args(TrainArgs& a);
// CNNSCALE_INJECT_NONFINITE_AT (the divergence tests' fault injection), or none.
TrainFaults train_faults_from_environment();

// The run folder ROOT/<experiment>/<run-id>, claimed for this process before any work (rank 0):
// held while the returned handle lives (null: nothing to claim, with --no-results or a generated
// run id). RuntimeError (exit 1) naming the holder's host and pid when another process has it;
// ConfigError when the experiment folder is a file or the run's folder was finished meanwhile.
std::shared_ptr<void> claim_run_folder(const MeasureArgs& m);

struct TrainInputs {
  std::string net_file;
  NetSpec spec;
  std::shared_ptr<const Dataset> train, test;  // test may be null
};
// The network (its classes from the dataset, or the synthetic flags) and datasets (a synthetic one
// sized for `global_batch`, the job's: ParallelRun::global_batch); ConfigError when a real dataset's
// sample shape is not the network's input shape.
TrainInputs load_train_inputs(TrainArgs& a, int64_t global_batch);

// The run's identity, stored in checkpoints (TrainJob::run_config) and results: options, sizes,
// rank split and run id.
nlohmann::json describe_run(TrainArgs& a, const TrainInputs& in, const ParallelRun& par);

// The run id the results are written under: the generated or given one, or a resumed
// interrupted run's (whose folder they replace). Known once the Trainer has read its checkpoint.
std::string results_run_id(const TrainArgs& a, const nlohmann::json& run_config, const Trainer& trainer);

// What rank 0 knows of the finished run, for assemble_run_results.
RunDescription describe_results(const TrainArgs& a, const TrainInputs& in, const nlohmann::json& run_config,
                                const Trainer& trainer, const TrainResult& r, const ParallelRun& par,
                                std::vector<EpochRecord> epochs);

// ---- what the user reads (train_output.cpp) ----
// The first line: network, data, batch, iterations, solver, device (and the job's ranks).
void print_train_banner(const TrainArgs& a, const TrainInputs& in, const Trainer& trainer, const ParallelRun& par);

struct TrainOutcome {
  const TrainResult& result;
  const JobTiming& job;
  const RunResults& results;
  std::string results_path;     // empty: --no-results
  std::string last_checkpoint;  // empty: none written
  bool on_gpu = false;          // which energy method explains a null energy
};
// The closing lines on stderr: throughput, phases, memory, CUDA graph (GPU runs), energy, where the
// results are, and how to resume.
void print_train_outcome(const Trainer& trainer, const TrainOutcome& o);
// --json: one line of results on stdout.
void print_train_json(const TrainArgs& a, const TrainInputs& in, const Trainer& trainer, const ParallelRun& par,
                      const TrainOutcome& o);

}  // namespace cnnscale::app
