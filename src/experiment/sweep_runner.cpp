// The sweep loop: each run not done yet is launched as a child process (its output goes to
// ROOT/<exp>/logs/<run-id>.log so the progress lines stay readable), a failed run is reported with
// its log's error line and the loop goes on; a finished run gets its done marker. SIGINT, SIGTERM
// and SIGUSR1 are passed to the running child and stop the loop after it, so a re-run continues
// from there; a run that stopped for requeue (exit 75, or its requeue record where mpirun says 1)
// stops the sweep for requeue too.
#include <fcntl.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/stop_signal.hpp"
#include "experiment/log_tail.hpp"
#include "experiment/sweep.hpp"
#include "io/requeue_record.hpp"
#include "io/safe_open.hpp"

namespace cnnscale {

namespace fs = std::filesystem;

namespace {

volatile sig_atomic_t g_stop_signal = 0;
volatile sig_atomic_t g_first_second = 0;  // CLOCK_MONOTONIC seconds of the first stop
volatile pid_t g_child = 0;
// Whether a SIGTERM is passed on to the run: not inside a Slurm or PBS job (nor with
// CNNSCALE_PASS_TERM=0), whose stop reaches every process of the job, mpirun and the ranks
// included, where a second SIGTERM from here would make mpirun kill the ranks before they saved
// their state (launch/common.sh run_launch likewise).
volatile sig_atomic_t g_pass_term = 1;

bool pass_term_on() {
  const char* set = std::getenv("CNNSCALE_PASS_TERM");
  if (set && *set) return std::string(set) != "0";
  return !std::getenv("SLURM_JOB_ID") && !std::getenv("PBS_JOBID");
}

sig_atomic_t monotonic_second() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<sig_atomic_t>(ts.tv_sec);
}

// A stop is passed on to the run, a SIGUSR1 (Slurm's --signal) as SIGTERM: Open MPI's mpirun does
// not pass SIGUSR1 on everywhere (launch/common.sh run_launch does the same). The first stop's
// repeat within a second is one request delivered twice (to this process and its group) and is not
// passed on again, where a second one would abort the run; a later SIGUSR1 is never an abort.
void on_stop_signal(int sig) {
  if (g_stop_signal == 0) {
    g_stop_signal = sig;
    g_first_second = monotonic_second();
  } else if (sig == SIGUSR1 || (sig == g_stop_signal && monotonic_second() - g_first_second <= 1)) {
    return;
  }
  if (sig == SIGTERM && !g_pass_term) return;
  if (g_child > 0) ::kill(g_child, sig == SIGUSR1 ? SIGTERM : sig);
}

constexpr int kNotStarted = -1;

// Starts argv with stdout/stderr to the log `fd` (closed here) and $CNNSCALE_REQUEUE_RECORD naming
// `record`; returns the exit code (128 + signal when killed), or kNotStarted when a stop came before
// it started.
// The stop signals are blocked from before the fork until g_child names the child, so a stop that
// comes in between is passed on once it does instead of reaching nobody (the handler would see no
// child yet) while the run went on to its end; the child takes the default action for them again
// before it unblocks them and execs.
int run_child(const std::vector<std::string>& argv, int fd, const std::string& blas_threads,
              const std::string& record) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  sigset_t stops, before;
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGUSR1);
  ::sigprocmask(SIG_BLOCK, &stops, &before);
  if (g_stop_signal) {
    ::sigprocmask(SIG_SETMASK, &before, nullptr);
    ::close(fd);
    return kNotStarted;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::sigprocmask(SIG_SETMASK, &before, nullptr);
    ::close(fd);
    throw_runtime("fork failed: {}", std::strerror(errno));
  }
  if (pid == 0) {
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGUSR1, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &before, nullptr);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    if (!blas_threads.empty()) ::setenv("OPENBLAS_NUM_THREADS", blas_threads.c_str(), 0);
    // mpirun's grace period for a stop: the ranks' time to write their checkpoint and results
    // (launch/common.sh says more).
    ::setenv("OMPI_MCA_odls_base_sigkill_timeout", "10", 0);
    ::setenv(kRequeueRecordEnv, record.c_str(), 1);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "cnnscale sweep: cannot start %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(fd);
  g_child = pid;
  ::sigprocmask(SIG_SETMASK, &before, nullptr);  // a stop held back until now is passed on here
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// A descriptor closed when the sweep ends, however it ends.
struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

std::string bar(size_t done, size_t total) {
  const size_t width = 20, filled = total ? done * width / total : width;
  return fmt::format("[{}{}]", std::string(filled, '#'), std::string(width - filled, '.'));
}

}  // namespace

SweepResult run_sweep(const Experiment& e, const std::vector<RunSpec>& runs, const std::string& results_root,
                      const LaunchEnv& env) {
  const std::string exp_dir = experiment_dir(results_root, e);
  const fs::path logs = fs::path(exp_dir) / "logs";
  std::error_code ec;
  refuse_link(logs.string());  // a link here would put every run's log where it points
  fs::create_directories(logs, ec);
  if (ec) throw_runtime("cannot create {}: {}", logs.string(), ec.message());
  // Held open while the sweep runs (hours): each run's log is created in this very folder (openat),
  // so a link put in place of ROOT/<experiment> or logs/ meanwhile moves no log elsewhere.
  const FdCloser exp_fd{open_folder_no_follow(exp_dir)};
  const FdCloser logs_fd{open_at_no_follow(exp_fd.fd, "logs", logs.string(), O_RDONLY | O_DIRECTORY)};

  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{}, old_usr1{};
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  ::sigaction(SIGUSR1, &sa, &old_usr1);  // Slurm's --signal, as train takes it
  g_stop_signal = 0;
  g_pass_term = pass_term_on() ? 1 : 0;
  // A run that stopped for requeue stops the sweep too (its job is being stopped); `clean` stays
  // true while every run a stop ended saved its state or had completed.
  bool requeued = false, clean = true;

  SweepResult result;
  const size_t total = runs.size();
  for (size_t i = 0; i < total && !g_stop_signal && !requeued; ++i) {
    const RunSpec& run = runs[i];
    const std::string head = fmt::format("sweep: {} {}/{} {}", bar(i, total), i + 1, total, run.id);
    const fs::path run_dir = fs::path(exp_dir) / run.id;
    // Held while the run is looked at and run: an array task or another sweep on the same run waits
    // its turn in a later invocation instead of training it twice.
    refuse_link(exp_dir);  // made since the start: the run's lock and results would go where it points
    const std::string lock_path = run_lock_path(exp_dir, run.id);
    std::string holder;
    auto lock = FileLock::try_lock(lock_path, &holder);
    if (!lock) {
      ++result.busy;
      result.busy_lines.push_back(fmt::format("run {} is being run by {} (lock {})", run.id, holder, lock_path));
      std::fprintf(stderr, "%s: being run by %s; skipped\n", head.c_str(), holder.c_str());
      continue;
    }
    RunStatus st = run_status(exp_dir, run);
    if (st.state == RunState::Done) {
      if (st.unsealed) write_done_marker(run_dir.string(), run);
      std::fprintf(stderr, "%s: already complete%s, skipped\n", head.c_str(),
                   st.unsealed ? " (verified; done marker written)" : "");
      ++result.skipped;
      continue;
    }
    if (st.state == RunState::Conflict) {
      std::fprintf(stderr, "%s: FAILED: %s; not overwritten\n", head.c_str(), st.detail.c_str());
      ++result.failed;
      result.failed_ids.push_back(run.id);
      continue;
    }
    if (st.state == RunState::Corrupt) {
      // Not done after all: kept for inspection under a name nothing counts, and the run redone.
      const std::string aside = move_aside(run.infer ? infer_run_file(exp_dir, run) : run_dir.string());
      std::fprintf(stderr, "%s: warning: the run's %s is damaged (%s); moved to %s, running it again\n", head.c_str(),
                   run.infer ? "result file" : "folder", st.detail.c_str(), aside.c_str());
    }
    if (st.state == RunState::Partial) {
      // A killed run's leftovers: nothing in them is complete (train also clears them itself). An
      // interrupted run's folder stays until train replaces it with the new run's.
      const fs::path partial = fs::path(exp_dir) / (run.id + ".partial");
      if (fs::exists(partial, ec)) {
        fs::remove_all(partial, ec);
        std::fprintf(stderr, "%s: removed the partial folder of a killed run\n", head.c_str());
      }
      if (fs::exists(run_dir, ec)) std::fprintf(stderr, "%s: %s: running it again\n", head.c_str(), st.detail.c_str());
    }
    if (run.infer)
      std::fprintf(stderr, "%s: running (%lld rank(s), batch %s)\n", head.c_str(), static_cast<long long>(run.ranks),
                   fmt::format("{}", fmt::join(e.infer.batches, ",")).c_str());
    else
      std::fprintf(stderr, "%s: running (%lld rank(s), %lld iteration(s))\n", head.c_str(),
                   static_cast<long long>(run.ranks), static_cast<long long>(run.iterations));
    const std::string log = (logs / (run.id + ".log")).string();
    // CPU ranks share the cores: one BLAS thread pool per core, not one per rank per core.
    std::string blas;
    if (e.device == "cpu") blas = std::to_string(std::max<int64_t>(1, int64_t(env.cores) / run.ranks));
    const auto start = std::chrono::steady_clock::now();
    const RequeueRecord record;  // mpirun told to stop says 1: the run's rank 0 records a stop here
    const std::vector<std::string> argv = launch_command(e, run, results_root, env);
    const int log_fd = open_at_no_follow(logs_fd.fd, run.id + ".log", log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int code = run_child(argv, log_fd, blas, record.path());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Looked at whatever the launcher said: mpirun told to stop as its ranks end says 1 after
    // a complete run too, and a result that is whole and verified is the run's.
    const RunStatus after = code == kNotStarted ? RunStatus{} : run_status(exp_dir, run);
    // Every rank saved its state and exited 75, whatever the launcher made of it; a launcher's
    // failure without the record stays a failure.
    const bool for_requeue = code == kExitRequeue || (code > 0 && record.written());
    if (code == kNotStarted) {
      std::fprintf(stderr, "%s: not started (signal %d)\n", head.c_str(), static_cast<int>(g_stop_signal));
    } else if (after.state == RunState::Done) {
      // Sealed now, while its files are known to be what train just wrote.
      if (after.unsealed) write_done_marker(run_dir.string(), run);
      ++result.ran;
      std::fprintf(stderr, "%s: done in %.1f s%s\n", head.c_str(), seconds,
                   code == 0 ? "" : fmt::format(" (its launcher exited {} after the result was complete)", code).c_str());
    } else if (for_requeue) {
      requeued = true;
      const std::string by = g_stop_signal ? fmt::format("signal {}", static_cast<int>(g_stop_signal))
                                           : std::string("a signal to its ranks");
      std::fprintf(stderr, "%s: stopped for requeue (%s, exit %d%s, log %s)\n", head.c_str(), by.c_str(), code,
                   code == kExitRequeue ? "" : fmt::format(": {}", record.text()).c_str(), log.c_str());
    } else if (g_stop_signal) {
      // Ended by the sweep's own stop, which it passed on, without saving its state: not a
      // failure of the run, and the same command runs it again. (A run that had written its
      // whole result before the signal reached it, as mpirun's forwarding can come after its
      // ranks' end, is done above.)
      clean = false;
      std::fprintf(stderr, "%s: interrupted (signal %d, exit %d, log %s)\n", head.c_str(),
                   static_cast<int>(g_stop_signal), code, log.c_str());
    } else {
      ++result.failed;
      result.failed_ids.push_back(run.id);
      std::string why = fmt::format("exit {}", code);
      if (code == 0)
        why = after.state == RunState::Todo
                  ? (run.infer ? "exit 0 but no result file" : "exit 0 but no run folder")
                  : fmt::format("exit 0 but the run folder is {}: {}", run_state_name(after.state), after.detail);
      std::fprintf(stderr, "%s: FAILED (%s, log %s): %s\n", head.c_str(), why.c_str(), log.c_str(),
                   error_line(log).c_str());
    }
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  ::sigaction(SIGUSR1, &old_usr1, nullptr);
  if ((g_stop_signal || requeued) && !clean)  // a run the stop ended without saving its state
    throw_runtime("sweep interrupted by signal {} after {} run(s); run the same command again to continue",
                  static_cast<int>(g_stop_signal), result.ran);
  if (g_stop_signal || requeued) {
    // Stopped for requeue (exit 75): the run in progress, if any, saved its state, and the same
    // command goes on from there.
    result.stopped_for_requeue = true;
    std::fprintf(stderr, "sweep: stopped for requeue after %d run(s)%s; run the same command again to continue\n",
                 result.ran, g_stop_signal ? fmt::format(" (signal {})", static_cast<int>(g_stop_signal)).c_str() : "");
    return result;
  }
  const std::string busy = result.busy ? fmt::format(", {} being run by another process", result.busy) : "";
  std::fprintf(stderr, "sweep: %s %zu run(s): %d ran, %d already complete, %d failed%s; results in %s\n",
               bar(total, total).c_str(), total, result.ran, result.skipped, result.failed, busy.c_str(),
               exp_dir.c_str());
  return result;
}

}  // namespace cnnscale
