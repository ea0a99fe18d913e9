// Two `train` processes with one --run-id and results root: the first claims the run folder before
// any work and keeps it; the second refuses at its start, naming the first's host and pid, and the
// first ends with a folder whose files are all its own. (Plain processes, no MPI: this binary has
// the background-process runner that lets the test hold the first one mid-run.)
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"
#include "io/results_writer.hpp"
#include "mpi/mpi_runner.hpp"

namespace cnnscale::testing {
namespace {

namespace fs = std::filesystem;

TEST(ResultsClaim, SecondTrainOfTheSameRunIdRefusesNamingTheFirst) {
  TempDir dir;
  const std::vector<std::string> args = {"train",     "--net",      "lenet",    "--data",       "synthetic",
                                         "--iterations", "40",      "--batch",  "4",            "--display",
                                         "1",         "--results",  dir.str(),  "--experiment", "e",
                                         "--run-id",  "same",       "--min-window", "0",        "--timing-warmup",
                                         "1"};
  MpiJob first(0, args);
  // Its first loss line: it has claimed the folder (that comes before any work) and is training.
  ASSERT_TRUE(first.wait_for_err("iter ", std::chrono::seconds(120))) << first.err_so_far();
  // Held still while the second one starts, so that it is mid-run then however fast the machine is.
  ASSERT_EQ(::kill(first.pid(), SIGSTOP), 0);
  const CliResult second = run_cnnscale(args);
  ::kill(first.pid(), SIGCONT);

  // Exit 1 (runtime): the command is right, the folder is busy now; the same command succeeds later.
  EXPECT_EQ(second.exit_code, 1) << second.err;
  const auto lines = second.err_lines();
  ASSERT_EQ(lines.size(), 1u) << second.err;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  EXPECT_NE(lines[0].find("--run-id same"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(fmt::format("host {} pid {}", host, first.pid())), std::string::npos) << lines[0];
  EXPECT_EQ(second.err.find("iter "), std::string::npos) << "the second one trained";

  const MpiResult done = first.wait(std::chrono::seconds(120));
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const fs::path folder = fs::path(dir.str()) / "e" / "same";
  // Every file of the folder is the first run's: run.h5 and summary.json tell the same figures.
  const RunResults h5 = read_run_results(folder.string());
  std::ifstream in(folder / "summary.json");
  const auto summary = nlohmann::json::parse(in);
  EXPECT_EQ(h5.run_id, "same");
  EXPECT_EQ(summary["run_id"], "same");
  EXPECT_EQ(summary_values_json(h5.summary), summary["summary"]);
  EXPECT_TRUE(fs::exists(folder / "summary.csv"));
  // Nothing else is left: no partial folder, and the claim went with its holder.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(folder.parent_path())) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"same"});
}

}  // namespace
}  // namespace cnnscale::testing
