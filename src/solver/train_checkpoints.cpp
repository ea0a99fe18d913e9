// TrainCheckpoints: resuming, the identity a checkpoint must share with the run, and writing.
#include "solver/train_checkpoints.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/log.hpp"
#include "io/results_writer.hpp"
#include "solver/checkpoint.hpp"
#include "solver/checkpoint_compare.hpp"

namespace cnnscale {

TrainCheckpoints::TrainCheckpoints(const TrainOptions& options, const TrainJob& job, int64_t iterations_per_epoch,
                                   int64_t total_iterations)
    : options_(options), job_(job), iterations_per_epoch_(iterations_per_epoch), total_iterations_(total_iterations) {}

// The checkpoint's identity (its must-match options, solver settings and network) against this
// run's: a difference is refused naming its key path and both values, unless the command says the
// change is intended (--resume-allow-changes, fine-tuning), when each difference is logged.
void TrainCheckpoints::check_compatible(const std::string& file, const SgdSolver& solver, const std::string& saved_config,
                                        const std::string& saved_solver, const std::string& saved_network) const {
  const nlohmann::json saved = checkpoint_identity(saved_config, saved_solver, saved_network, file);
  // Like with like: a checkpoint from before solver settings were stored is compared by the run
  // configuration's one-line solver summary.
  const nlohmann::json now =
      checkpoint_identity(job_.run_config, saved_solver.empty() ? "" : solver_settings(solver.config()).dump(),
                          saved_network.empty() ? "" : job_.network_yaml, "this run");
  const auto diffs = identity_differences(saved, now);
  if (diffs.empty()) return;
  if (!options_.resume_allow_changes)
    throw_config("{}: checkpoint was written with {}{}; to continue with the change anyway (fine-tuning), add "
                 "--resume-allow-changes",
                 file, describe_difference(diffs.front(), "", "this run has").substr(1),
                 more_differences(diffs));
  if (job_.parallel.rank == 0)
    for (const auto& d : diffs)
      log::warn("{}: resuming with a change (--resume-allow-changes): {}", file,
                describe_difference(d, "checkpoint", "this run"));
}

TrainCheckpoints::Resumed TrainCheckpoints::resume(Net& net, SgdSolver& solver, Loader* loader,
                                                   const std::function<void(const std::string&)>& on_message) const {
  Resumed resumed;
  if (options_.resume.empty()) return resumed;
  std::string& path = resumed.path;
  CheckpointContents c;
  if (options_.resume == "auto") {
    // Newest first; a damaged one (truncated, a checksum mismatch) is skipped with a warning for the
    // next older one. Every rank sees the same files, so all choose the same. One that cannot be
    // read for another reason (an I/O error) may be intact: continuing from an older one would
    // train that stretch again and its first checkpoint would remove the newer as abandoned.
    const std::vector<std::string> all = CheckpointDir(options_.checkpoint_dir).list();
    if (all.empty()) {
      if (on_message) on_message(fmt::format("no checkpoint in {}: starting from iteration 0", options_.checkpoint_dir));
      return resumed;
    }
    std::string reasons;
    for (auto it = all.rbegin(); it != all.rend() && path.empty(); ++it) {
      try {
        c = read_checkpoint(*it);
        path = *it;
      } catch (const DamagedCheckpoint& e) {
        if (job_.parallel.rank == 0) log::warn("--resume auto: skipping unreadable checkpoint: {}", e.what());
        reasons += fmt::format("{}{}", reasons.empty() ? "" : "; ", e.what());
      } catch (const ConfigError& e) {
        throw_runtime(
            "--resume auto: cannot read {} now, and it does not look damaged ({}); not skipped for an older "
            "checkpoint: resume again once it reads",
            *it, e.what());
      }
    }
    // Starting over silently would throw away the run's progress: stop and say why.
    if (path.empty())
      throw_runtime("--resume auto: none of the {} checkpoints in {} is readable ({})", all.size(),
                    options_.checkpoint_dir, reasons);
  } else {
    path = options_.resume;
    c = read_checkpoint(path);
  }
  check_compatible(path, solver, c.meta.run_config, c.meta.solver, c.meta.network);
  // The stored run id names the results folder the resumed run writes: checked now, not after training.
  if (const auto saved = nlohmann::json::parse(c.meta.run_config, nullptr, false);
      saved.is_object() && saved.contains("run_id"))
    check_results_name(path + ": stored run_id", saved["run_id"].is_string() ? saved["run_id"].get<std::string>() : "");
  resumed.run_config = c.meta.run_config;
  if (c.meta.iteration < 0 || c.meta.iteration > total_iterations_)
    throw_config("{}: checkpoint is at iteration {}, beyond this run's {} iterations", path, c.meta.iteration,
                 total_iterations_);
  restore_checkpoint(c, path, net, solver);
  // A checkpoint of another precision holds the neutral 1, 0, 0: no scale to continue with.
  const bool scaled = c.meta.grad_scale != 1.0 || c.meta.clean_steps > 0 || c.meta.skipped_steps > 0;
  if (scaled) resumed.scale = LossScaleFigures{c.meta.grad_scale, c.meta.clean_steps, c.meta.skipped_steps};
  if (loader && c.meta.iteration < total_iterations_)
    loader->restore({c.meta.loader_epoch, c.meta.loader_position, c.meta.loader_rng_state});
  if (on_message) on_message(fmt::format("resumed from {} at iteration {}", path, c.meta.iteration));
  resumed.iteration = c.meta.iteration;
  return resumed;
}

// At epoch ends, at the end and every checkpoint_every iterations; weights are identical on every
// rank, so rank 0 alone writes.
bool TrainCheckpoints::due(int64_t done) const {
  if (options_.checkpoint_dir.empty() || job_.parallel.rank != 0) return false;
  return done % iterations_per_epoch_ == 0 || done == total_iterations_ ||
         (options_.checkpoint_every > 0 && done % options_.checkpoint_every == 0);
}

std::string TrainCheckpoints::save(int64_t done, const Net& net, const SgdSolver& solver, const Loader* loader,
                                   const std::optional<LossScaleFigures>& scale) const {
  CheckpointMeta meta;
  meta.iteration = done;
  meta.epoch = done / iterations_per_epoch_;
  meta.lr = solver.lr(std::max<int64_t>(done - 1, 0));
  if (loader) {
    LoaderState s = loader->state();
    meta.loader_epoch = s.epoch;
    meta.loader_position = s.position;
    meta.loader_rng_state = s.rng_state;
  } else {
    meta.loader_epoch = done / iterations_per_epoch_;
    meta.loader_position = done % iterations_per_epoch_;
  }
  if (scale) {
    meta.grad_scale = scale->scale;
    meta.clean_steps = scale->clean_steps;
    meta.skipped_steps = scale->skipped_steps;
  }
  meta.run_config = job_.run_config;
  meta.network = job_.network_yaml;
  meta.solver = solver_settings(solver.config()).dump();
  CheckpointContents contents = capture_checkpoint(net, solver, std::move(meta));
  // The device flag was read just before; this host-side look at what is about to be written is
  // the last line of defence: the rotation must never drop a good checkpoint for a bad one.
  for (const auto* arrays : {&contents.weights, &contents.history, &contents.state})
    for (const CheckpointArray& a : *arrays)
      for (float v : a.values)
        if (!std::isfinite(v))
          throw_runtime("training diverged: {} holds non-finite values at iteration {}; checkpoint not written", a.name,
                        done);
  return CheckpointDir(options_.checkpoint_dir).save(contents);
}

// Every rank reads the checkpoint itself (the directory must be shared); a rank that found
// another one, or none, would train on different weights: refuse.
void TrainCheckpoints::check_consistent(Backend& backend, int64_t start) const {
  Communicator* comm = job_.parallel.comm;
  if (!comm || options_.resume.empty()) return;
  // Two exact floats: iteration counts up to 2^48.
  auto all = allgather_host(*comm, backend, {static_cast<float>(start >> 24), static_cast<float>(start & 0xFFFFFF)});
  for (size_t r = 0; r < all.size(); ++r) {
    const int64_t other = (static_cast<int64_t>(all[r][0]) << 24) + static_cast<int64_t>(all[r][1]);
    if (other != start)
      throw_config(
          "rank {} resumes at iteration {} but rank {} at {}: every rank must see the same checkpoint (put "
          "--checkpoint-dir on a filesystem shared by all nodes)",
          job_.parallel.rank, start, r, other);
  }
}

}  // namespace cnnscale
