// What `cnnscale train` runs, below the command: run_training (train_run.cpp) and the pieces it is
// composed of, in its order: validate, claim the run folder, load the network and data, describe the
// run, then after training describe its results. The command (app/cmd_train.cpp) parses the flags
// into TrainArgs, calls run_training and prints what the run tells its TrainView; the tests call the
// same functions.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "data/fashion_mnist.hpp"
#include "experiment/setting_fields.hpp"
#include "experiment/train_measure.hpp"
#include "experiment/train_parallel.hpp"
#include "experiment/train_settings.hpp"
#include "io/run_results.hpp"
#include "net/net.hpp"
#include "solver/run_report.hpp"
#include "solver/trainer.hpp"

namespace cnnscale {

struct TrainArgs {
  std::string net;
  std::string data;
  std::string synthetic_fill = "gaussian";
  std::string data_dir = FashionMnistDataset::kDefaultDir;
  int64_t train_samples = 0, test_samples = -1;
  std::string device = "cpu";
  std::string precision = "fp32";  // --precision; validate_train_args sets options.precision from it
  std::string measure_mode = "steady";  // --measure; validate_train_args sets measure.measure from it
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

// train's settings of the table (experiment/train_settings.hpp), each bound to its field of `a`
// (train_setting_fields.cpp; the command's options are made on it), and a setting's value as the run
// has it. RuntimeError for a setting without a field (a mistake of the program).
SettingField train_setting_field(TrainArgs& a, const std::string& name);
nlohmann::json setting_value(const TrainArgs& a, const TrainSetting& s);
// The arguments of a command line that gives no flag but those of `required`: every setting of the
// table at its default (as the command's options write them), the rest as TrainArgs declares them.
TrainArgs default_train_args();

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

// What decides which of train's settings apply to this run (Setting::applies): its device, ranks,
// split, measurement and data, as an experiment's run_context decides it for the sweep's runs.
RunContext train_run_context(const TrainArgs& a, const TrainInputs& in, const ParallelRun& par);

// The run's identity, stored in checkpoints (TrainJob::run_config) and results: options, sizes,
// rank split and run id: each setting of the table where it applies (train_run_context).
nlohmann::json describe_run(TrainArgs& a, const TrainInputs& in, const ParallelRun& par);

// The run id the results are written under: the generated or given one, or a resumed
// interrupted run's (whose folder they replace). Known once the Trainer has read its checkpoint.
std::string results_run_id(const TrainArgs& a, const nlohmann::json& run_config, const Trainer& trainer);

// What rank 0 knows of the finished run, for assemble_run_results.
RunDescription describe_results(const TrainArgs& a, const TrainInputs& in, const nlohmann::json& run_config,
                                const Trainer& trainer, const TrainResult& r, const ParallelRun& par,
                                std::vector<EpochRecord> epochs);

struct TrainOutcome {
  const TrainResult& result;
  const JobTiming& job;
  const RunResults& results;
  std::string results_path;     // empty: --no-results
  std::string last_checkpoint;  // empty: none written
  bool on_gpu = false;          // which energy method explains a null energy
};

// What a run tells its user as it goes, on rank 0 only: the command prints it (app/train_output.cpp,
// app/train_progress.hpp); a test may record it. Each call is made where the command printed it.
class TrainView {
 public:
  virtual ~TrainView() = default;
  // Set up, before the first step: the banner.
  virtual void started(const TrainArgs&, const TrainInputs&, const Trainer&, const ParallelRun&) {}
  virtual void iteration(int64_t /*done*/, int64_t /*total*/) {}
  virtual void display(const DisplayInfo&) {}
  virtual void epoch(const EpochInfo&) {}
  virtual void message(const std::string&) {}  // a whole line (the progress file's path, the Trainer's notes)
  // Training is over, before anything after it is logged (the --mfu measurement, the results).
  virtual void trained() {}
  // The results are assembled and written (results_path "" with --no-results): the closing lines.
  virtual void finished(const TrainArgs&, const TrainInputs&, const Trainer&, const ParallelRun&,
                        const TrainOutcome&) {}
};

// One `cnnscale train` on this rank, top to bottom: every check before anything is loaded (exit 2),
// the run folder's and the checkpoint directory's claims, the job (ParallelRun: the batch split,
// devices, communicator), the Trainer's run under the stop signals, every rank's figures gathered,
// and on rank 0 the results written (ROOT/<experiment>/<run-id>, unless --no-results). Collective
// over the job's ranks. Returns true when the run was interrupted (a stop signal; its results, if
// any, say so): the command then exits for requeue (kExitRequeue).
bool run_training(TrainArgs& a, TrainView& view);

}  // namespace cnnscale
