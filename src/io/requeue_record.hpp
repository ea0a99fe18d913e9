// The record a job's rank 0 leaves when the job stopped for requeue (exit 75 on every rank), for
// the launcher that started it. mpirun told to stop (SIGTERM, SIGINT) ends with its own exit code,
// 1, whatever its ranks returned, and a scheduler then sees a failed job instead of one to requeue:
// the launchers (launch/*.sh, `cnnscale sweep`) give each launch a fresh record path, and end with
// 75 when the launched job failed by their launcher's account but left the record, and only then.
#pragma once
#include <string>

namespace cnnscale {

// The environment variable naming the record file: set by a launcher, one fresh path per launch.
inline constexpr const char* kRequeueRecordEnv = "CNNSCALE_REQUEUE_RECORD";

// For rank 0 at its clean exit with kExitRequeue, after the checkpoint and results are written
// (every rank stopped at the same step, StopVote): creates the file $CNNSCALE_REQUEUE_RECORD names,
// exclusively and never through a link, with one line saying which job stopped. Does nothing when
// the variable is unset or empty. Returns "" or a warning line (not written: the launcher then
// keeps mpirun's own code, as for a failure).
std::string write_requeue_record(int ranks, const std::string& host);

// One launch's record: a private folder made for it (mkdtemp, mode 0700, under $TMPDIR or /tmp),
// so no other process or earlier launch can have put anything at path(); removed with the object.
class RequeueRecord {
 public:
  RequeueRecord();  // RuntimeError when the folder cannot be made
  ~RequeueRecord();
  RequeueRecord(const RequeueRecord&) = delete;
  RequeueRecord& operator=(const RequeueRecord&) = delete;

  const std::string& path() const { return path_; }
  // The job's rank 0 wrote it: a regular file at path() (a link there is not one).
  bool written() const;
  // Its one line ("" when not written), for the launcher's message.
  std::string text() const;

 private:
  std::string dir_, path_;
};

}  // namespace cnnscale
