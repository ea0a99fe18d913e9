// `cnnscale train`: one network, one dataset, one device per rank. Declares the flags (most of them
// from train's settings table), hands them to run_training (experiment/train_run.hpp), which checks
// every option before any heavy work (so bad input costs one clear line and exit 2), sets up the job
// and trains, and prints what the run tells it: progress on stderr and, with --json, one JSON line of
// results on stdout. Under mpirun/srun the ranks train data-parallel; only rank 0 shows progress and
// prints the JSON line, which then describes the whole job.
#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/results_options.hpp"
#include "app/setting_options.hpp"
#include "app/train_output.hpp"
#include "app/train_progress.hpp"
#include "core/stop_signal.hpp"
#include "data/datasets.hpp"
#include "experiment/option_groups.hpp"
#include "experiment/train_run.hpp"
#include "io/results_writer.hpp"

namespace cnnscale::app {

namespace {

// train's settings of the table (experiment/train_settings.hpp), each bound to its field of `a`
// (experiment/train_setting_fields.cpp).
void add_setting_options(CLI::App& cmd, TrainArgs& a) {
  add_table_options(cmd, train_settings(), [&a](const Setting& s) { return train_setting_field(a, s.name); });
  cmd.get_option("--net")->required();
  // The run has one length: in epochs or in iterations; so has its warm-up.
  cmd.get_option("--epochs")->excludes(cmd.get_option("--iterations"));
  cmd.get_option("--warmup")->excludes(cmd.get_option("--warmup-iterations"));
  // Taking over another run's checkpoints is a way to resume.
  cmd.get_option("--resume-allow-changes")->needs(cmd.get_option("--resume"));
}

// train's bookkeeping flags: where the results go and what they are tagged with, no settings of the run.
// train always saves (its root has a default), so --no-results overrides --results rather than
// excluding it as in the commands that save only when given a root (add_results_options).
void add_measure_options(CLI::App& cmd, MeasureArgs& a) {
  using option_group::kResults;
  cmd.add_option("--results", a.results_root,
                 "Results root: the run is written to DIR/<experiment>/<run-id>/ (default: $CNNSCALE_RESULTS or "
                 "results)")
      ->capture_default_str()
      ->group(kResults);
  take_results_root_from_environment(a.results_root);
  add_experiment_option(cmd, a.experiment);
  cmd.add_option("--run-id", a.run_id,
                 fmt::format("Run folder name (default: UTC time and a hash): letters, digits and . _ + = -, at "
                             "most {} characters; claimed before any work, so a second train of the same id refuses",
                             kMaxResultsName))
      ->group(kResults);
  cmd.add_flag("--no-results", a.no_results, "Write no results folder")->group(kResults);
  cmd.add_option("--tag", a.tags, "KEY=VALUE stored in the summary as tag.KEY (repeatable)")->group(kResults);
}

// What the run tells its user, on rank 0: the banner, the progress on stderr (a bar on a terminal),
// the closing lines and the --json line.
class TerminalView : public TrainView {
 public:
  explicit TerminalView(bool json) : json_(json) {}
  void started(const TrainArgs& a, const TrainInputs& in, const Trainer& trainer, const ParallelRun& par) override {
    print_train_banner(a, in, trainer, par);
    progress_ = std::make_unique<TrainProgress>(trainer.iterations_per_epoch());
  }
  void iteration(int64_t done, int64_t total) override { progress_->iteration(done, total); }
  void display(const DisplayInfo& d) override { progress_->display(d); }
  void epoch(const EpochInfo& e) override { progress_->epoch(e); }
  void message(const std::string& m) override { progress_->message(m); }
  void trained() override { progress_->finish(); }
  void finished(const TrainArgs& a, const TrainInputs& in, const Trainer& trainer, const ParallelRun& par,
                const TrainOutcome& o) override {
    print_train_outcome(trainer, o);
    if (json_) print_train_json(a, in, trainer, par, o);
  }

 private:
  bool json_;
  std::unique_ptr<TrainProgress> progress_;
};

void run_train(TrainArgs& a) {
  TerminalView view(a.json);
  if (run_training(a, view)) requested_exit_code() = kExitRequeue;  // stopped by a signal: requeue
}

}  // namespace

void register_train(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  TrainArgs& a = *args;
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train a network in one process, or data-parallel over the ranks of mpirun/srun: time, energy and "
      "accuracy per rank and phase");
  // Every setting of the run: the network, its length, the device and precision, the seed, the solver's
  // settings, how the steps run (the augmentation too), the checkpoints, how the steps are measured,
  // the data-parallel job's settings, the data, the batch and the rank sets
  // (experiment/train_settings.hpp); the data set's name is checked against the data sets here.
  add_setting_options(*cmd, a);
  cmd->get_option("--data")->required()->check(dataset_name_error);
  cmd->add_flag("--json", a.json, "Print one JSON line of results on stdout")->group(option_group::kResults);
  add_measure_options(*cmd, a.measure);
  // Whether --device and --allreduce-algo were given, rather than their defaults: --gpus implies a GPU
  // device unless one is named, and an algorithm named for CPU ranks is worth a line.
  const CLI::Option* device_flag = cmd->get_option("--device");
  const CLI::Option* algo_flag = cmd->get_option("--allreduce-algo");
  cmd->callback([args, device_flag, algo_flag] {
    args->parallel.device_given = device_flag->count() > 0;
    args->parallel.algo_given = algo_flag->count() > 0;
    run_train(*args);
  });
}

}  // namespace cnnscale::app
