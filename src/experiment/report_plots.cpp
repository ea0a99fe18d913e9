// Python discovery and the plot-script subprocess for `cnnscale report` (see report_plots.hpp).
// posix_spawn with an argv, not system(): result paths may contain any character.
#include "experiment/report_plots.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "experiment/log_tail.hpp"
#include "experiment/report.hpp"
#include "io/safe_open.hpp"

extern char** environ;

namespace cnnscale::report {

namespace fs = std::filesystem;

std::string find_python(const std::string& requested) {
  if (!requested.empty()) return requested;
  if (const char* env = std::getenv("CNNSCALE_PYTHON"); env && *env) return env;
  // Debian's python3-matplotlib is importable only by the system interpreter, which a pyenv or
  // virtualenv `python3` earlier on PATH would hide.
  if (::access("/usr/bin/python3", X_OK) == 0) return "/usr/bin/python3";
  return "python3";
}

std::string find_plot_script(const std::string& requested) {
  if (!requested.empty()) return requested;
  if (const char* env = std::getenv("CNNSCALE_REPORT_SCRIPT"); env && *env) return env;
  std::vector<fs::path> candidates = {fs::path(CNNSCALE_SOURCE_DIR) / "scripts" / "report_plots.py"};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "share" / "cnnscale" / "report_plots.py");
  for (const fs::path& p : candidates)
    if (fs::is_regular_file(p, ec)) return p.string();
  throw_runtime("plot script report_plots.py not found (looked in {}{}); set CNNSCALE_REPORT_SCRIPT or use --no-plots",
                candidates[0].string(), candidates.size() > 1 ? " and " + candidates[1].string() : "");
}

PlotOutcome run_plot_script(const PlotJob& job) {
  const std::string python = find_python(job.python);
  const std::string script = find_plot_script(job.script);
  // The script lists each figure it did not draw, with the reason, one "name<TAB>reason" per line.
  const std::string left_out_file = (fs::path(job.out_dir) / ".report_plots.left_out").string();
  std::error_code ec;
  fs::remove(left_out_file, ec);
  std::vector<std::string> args = {python,      script,      "--tables",   job.tables_dir, "--out",    job.out_dir,
                                   "--devices", job.devices, "--left-out", left_out_file,  "--figures"};
  std::string figures;
  if (job.training) figures.append("training");
  if (job.hetero) figures.append(figures.empty() ? "" : ",").append("hetero");
  if (job.allreduce) figures.append(figures.empty() ? "" : ",").append("allreduce");
  if (job.inference) figures.append(figures.empty() ? "" : ",").append("inference");
  if (job.weak_scaling) figures.append(figures.empty() ? "" : ",").append("weak");
  if (job.conv_sweep) figures.append(figures.empty() ? "" : ",").append("sweep");
  if (job.kernel_cases) figures.append(figures.empty() ? "" : ",").append("kernels");
  if (job.gpu_models) figures.append(figures.empty() ? "" : ",").append("models");
  if (job.kernel_profiles) figures.append(figures.empty() ? "" : ",").append("profiles");
  args.push_back(figures);
  if (!job.power_h5.empty()) {
    args.insert(args.end(), {"--power-h5", job.power_h5, "--power-label", job.power_label});
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // The script's messages go to a log whose last line becomes the error: one line for the user.
  const std::string log = (fs::path(job.out_dir) / ".report_plots.log").string();
  // Opened here, not by the spawn's file actions, so that a link planted at its name is refused
  // with a line naming it instead of having the script's output truncate the link's target.
  const int log_fd = open_no_follow(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, log_fd, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  const int spawn_error = posix_spawnp(&pid, python.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(log_fd);
  if (spawn_error != 0) {
    std::error_code ec;
    fs::remove(log, ec);
    throw_runtime(
        "plots not produced: cannot run '{}' ({}); install python3 and python3-matplotlib, or use "
        "--no-plots (the tables are in {})",
        python, std::strerror(spawn_error), job.out_dir);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string message = last_nonblank_line(log);
  fs::remove(log, ec);
  PlotOutcome outcome;
  {
    std::ifstream in(left_out_file);
    for (std::string line; std::getline(in, line);) {
      const size_t tab = line.find('\t');
      if (tab != std::string::npos) outcome.left_out.emplace_back(line.substr(0, tab), line.substr(tab + 1));
    }
  }
  fs::remove(left_out_file, ec);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code == 3)
    throw_runtime(
        "plots not produced: {} cannot import matplotlib ({}); install python3-matplotlib or use "
        "--no-plots (the tables are in {})",
        python, message, job.out_dir);
  if (code != 0)
    throw_runtime(
        "plots not produced: {} {} failed with exit code {}{}; use --no-plots to skip them (the tables "
        "are in {})",
        python, script, code, message.empty() ? "" : ": " + message, job.out_dir);
  std::vector<std::string> names;
  if (job.training) names = kFigureNames;
  if (job.hetero) names.insert(names.end(), kHeteroFigures.begin(), kHeteroFigures.end());
  if (job.allreduce) names.insert(names.end(), {kAllreduceFigure, kAllreduceEnergyFigure});
  if (job.inference) names.insert(names.end(), kInferFigures.begin(), kInferFigures.end());
  if (job.weak_scaling) names.push_back(kWeakScalingFigure);
  if (job.conv_sweep) names.insert(names.end(), kConvSweepFigures.begin(), kConvSweepFigures.end());
  if (job.kernel_cases) names.insert(names.end(), kKernelFigures.begin(), kKernelFigures.end());
  if (job.gpu_models) names.push_back(kGpuModelsFigure);
  if (job.kernel_profiles) names.push_back(kKernelProfileFigure);
  for (const std::string& name : names) {
    const fs::path p = fs::path(job.out_dir) / name;
    const bool skipped =
        std::any_of(outcome.left_out.begin(), outcome.left_out.end(), [&](const auto& l) { return l.first == name; });
    if (skipped) continue;
    if (!fs::is_regular_file(p, ec)) throw_runtime("plots incomplete: {} did not write {}", script, p.string());
    outcome.figures.push_back(p.string());
  }
  return outcome;
}

}  // namespace cnnscale::report
