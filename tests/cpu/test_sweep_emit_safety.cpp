// Emitted job scripts against hostile values: paths and settings with newlines, $(), backticks,
// quotes, ';' and blanks reach cnnscale as the very words they were, run nothing of their own when
// the script is submitted (stub sbatch/qsub) or run as a task, and what a #SBATCH/#PBS line cannot
// carry is refused before anything is written. Also the site settings and the stop/requeue path of
// an emitted task.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/sweep_test_util.hpp"
#include "experiment/sweep.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using namespace sweep_test;
using testing::TempDir;

// Each would run `touch PWNED` (in the shell's working directory) if pasted into a script unquoted.
const std::vector<std::string> kHostile = {
    "e\ntouch PWNED\n#", "e$(touch PWNED)", "e`touch PWNED`", "e'q\"d;touch PWNED", "e; touch PWNED", "e with space",
};

// Every file or folder under `root` named PWNED: an injected command ran.
std::vector<std::string> injected(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(root))
    if (entry.path().filename() == "PWNED") out.push_back(entry.path().string());
  return out;
}

// A stand-in for sbatch/qsub/scontrol: appends its arguments to $STUB_LOG, NUL-separated, one
// call per line, and answers as sbatch does.
const char* kStub = R"(#!/bin/sh
for a in "$@"; do printf '%s\0' "$a" >> "$STUB_LOG"; done
echo >> "$STUB_LOG"
echo "Submitted batch job 42"
)";

// The calls logged by kStub: each a list of arguments.
std::vector<std::vector<std::string>> calls_of(const std::string& log) {
  std::vector<std::vector<std::string>> calls;
  std::vector<std::string> args;
  std::string word;
  for (const char c : slurp(log)) {
    if (c == '\0') {
      args.push_back(word);
      word.clear();
    } else if (c == '\n' && word.empty()) {
      calls.push_back(args);
      args.clear();
    } else {
      word += c;
    }
  }
  return calls;
}

// `cnnscale sweep FILE --emit slurm`, then `bash` of the script from `dir` as a login node would:
// the stub sbatch gets each group's options and the script's own path, and no hostile file name in
// the experiment path runs as a command; then as an array task it runs the sweep of that very file.
TEST(SweepEmitSafety, HostileExperimentPathsStayOneWord) {
  TempDir dir;
  write_script(dir.file("bin/sbatch"), kStub);
  for (size_t i = 0; i < kHostile.size(); ++i) {
    const std::string& name = kHostile[i];
    SCOPED_TRACE(testing::shell_quote(name));
    const std::string exp = dir.file(name);
    write(exp, kText);
    const std::string script = dir.file("s" + std::to_string(i) + ".sbatch");
    auto emitted = testing::run_cnnscale(
        {"sweep", exp, "--emit", "slurm", "--emit-file", script, "--results", dir.file("res"), "--time", "00:10:00"});
    ASSERT_EQ(emitted.exit_code, 0) << emitted.err;
    // Header comments keep to one line each: the newline is shown as \n.
    for (const auto& line : lines_of(slurp(script)))
      if (line.rfind("#", 0) != 0) {
        EXPECT_TRUE(line.rfind("set -euo", 0) == 0) << "the first line after the header: " << line;
        break;
      }
    const std::string log = dir.file("sbatch" + std::to_string(i) + ".log");
    auto r = shell(
        "cd " + testing::shell_quote(dir.str()) + " && env -u SLURM_JOB_ID STUB_LOG=" + testing::shell_quote(log) +
        " PATH=" + testing::shell_quote(dir.file("bin")) + ":\"$PATH\" bash " + testing::shell_quote(script));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(injected(dir.str()), std::vector<std::string>{});
    const auto calls = calls_of(log);
    ASSERT_EQ(calls.size(), 1u) << slurp(log);  // both runs need 1 CPU rank: one group
    EXPECT_EQ(calls[0], (std::vector<std::string>{"--array=0-1", "--nodes=1", "--ntasks=1", "--ntasks-per-node=1",
                                                  "--export=ALL,CNNSCALE_RUN_LIST=0:1", script}));
  }
  // As an array task (PBS here: a Slurm task would start its run with srun), the newline path is
  // the file the sweep reads: its run 1 trains and is complete.
  const std::string script = dir.file("s0.pbs");
  auto emitted = testing::run_cnnscale(
      {"sweep", dir.file(kHostile[0]), "--emit", "pbs", "--emit-file", script, "--results", dir.file("res")});
  ASSERT_EQ(emitted.exit_code, 0) << emitted.err;
  auto task = shell("env -u SLURM_JOB_ID PBS_JOBID=7.pbs PBS_ARRAY_INDEX=1 CNNSCALE_RUN_LIST=0:1 bash " +
                    testing::shell_quote(script));
  ASSERT_EQ(task.exit_code, 0) << task.err;
  EXPECT_NE(task.err.find("1 ran, 0 already complete, 0 failed"), std::string::npos) << task.err;
  EXPECT_EQ(injected(dir.str()), std::vector<std::string>{});
  // The task runs in the folder the script was written from (the source tree, for run_cnnscale).
  EXPECT_FALSE(fs::exists(fs::path(CNNSCALE_SOURCE_DIR) / "PWNED"));
}

// Every value an emitted task passes on (executable, experiment path, overrides, --only, working
// folder, results root) arrives as the same single word, whatever it holds.
TEST(SweepEmitSafety, TaskPassesEveryValueOnAsOneWord) {
  TempDir dir;
  Experiment e = load();
  const auto runs = expand_runs(e);
  for (const std::string& hostile : kHostile) {
    SCOPED_TRACE(testing::shell_quote(hostile));
    fs::remove_all(dir.file("t"));
    // A stand-in for cnnscale, itself at a hostile path: writes its arguments NUL-separated.
    const std::string self = dir.file("t/bin " + std::to_string(hostile.size()) + ";x/cnn'scale");
    write_script(self, "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done > \"$ARGS_OUT\"\n");
    const std::string work = dir.file("t/w" + hostile);
    fs::create_directories(work);
    // A results root's folder must suit a #SBATCH line too: no blanks, quotes or newlines there.
    const std::string results = dir.file("t/r$(touch${IFS}PWNED)`touch${IFS}PWNED`;x");
    EmitRequest req{
        "slurm", self, dir.file("t/" + hostile + ".yaml"), results, work, {"seed=" + hostile}, {"network=" + hostile}};
    const std::string script = dir.file("t/s.sbatch");
    write(script, emit_script(req, e, runs));
    auto r =
        shell("cd / && env SLURM_JOB_ID=7 SLURM_ARRAY_TASK_ID=1 ARGS_OUT=" + testing::shell_quote(dir.file("t/args")) +
              " bash " + testing::shell_quote(script));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<std::string> args;
    std::string word;
    for (const char c : slurp(dir.file("t/args"))) {
      if (c) {
        word += c;
      } else {
        args.push_back(word);
        word.clear();
      }
    }
    EXPECT_EQ(args, (std::vector<std::string>{"sweep", req.file, "--results", results, "seed=" + hostile, "--only",
                                              "network=" + hostile, "--run-index", "1"}));
    EXPECT_TRUE(fs::is_directory(fs::path(results) / "s"));  // made by the task, name and all
    EXPECT_EQ(injected(dir.str()), std::vector<std::string>{});
  }
}

// What a #SBATCH/#PBS line cannot carry is refused: exit 2, one line naming the value's source,
// nothing written (no script, no results folder).
TEST(SweepEmitSafety, DirectiveValuesAreRefusedBeforeAnythingIsWritten) {
  TempDir dir;
  const std::string exp = dir.file("e.yaml");
  write(exp, kText);
  const std::string script = dir.file("s.sbatch");
  struct Case {
    std::string kind;
    std::vector<std::string> args, fragments;
  };
  const std::string res = dir.file("res");
  const std::vector<Case> cases = {
      {"slurm",
       {"--results", res + "\ntouch PWNED\n#"},
       {"--results '", "\\ntouch PWNED\\n#'", "#SBATCH --output", "a newline"}},
      {"slurm", {"--results", res + " x"}, {"--results", "#SBATCH --output", "a blank"}},
      {"slurm", {"--results", res + "#x"}, {"--results", "'#'"}},
      {"slurm", {"--results", res + "\"x"}, {"--results", "'\"'"}},
      {"pbs", {"--results", res + ":x"}, {"--results", "#PBS -o", "':'"}},
      {"pbs", {"--results", res + "\r"}, {"--results", "#PBS -o", "control character (\\r)"}},
      {"slurm", {"--time", "01:00:00\ntouch PWNED"}, {"--time '01:00:00\\ntouch PWNED'", "expected a wall-time"}},
      {"slurm", {"--time", "$(touch PWNED)"}, {"--time", "expected a wall-time"}},
      {"slurm", {"--partition", "gpu\ntouch PWNED"}, {"--partition", "#SBATCH --partition", "a newline"}},
      {"pbs", {"--partition", "q x"}, {"--partition", "#PBS -q", "a blank"}},
      {"slurm", {"--account", "a'b"}, {"--account", "#SBATCH --account", "'''"}},
      {"slurm", {"--qos", "high;x y"}, {"--qos", "a blank"}},
      {"slurm", {"--constraint", "a\\b"}, {"--constraint", "'\\'"}},
      {"pbs", {"--qos", "high"}, {"--qos high: PBS has no such setting"}},
      {"pbs", {"--constraint", "h100"}, {"--constraint h100: PBS has no such setting"}},
      {"slurm", {"--sched-option", "mem=0"}, {"--sched-option 'mem=0': expected a scheduler option"}},
      {"slurm", {"--sched-option=--mem=0\ntouch PWNED"}, {"--sched-option", "a newline"}},
      {"slurm", {"--sched-option=--comment=\"x\""}, {"--sched-option", "'\"'"}},
      {"slurm", {"--setup", "module load x\ntouch PWNED"}, {"--setup 'module load x\\ntouch PWNED'", "a newline"}},
      {"slurm", {"--setup", " "}, {"--setup: an empty command"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} {}", c.kind, testing::shell_quote(c.args.back())));
    std::vector<std::string> args = {"sweep", exp, "--emit", c.kind, "--emit-file", script};
    args.insert(args.end(), c.args.begin(), c.args.end());
    if (c.args[0] != "--results") args.insert(args.end(), {"--results", res});  // else it is the value refused
    testing::expect_usage_error(args, c.fragments);
    EXPECT_FALSE(fs::exists(script));
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"e.yaml"});  // no results folder either
  }
  // Site settings belong to --emit.
  testing::expect_usage_error({"sweep", exp, "--partition", "gpu", "--dry-run"}, {"--partition needs --emit"});
  testing::expect_usage_error({"sweep", exp, "--setup", "module load x"}, {"--setup needs --emit"});
  EXPECT_EQ(injected(dir.str()), std::vector<std::string>{});
}

// Site settings become directives (Slurm; PBS's queue and account) and setup lines every task runs
// first; a '%' of the results path is kept from Slurm's file-name patterns.
TEST(SweepEmitSafety, SiteSettingsNeedNoEditing) {
  TempDir dir;
  Experiment e = load();
  const auto runs = expand_runs(e);
  EmitRequest req{"slurm", "/opt/cnnscale", "/exp/s.yaml", "/res/100%", "/w", {}, {}};
  req.site = {"gpu",
              "proj1",
              "high",
              "h100&ib",
              {"--mem=0", "--exclusive --reservation=r1"},
              {"module load cuda/13 openmpi", "export SITE=\"$(hostname) x\""}};
  const std::string slurm = emit_script(req, e, runs);
  for (const char* line : {"#SBATCH --partition=gpu\n", "#SBATCH --account=proj1\n", "#SBATCH --qos=high\n",
                           "#SBATCH --constraint=h100&ib\n", "#SBATCH --mem=0\n",
                           "#SBATCH --exclusive --reservation=r1\n", "#SBATCH --output=/res/100%%/s/slurm-%A_%a.out\n",
                           "#SBATCH --signal=B:USR1@120\n", "#SBATCH --requeue\n", "#SBATCH --open-mode=append\n",
                           "\nset +u\nmodule load cuda/13 openmpi\nexport SITE=\"$(hostname) x\"\nset -u\n"})
    EXPECT_NE(slurm.find(line), std::string::npos) << slurm << "\nlacks: " << line;
  req.kind = "pbs";
  req.site.qos = req.site.constraint = "";
  req.site.options = {"-l place=scatter"};
  const std::string pbs = emit_script(req, e, runs);
  for (const char* line : {"#PBS -q gpu\n", "#PBS -A proj1\n", "#PBS -l place=scatter\n", "#PBS -r y\n",
                           "#PBS -o /res/100%/s/\n", "\nset +u\nmodule load cuda/13 openmpi\n"})
    EXPECT_NE(pbs.find(line), std::string::npos) << pbs << "\nlacks: " << line;

  // The setup lines run in the task, before its run, in the working folder.
  const std::string self = dir.file("cnnscale");
  write_script(self, "#!/bin/sh\necho \"run $* with SITE=$SITE\"\n");
  fs::create_directories(dir.file("w"));
  req = EmitRequest{"slurm", self, "/exp/s.yaml", dir.file("res"), dir.file("w"), {}, {}};
  req.site.setup = {"export SITE=\"$(pwd)\"", "test -n \"$UNSET_IN_MODULE_SCRIPTS\" || true"};
  write(dir.file("s.sbatch"), emit_script(req, e, runs));
  auto r = shell("env -u UNSET_IN_MODULE_SCRIPTS SLURM_JOB_ID=7 SLURM_ARRAY_TASK_ID=0 bash " + dir.file("s.sbatch"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--run-index 0 with SITE=" + dir.file("w") + "\n"), std::string::npos) << r.out;
  // A failing setup command ends the task before its run.
  req.site.setup = {"false"};
  write(dir.file("s.sbatch"), emit_script(req, e, runs));
  r = shell("env SLURM_JOB_ID=7 SLURM_ARRAY_TASK_ID=0 bash " + dir.file("s.sbatch"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
}

// An emitted task passes the scheduler's stop signal on to its sweep; a run stopped for requeue
// (exit 75) is requeued on Slurm (scontrol requeue of the task's job), reported on PBS, and the
// task ends with 75. Any other exit is the task's, without a requeue.
TEST(SweepEmitSafety, TaskPassesStopsOnAndRequeues) {
  TempDir dir;
  write_script(dir.file("bin/scontrol"), kStub);
  // A stand-in for the sweep: ready, then stops on USR1/TERM with 75 (as a stopped run makes it).
  const std::string self = dir.file("cnnscale");
  write_script(self,
               "#!/bin/bash\ntrap 'echo \"sweep got USR1\"; exit 75' USR1\ntrap 'echo \"sweep got TERM\"; exit 75' "
               "TERM\n: > \"$READY\"\nwhile :; do sleep 0.05; done\n");
  Experiment e = load();
  const auto runs = expand_runs(e);
  for (const std::string kind : {"slurm", "pbs"}) {
    for (const std::string sig : {"USR1", "TERM"}) {
      SCOPED_TRACE(kind + " " + sig);
      const std::string ready = dir.file("ready"), log = dir.file("scontrol.log");
      fs::remove(ready);
      fs::remove(log);
      EmitRequest req{kind, self, "/exp/s.yaml", dir.file("res"), dir.str(), {}, {}};
      write(dir.file("s.job"), emit_script(req, e, runs));
      // Signalled once the stand-in is up (its file exists): no sleep decides the outcome.
      auto r = shell("export READY=" + ready + " STUB_LOG=" + log + " PATH=" + dir.file("bin") + ":$PATH " +
                     (kind == "slurm" ? "SLURM_JOB_ID=77 SLURM_ARRAY_TASK_ID=1" : "PBS_JOBID=77.pbs PBS_ARRAY_INDEX=1") + "; bash " +
                     dir.file("s.job") + " & job=$!; until [ -e " + ready + " ]; do sleep 0.01; done; kill -" + sig +
                     " $job; wait $job");
      EXPECT_EQ(r.exit_code, 75) << r.out << r.err;
      EXPECT_NE(r.out.find("sweep got " + sig), std::string::npos) << r.out;
      if (kind == "slurm") {
        EXPECT_EQ(calls_of(log), (std::vector<std::vector<std::string>>{{"requeue", "77"}}));
        EXPECT_NE(r.err.find("cnnscale: run 1 stopped for requeue (exit 75): requeueing job 77"), std::string::npos)
            << r.err;
      } else {
        EXPECT_FALSE(fs::exists(log));
        EXPECT_NE(r.err.find("run 1 stopped for requeue (exit 75): submit again"), std::string::npos) << r.err;
      }
    }
  }
  // A failed run is no requeue.
  write_script(self, "#!/bin/sh\nexit 1\n");
  EmitRequest req{"slurm", self, "/exp/s.yaml", dir.file("res"), dir.str(), {}, {}};
  write(dir.file("s.job"), emit_script(req, e, runs));
  auto r = shell("env STUB_LOG=" + dir.file("scontrol.log") + " PATH=" + dir.file("bin") +
                 ":\"$PATH\" SLURM_JOB_ID=77 bash " + dir.file("s.job"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(fs::exists(dir.file("scontrol.log")));
}

// A requeued run starts over, so a run longer than the time limit would requeue for ever: a task
// requeues itself while SLURM_RESTART_COUNT is below --max-requeues, and after that ends with 75
// saying why. The count is read as digits only: bash arithmetic would run a $(...) inside it.
TEST(SweepEmitSafety, RequeuesAreCounted) {
  TempDir dir;
  write_script(dir.file("bin/scontrol"), kStub);
  const std::string self = dir.file("cnnscale");
  write_script(self, "#!/bin/sh\nexit 75\n");  // a stand-in for a sweep whose run stopped for requeue
  Experiment e = load();
  const auto runs = expand_runs(e);
  struct Case {
    int64_t max;
    std::string restarts;
    bool requeued;
  };
  for (const Case& c : {Case{3, "", true}, Case{3, "2", true}, Case{3, "3", false}, Case{0, "", false},
                        Case{3, "a[$(touch PWNED)]", true}}) {
    SCOPED_TRACE(c.restarts + " of " + std::to_string(c.max));
    const std::string log = dir.file("scontrol.log");
    fs::remove(log);
    EmitRequest req{"slurm", self, "/exp/s.yaml", dir.file("res"), dir.str(), {}, {}};
    req.max_requeues = c.max;
    write(dir.file("s.job"), emit_script(req, e, runs));
    auto r = shell("cd " + testing::shell_quote(dir.str()) + " && env STUB_LOG=" + log + " PATH=" + dir.file("bin") +
                   ":\"$PATH\" SLURM_JOB_ID=77 SLURM_ARRAY_TASK_ID=1 " +
                   (c.restarts.empty() ? std::string() : "SLURM_RESTART_COUNT=" + testing::shell_quote(c.restarts)) +
                   " bash s.job");
    EXPECT_EQ(r.exit_code, 75) << r.err;
    if (c.requeued) {
      EXPECT_EQ(calls_of(log), (std::vector<std::vector<std::string>>{{"requeue", "77"}}));
      EXPECT_NE(r.err.find("of at most " + std::to_string(c.max) + ")"), std::string::npos) << r.err;
    } else {
      EXPECT_FALSE(fs::exists(log)) << "not requeued again";
      EXPECT_NE(r.err.find("(sweep --max-requeues " + std::to_string(c.max) + "): not again"), std::string::npos)
          << r.err;
    }
    EXPECT_FALSE(fs::exists(dir.file("PWNED")));
  }
}

}  // namespace
}  // namespace cnnscale
