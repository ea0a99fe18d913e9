// run_training: one `cnnscale train` on this rank, each step one function of train_run.hpp, in the
// order of the job's collectives (the same on every rank).
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "backend/engine_cache.hpp"
#include "core/stop_signal.hpp"
#include "experiment/train_run.hpp"
#include "experiment/train_watch.hpp"
#include "io/provenance.hpp"
#include "io/results_writer.hpp"
#include "net/net_spec_impl.hpp"  // check_batch_fits
#include "parallel/mpi_env.hpp"
#include "solver/checkpoint_claim.hpp"
#include "solver/checkpoint_compare.hpp"

namespace cnnscale {

namespace {

// The test runs at --test-batch, but never past the test set (the loader's one batch is then the whole
// set): a batch of that size the network cannot hold is refused now, not after training.
void check_test_batch(const TrainArgs& a, const TrainInputs& in) {
  if (!in.test || a.options.test_batch <= 0) return;  // no test, or the rank's training batch (checked)
  try {
    check_batch_fits(in.spec.impl(), std::min(a.options.test_batch, in.test->size()));
  } catch (const ConfigError& e) {
    throw_config("--test-batch {}: {}", a.options.test_batch, e.what());
  }
}

}  // namespace

bool run_training(TrainArgs& a, TrainView& view) {
  const Provenance started = start_provenance();  // the run's start time, version and command line
  validate_train_args(a);                                  // exit 2 before anything is loaded
  // The run folder is this process's from here on (rank 0 writes it): a second train of the same
  // --run-id refuses now, naming this one.
  const MpiEnv* launch = MpiEnv::current();
  const auto claim = !launch || launch->rank() == 0 ? claim_run_folder(a.measure) : nullptr;
  // The global batch and this rank's share; a precision the device cannot run fails here.
  ParallelRun par(a.parallel, a.device, a.options.batch, a.options.precision,
                  {.conv_search = conv_search_from_name(a.conv_search),
                   .deterministic = a.deterministic,
                   .layout = layout_choice_from_name(a.layout),
                   .batchnorm = batchnorm_kernels_from_name(a.batchnorm)});
  if (a.host_decode) a.options.input_decode = TrainOptions::InputDecode::Host;
  check_input_decode(a.options.input_decode, par.device() == "cpu");  // before any work
  if (par.device() != "cpu") EngineCache::from_environment();         // a bad CNNSCALE_ENGINE_CACHE: exit 2 now
  const TrainInputs in = load_train_inputs(a, par.global_batch());
  check_test_batch(a, in);
  const nlohmann::json run_config = describe_run(a, in, par);
  // The checkpoint directory is this run's from here on (rank 0 writes it): a live run holding it,
  // or the checkpoints of another run in it, refuse now (solver/checkpoint_claim.hpp).
  std::unique_ptr<CheckpointDirClaim> checkpoint_claim;
  if (!a.options.checkpoint_dir.empty() && par.rank() == 0)
    checkpoint_claim = CheckpointDirClaim::claim(
        {.dir = a.options.checkpoint_dir,
         .run_id = run_config["run_id"].get<std::string>(),
         .identity = checkpoint_identity(run_config.dump(), solver_settings(a.solver).dump(),
                                         in.spec.resolved_yaml(), "this run"),
         .resuming = !a.options.resume.empty(),
         .allow_changes = a.options.resume_allow_changes});

  // The backend and communicator live in `par`, declared before (so destroyed after) the trainer.
  Backend& backend = par.connect();  // data parallel: watchdog, device check, communicator
  const TrainJob train_job{.parallel = par.data_parallel(),
                           .run_config = run_config.dump(),
                           .network_yaml = in.spec.resolved_yaml(),
                           .backend_precision = par.job().precision()};
  a.options.split = par.split();
  a.options.rebalance_every = a.parallel.rebalance_every;
  a.options.auto_probe = a.parallel.auto_start == "probe";
  a.options.probe_seconds = a.parallel.probe_seconds;
  a.options.slowdown = par.slowdown();
  measure::EnergyMonitor* energy = &par.job().open_energy_monitor(a.measure.power_hz);
  Trainer trainer(in.spec, backend, in.train, in.test, a.solver, a.options, train_job,
                  train_measurement(a.measure, energy), train_faults_from_environment());
  const bool rank0 = par.rank() == 0;
  if (rank0) view.started(a, in, trainer, par);

  // The curve and progress.json, in the folder the results will be written to (rank 0's).
  std::unique_ptr<TrainWatch> watch;
  if (rank0)
    watch = std::make_unique<TrainWatch>(a.measure.results_root, a.measure.experiment,
                                         a.measure.no_results ? std::string() : results_run_id(a, run_config, trainer),
                                         started, energy);
  if (watch && !watch->progress_path().empty()) view.message("progress: " + watch->progress_path());
  std::vector<EpochRecord> epochs;
  std::string last_checkpoint;
  TrainCallbacks cb;
  if (rank0) {
    cb.on_iteration = [&](int64_t done, int64_t total) {
      view.iteration(done, total);
      watch->iteration(done, total);
    };
    cb.on_display = [&](const DisplayInfo& d) {
      view.display(d);
      watch->display(d);
    };
    cb.on_epoch = [&](const EpochInfo& e) {
      view.epoch(e);
      epochs.push_back({e.epoch, e.iteration, e.train_loss, e.test ? e.test->top1 : kMissing,
                        e.test ? e.test->top5 : kMissing, e.lr, e.seconds});
    };
    cb.on_message = [&](const std::string& m) { view.message(m); };
    cb.on_checkpoint = [&](const std::string& path, int64_t) { last_checkpoint = path; };
  }
  // SIGTERM/SIGUSR1/SIGINT from here on stop at a step boundary with a checkpoint (kExitRequeue).
  install_stop_signals();
  // The pid file says this rank is training: written once its first step is done, past the
  // collective set-up at the start of the run, so that a rank signalled once every file exists is
  // hit mid-training (the fault tests stop or kill one then), never during set-up.
  bool pid_written = false;
  cb.on_iteration = [&, show = cb.on_iteration](int64_t done, int64_t total) {
    if (!pid_written) {
      par.write_pid_file();
      pid_written = true;
    }
    if (show) show(done, total);
  };
  energy->start_sampling();
  TrainResult r = trainer.run(cb);  // put_mfu may yet mark it interrupted
  energy->stop_sampling();
  if (rank0) view.trained();

  // The job's throughput: every rank's steady-state time is gathered, the slowest one counts.
  const JobTiming job = par.job_timing(r);
  RankReport mine = make_rank_report(par.rank(), par.job().host(), backend.device(), *energy, r, trainer.local_batch());
  mine.slowdown = par.slowdown();
  mine.sms = backend.granted_sms();
  const GatheredRanks gathered = gather_rank_reports(par.job(), std::move(mine), graph_figures(r));
  if (!rank0) return r.interrupted;

  RunResults results =
      assemble_run_results(describe_results(a, in, run_config, trainer, r, par, std::move(epochs)), r,
                           gathered.reports, a.measure.whole_epochs, a.measure.whole_samples);
  put_graph_figures(results, gathered.graphs);
  if (a.mfu && !r.interrupted)  // an interrupted run has no time to spare
    put_mfu(results, r, backend, a.options.precision, par.world_size(), a.measure.mfu_window);
  // From here on `r.interrupted` also says whether put_mfu was stopped.
  if (r.interrupted) results.status = std::string(kRunInterrupted);
  results.curve = carry_curve(a.measure.results_root, a.measure.experiment, results.run_id,
                              watch->curve(r.start_iteration));
  // A resumed run keeps the start of the run it continues, and records its resume.
  results.provenance = r.start_iteration > 0 ? carry_provenance(a.measure.results_root, a.measure.experiment,
                                                                results.run_id, started)
                                             : started;
  results.provenance->hosts = distinct_hosts(results.system.hosts);
  set_end(*results.provenance);
  ResultsWriteOptions where;
  where.root = a.measure.results_root;
  const std::string last_progress = watch->final_progress(results.status, r.iterations);
  watch->close();
  const std::string results_path = a.measure.no_results ? std::string() : write_run_results(results, where, last_progress);
  const TrainOutcome outcome{r, job, results, results_path, last_checkpoint, !backend.device().is_cpu()};
  view.finished(a, in, trainer, par, outcome);
  return r.interrupted;
}

}  // namespace cnnscale
