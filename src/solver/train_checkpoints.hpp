// TrainCheckpoints: a training run's checkpoints. Resuming (every rank reads the checkpoint itself;
// data-parallel ranks check they all resumed at the same iteration), the options that must match on
// resume, when one is due (rank 0 only: the weights are identical on every rank), and writing one.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "backend/backend.hpp"
#include "backend/communicator.hpp"
#include "data/loader.hpp"
#include "net/net.hpp"
#include "solver/sgd_solver.hpp"
#include "solver/train_options.hpp"

namespace cnnscale {

// fp16 dynamic loss scaling's state, as checkpoints keep it: the scale, the clean steps in a row
// and the steps skipped so far. The neutral figures without loss scaling.
struct LossScaleFigures {
  double scale = 1.0;
  int64_t clean_steps = 0, skipped_steps = 0;
};

class TrainCheckpoints {
 public:
  // `options` (resume, checkpoint_dir, checkpoint_every, resume_allow_changes) and `job` (rank,
  // communicator, the run's identity) are the Trainer's, read at each call.
  TrainCheckpoints(const TrainOptions& options, const TrainJob& job, int64_t iterations_per_epoch,
                   int64_t total_iterations);

  struct Resumed {
    int64_t iteration = 0;   // where training goes on (0: not resumed)
    std::string path;        // the checkpoint read; empty when none was
    std::string run_config;  // its run configuration (TrainJob::run_config)
    std::optional<LossScaleFigures> scale;  // the interrupted run's loss scale (fp16), where it had moved
  };
  // As TrainOptions::resume says: nothing, the named checkpoint, or the newest readable one of the
  // directory ("auto"). Restores the net, the solver and (short of the end) the loader; ConfigError
  // for a checkpoint of another run (unless resume_allow_changes), RuntimeError when none is readable.
  Resumed resume(Net& net, SgdSolver& solver, Loader* loader,
                 const std::function<void(const std::string&)>& on_message) const;
  // Collective: every rank resumed at `start` (ConfigError otherwise).
  void check_consistent(Backend& backend, int64_t start) const;
  // At epoch ends, at the end and every checkpoint_every iterations, on rank 0.
  bool due(int64_t done) const;
  // The state after `done` iterations into the directory; returns its path. RuntimeError, and
  // nothing written, where a value is not finite.
  std::string save(int64_t done, const Net& net, const SgdSolver& solver, const Loader* loader,
                   const std::optional<LossScaleFigures>& scale) const;

 private:
  void check_compatible(const std::string& file, const SgdSolver& solver, const std::string& saved_config,
                        const std::string& saved_solver, const std::string& saved_network) const;

  const TrainOptions& options_;
  const TrainJob& job_;
  int64_t iterations_per_epoch_, total_iterations_;
};

}  // namespace cnnscale
