// The run folder's claim: `train --run-id ID` takes ROOT/<experiment>/.<ID>.claim (an flock and
// "host H pid P" in the file) before any work and holds it until the process ends (then the file
// is removed; a killed process leaves it, unlocked, for the next one to take), so that two
// trains of one id never write one folder (each would replace files of the other's results). It is
// a file of its own, not the sweep's ".<ID>.lock": the sweep holds that one in its
// own process while its child trains, and the child then takes this one without waiting on it.
#include <filesystem>

#include "experiment/train_run.hpp"
#include "core/error.hpp"
#include "experiment/sweep.hpp"
#include "io/results_writer.hpp"
#include "io/safe_open.hpp"

namespace cnnscale {

namespace fs = std::filesystem;

std::shared_ptr<void> claim_run_folder(const MeasureArgs& m) {
  if (m.no_results) return nullptr;
  const fs::path exp_dir = fs::path(m.results_root) / m.experiment;
  std::error_code ec;
  // A link here would take the claim and the results where it points: refused now, before any work,
  // also for a generated run id (whose results are written there at the end).
  refuse_link(exp_dir.string());
  if (fs::exists(exp_dir, ec) && !fs::is_directory(exp_dir, ec))
    throw_config("--experiment {}: {} exists and is not a folder", m.experiment, exp_dir.string());
  if (m.run_id.empty()) return nullptr;  // a generated id is this process's own (host, pid, time)
  fs::create_directories(exp_dir, ec);
  if (ec) throw_config("--experiment {}: cannot create {}: {}", m.experiment, exp_dir.string(), ec.message());
  const std::string path = (exp_dir / ("." + m.run_id + ".claim")).string();
  std::string holder;
  std::shared_ptr<FileLock> claim = FileLock::try_lock(path, &holder, /*remove_when_released=*/true);
  // Exit 1, not 2: the command is right, another process has the folder at this moment, and the
  // same command succeeds once that one ends (or says then that the run exists already).
  if (!claim)
    throw_runtime("--run-id {}: {} is being written by {} (claim {}); wait for it to end or choose another run id",
                  m.run_id, (exp_dir / m.run_id).string(), holder, path);
  // Looked at again under the claim: a run of this id may have finished since the first look.
  const fs::path folder = exp_dir / m.run_id;
  if (!run_folder_writable(folder.string()))
    throw_config("--run-id {}: {} already exists (a finished run is never overwritten)", m.run_id, folder.string());
  return claim;
}

}  // namespace cnnscale
