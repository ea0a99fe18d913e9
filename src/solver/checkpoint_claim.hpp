// A checkpoint directory belongs to one run. The run that writes checkpoints claims the directory
// before any work: an exclusive lock (flock on <dir>/.cnnscale-owner.lock, released by the kernel
// when the holder exits or dies) and a record of the owner (<dir>/.cnnscale-owner.json: run id,
// host, pid, start time and the run's identity, checkpoint_compare.hpp). A second live run is
// refused naming the holder; a later run whose identity differs from the owner's, while the owner's
// checkpoints are there, is refused naming the difference (it would rotate them away, and a later
// --resume auto would continue the wrong run), unless it resumes with --resume-allow-changes: then
// it takes the directory over. The same run (a requeue, a restart after a crash whose pid is dead)
// takes its directory back.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace cnnscale {

class CheckpointDirClaim {
 public:
  struct Request {
    std::string dir;
    std::string run_id;
    nlohmann::json identity;     // checkpoint_identity of this run
    bool resuming = false;       // --resume given
    bool allow_changes = false;  // --resume-allow-changes
  };
  // Creates the directory if needed and claims it. RuntimeError naming the holder when another
  // live process holds it, or when the lock or record is a symbolic link (never followed, exit 1 as
  // every refused link); ConfigError naming the difference when the owner's checkpoints are of
  // another run (see above).
  static std::unique_ptr<CheckpointDirClaim> claim(const Request& request);
  ~CheckpointDirClaim();
  CheckpointDirClaim(const CheckpointDirClaim&) = delete;
  CheckpointDirClaim& operator=(const CheckpointDirClaim&) = delete;

  static std::string lock_path(const std::string& dir);
  static std::string record_path(const std::string& dir);

 private:
  explicit CheckpointDirClaim(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace cnnscale
