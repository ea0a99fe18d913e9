// Runs `mpirun ... cnnscale ...` from the mpi tests: in the background (so a test can signal one
// rank while the job runs), with stdout/stderr captured to files and a hard deadline after which
// the whole process group is killed, so a broken build can fail these tests but never hang CI.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cpu/cli_runner.hpp"

namespace cnnscale::testing {

// train's exit code after a stop signal (app/commands.hpp kExitRequeue), which the launchers pass on.
inline constexpr int kRequeue = 75;

struct MpiResult {
  int exit_code = -1;  // 128 + signal when mpirun itself was killed
  bool timed_out = false;
  double seconds = 0;
  std::string out, err;
};

class MpiJob {
 public:
  // mpirun -np `ranks` cnnscale `args`; `env` entries (NAME=value) go to every rank. ranks 0: one
  // plain cnnscale process without a launcher, in the same environment (pid() is that process).
  MpiJob(int ranks, const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    std::string cmd = environment(env);
    if (ranks > 0) {
      cmd.append(" mpirun --oversubscribe --bind-to none -np ").append(std::to_string(ranks));
      cmd.append(" -x OPENBLAS_NUM_THREADS -x CNNSCALE_RESULTS");
      for (const auto& e : env) cmd.append(" -x ").append(shell_quote(e.substr(0, e.find('='))));
    }
    cmd.append(" ").append(shell_quote(CNNSCALE_BIN));
    for (const auto& a : args) cmd.append(" ").append(shell_quote(a));
    start(cmd);
  }
  // Any command (a launch script, a sweep) in the same environment, with the same capture and
  // deadline; pid() is its process.
  struct Command {
    std::vector<std::string> argv;
  };
  explicit MpiJob(const Command& command, const std::vector<std::string>& env = {}) {
    std::string cmd = environment(env);
    for (const auto& a : command.argv) cmd.append(" ").append(shell_quote(a));
    start(cmd);
  }
  ~MpiJob() {
    if (pid_ > 0 && !done_) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

 private:
  // `exec env NAME=value...`: CI runs as root on two cores, so allow both and never bind ranks.
  static std::string environment(const std::vector<std::string>& env) {
    std::string cmd =
        "exec env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
        "OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1";
    // Runs that do not choose a results root write theirs under the temp directory, not the tree.
    cmd.append(" CNNSCALE_RESULTS=")
        .append(shell_quote((std::filesystem::temp_directory_path() / "cnnscale_test_results").string()));
    for (const auto& e : env) cmd.append(" ").append(shell_quote(e));
    return cmd;
  }
  void start(std::string cmd) {
    base_ = output_base("mpi");
    cmd.append(" >").append(shell_quote(base_ + ".out")).append(" 2>").append(shell_quote(base_ + ".err"));
    cmd.append(" </dev/null");
    start_ = std::chrono::steady_clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);  // a group of its own: the deadline kills mpirun and every rank
      if (::chdir(CNNSCALE_SOURCE_DIR) != 0) ::_exit(127);
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);
  }

 public:
  pid_t pid() const { return pid_; }

  // What the job has written to stderr so far (a test waits for a log line before it strikes).
  std::string err_so_far() const {
    std::ifstream in(base_ + ".err");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Polls until stderr holds `text` (true), the job ends or `timeout` passes (false).
  bool wait_for_err(const std::string& text, std::chrono::duration<double> timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline && !poll()) {
      if (err_so_far().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // True once mpirun has exited (reaps it).
  bool poll() {
    if (done_) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
    finish(status);
    return true;
  }

  // Waits up to `timeout` for mpirun to exit; past it kills the process group (timed_out).
  MpiResult wait(std::chrono::duration<double> timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!poll()) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(-pid_, SIGKILL);
        int status = 0;
        ::waitpid(pid_, &status, 0);
        finish(status);
        result_.timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return result_;
  }

 private:
  void finish(int status) {
    done_ = true;
    result_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    result_.exit_code = exit_code_of(status);
    take_output(base_, result_.out, result_.err);
  }

  std::string base_;
  pid_t pid_ = -1;
  bool done_ = false;
  std::chrono::steady_clock::time_point start_;
  MpiResult result_;
};

inline MpiResult run_mpi(int ranks, const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                         double timeout_seconds = 120) {
  MpiJob job(ranks, args, env);
  return job.wait(std::chrono::duration<double>(timeout_seconds));
}

}  // namespace cnnscale::testing
