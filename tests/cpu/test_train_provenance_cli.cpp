// `cnnscale train` records where its results came from and how it trained: the provenance (version,
// command line as run, start and end time, hosts) in summary.json, run.h5 and the CSV row; every
// solver flag as a typed summary figure; the loss and lr of every display step as run.h5's /curve
// (the values the progress lines print); the last progress record beside the results. A run that
// fails leaves no folder, partial or not.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/temp_dir.hpp"
#include "core/build_info.hpp"
#include "core/host_name.hpp"
#include "cpu/cli_runner.hpp"
#include "io/progress_file.hpp"
#include "io/provenance.hpp"
#include "io/results_writer.hpp"

namespace cnnscale::testing {
namespace {

namespace fs = std::filesystem;

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// Splits a CSV line (quoted fields with doubled quotes, as the writer makes them).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      out.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

struct Printed {
  int64_t iteration;
  double loss, lr;
};
// The plain progress lines (stderr is no terminal here): "iter 4/12 epoch 0.03 loss 2.3026 lr 0.01 ...".
std::vector<Printed> printed_displays(const std::string& err) {
  std::vector<Printed> out;
  std::istringstream is(err);
  for (std::string line; std::getline(is, line);) {
    long long it = 0, total = 0;
    double epoch = 0, loss = 0, lr = 0;
    if (std::sscanf(line.c_str(), "iter %lld/%lld epoch %lf loss %lf lr %lf", &it, &total, &epoch, &loss, &lr) == 5)
      out.push_back({it, loss, lr});
  }
  return out;
}

TEST(TrainProvenance, ResultsRecordProvenanceSolverSettingsCurveAndProgress) {
  TempDir dir;
  const std::string root = dir.file("results");
  const std::vector<std::string> args = {
      "train",         "--net",         "lenet",     "--data",           "synthetic",
      "--iterations",  "12",            "--batch",   "8",                "--display",
      "4",             "--timing-warmup", "2",       "--min-window",     "0",
      "--results",     root,            "--experiment", "e",             "--run-id",
      "r1",            "--lr",          "0.02",      "--momentum",       "0.85",
      "--weight-decay", "0.0001",       "--lr-policy", "step",           "--gamma",
      "0.5",           "--step",        "0.25",      "--power",          "2",
      "--warmup-iterations", "3",       "--warmup-start-factor", "0.2", "--lr-scaling",
      "linear",        "--lr-base-batch", "16",      "--tag",            "note=a b"};
  const CliResult r = run_cnnscale(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path run = fs::path(root) / "e" / "r1";
  EXPECT_FALSE(fs::exists(fs::path(root) / "e" / "r1.partial"));
  const nlohmann::json j = read_json(run / "summary.json");

  // Provenance: the build, the command line exactly as run, a start no later than the end, the host.
  ASSERT_TRUE(j.contains("provenance")) << j.dump();
  const Provenance p = provenance_from_json(j["provenance"], "summary.json");
  EXPECT_EQ(p.version, CNNSCALE_VERSION);
  EXPECT_FALSE(p.version.empty());
  EXPECT_EQ(p.git_describe, cnnscale_git_describe());
  std::vector<std::string> command = {CNNSCALE_BIN};
  command.insert(command.end(), args.begin(), args.end());
  EXPECT_EQ(p.command_line, command);
  // ISO 8601 UTC of one format: their order as strings is their order in time.
  EXPECT_EQ(p.start_time.size(), 20u) << p.start_time;
  EXPECT_EQ(p.end_time.size(), 20u) << p.end_time;
  EXPECT_LE(p.start_time, p.end_time);
  EXPECT_EQ(p.hosts, std::vector<std::string>{host_name()});
  const RunResults back = read_run_results(run.string());
  ASSERT_TRUE(back.provenance.has_value());
  EXPECT_EQ(*back.provenance, p);

  // The CSV row carries the same, the command line as one shell line.
  const std::vector<std::string> csv = read_lines(run / "summary.csv");
  ASSERT_EQ(csv.size(), 2u);
  const std::vector<std::string> header = csv_fields(csv[0]), row = csv_fields(csv[1]);
  ASSERT_EQ(header.size(), row.size());
  std::map<std::string, std::string> cells;
  for (size_t i = 0; i < header.size(); ++i) cells[header[i]] = row[i];
  EXPECT_EQ(cells["command_line"], shell_line(command));
  EXPECT_EQ(cells["version"], p.version);
  EXPECT_EQ(cells["start_time"], p.start_time);
  EXPECT_EQ(cells["end_time"], p.end_time);
  EXPECT_EQ(cells["hosts"], host_name());
  EXPECT_EQ(cells["lr_policy"], "step");

  // Every solver flag as a typed figure; lr_scaled is 0.02 x batch 8 / base batch 16.
  const nlohmann::json& s = j["summary"];
  EXPECT_EQ(s["lr"], 0.02);
  EXPECT_DOUBLE_EQ(s["lr_scaled"].get<double>(), 0.01);
  EXPECT_EQ(s["momentum"], 0.85);
  EXPECT_EQ(s["weight_decay"], 0.0001);
  EXPECT_EQ(s["lr_policy"], "step");
  EXPECT_EQ(s["lr_gamma"], 0.5);
  EXPECT_EQ(s["lr_step_epochs"], 0.25);
  EXPECT_EQ(s["lr_power"], 2.0);
  EXPECT_EQ(s["lr_milestones"], "");
  EXPECT_EQ(s["warmup_epochs"], 0.0);
  EXPECT_TRUE(s["warmup_iterations"].is_number_integer());
  EXPECT_EQ(s["warmup_iterations"], 3);
  EXPECT_EQ(s["warmup_start_factor"], 0.2);
  EXPECT_EQ(s["lr_scaling"], "linear");
  EXPECT_EQ(s["lr_base_batch"], 16);
  EXPECT_EQ(back.summary.lr_scaling, TextFigure("linear"));

  // The curve: one point per display step, the values the progress lines printed (loss to 4
  // decimals: within half a unit of the last; lr to 6 significant digits).
  const TrainingCurve& c = back.curve;
  EXPECT_EQ(c.start_iteration, 0);
  EXPECT_EQ(c.iteration, (std::vector<int64_t>{4, 8, 12}));
  const std::vector<Printed> printed = printed_displays(r.err);
  ASSERT_EQ(printed.size(), c.iteration.size()) << r.err;
  ASSERT_EQ(c.loss.size(), printed.size());
  ASSERT_EQ(c.lr.size(), printed.size());
  ASSERT_EQ(c.samples_per_s.size(), printed.size());
  for (size_t i = 0; i < printed.size(); ++i) {
    EXPECT_EQ(c.iteration[i], printed[i].iteration);
    EXPECT_NEAR(c.loss[i], printed[i].loss, 0.5e-4) << i;
    EXPECT_NEAR(c.lr[i], printed[i].lr, 0.5e-5 * printed[i].lr) << i;
    EXPECT_GT(c.samples_per_s[i], 0) << i;
  }
  // Warm-up of 3 iterations from 0.2 x lr: the first display's lr is past it, the scaled lr.
  EXPECT_DOUBLE_EQ(c.lr[0], 0.01);

  // h5py users read the same, as results/README.md documents it.
  const char* python = "/usr/bin/python3";
  if (std::system(fmt::format("{} -c 'import h5py' >/dev/null 2>&1", python).c_str()) == 0) {
    const std::string script = dir.file("read.py");
    std::ofstream(script) << R"PY(
import json, sys
import h5py
f = h5py.File(sys.argv[1], "r")
c, p = f["curve"], f["provenance"]
print(json.dumps({"iteration": [int(x) for x in c["iteration"][()]], "loss": [float(x) for x in c["loss"][()]],
                  "start": int(c.attrs["start_iteration"]), "version": p.attrs["version"],
                  "start_time": p.attrs["start_time"], "end_time": p.attrs["end_time"],
                  "command_line": list(p["command_line"].asstr()[()]), "hosts": list(p["hosts"].asstr()[()]),
                  "lr": float(f["summary"].attrs["lr"]), "lr_policy": f["summary"].attrs["lr_policy"]}))
)PY";
    FILE* pipe = ::popen(fmt::format("{} {} {}/run.h5", python, script, run.string()).c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string out;
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
    ASSERT_EQ(::pclose(pipe), 0) << out;
    const nlohmann::json h = nlohmann::json::parse(out);
    EXPECT_EQ(h["iteration"], nlohmann::json(c.iteration));
    EXPECT_EQ(h["loss"], nlohmann::json(c.loss));
    EXPECT_EQ(h["start"], 0);
    EXPECT_EQ(h["version"], p.version);
    EXPECT_EQ(h["start_time"], p.start_time);
    EXPECT_EQ(h["end_time"], p.end_time);
    EXPECT_EQ(h["command_line"], nlohmann::json(command));
    EXPECT_EQ(h["hosts"], nlohmann::json(p.hosts));
    EXPECT_EQ(h["lr"], 0.02);
    EXPECT_EQ(h["lr_policy"], "step");
  }

  // The last progress record stays beside the results.
  const nlohmann::json progress = read_json(run / std::string(kProgressFile));
  EXPECT_EQ(progress["format"], kProgressFormat);
  EXPECT_EQ(progress["status"], "complete");
  EXPECT_EQ(progress["iteration"], 12);
  EXPECT_EQ(progress["total"], 12);
  EXPECT_EQ(progress["run_id"], "r1");
  EXPECT_NEAR(progress["loss"].get<double>(), c.loss.back(), 1e-12);
  EXPECT_TRUE(progress["watts"].is_null());  // a CPU run reads no GPU counter
  EXPECT_EQ(progress["start_time"], p.start_time);
}

TEST(TrainProvenance, AFailedRunLeavesNoFolder) {
  TempDir dir;
  const std::string root = dir.file("results");
  const CliResult r = run_cnnscale({"train", "--net", "lenet", "--data", "synthetic", "--iterations", "12", "--batch",
                                    "8", "--display", "2", "--results", root, "--experiment", "e", "--run-id", "bad"},
                                   {"CNNSCALE_INJECT_NONFINITE_AT=9"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("progress: "), std::string::npos) << r.err;  // it was written while training
  EXPECT_FALSE(fs::exists(fs::path(root) / "e" / "bad.partial"));
  EXPECT_FALSE(fs::exists(fs::path(root) / "e" / "bad"));
}

}  // namespace
}  // namespace cnnscale::testing
