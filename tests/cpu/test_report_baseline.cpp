// report --baseline: another framework's JSON lines beside the runs (the baseline table), and the
// one-line errors of a bad file.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/report.hpp"
#include "experiment/report_baseline.hpp"

namespace cnnscale {
namespace {

using testing::CsvRow;
using testing::read_csv;
using testing::slurp;
using testing::synthetic_run;
using testing::TempDir;
using testing::write_run;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// Ours: 1 rank at 256 (390, 410 samples/s), 1 at 64 (245, 255), 4 at 256 (890, 910). Theirs: 200
// at 256 and 100 at 64 on one GPU, 300 at 256 on four; a compiled run of four with no 1-GPU run of
// its own; a failed line; a network we did not run. Every figure follows from those by hand.
TEST(ReportBaseline, EachSideAgainstItsOwnOneGpuRuns) {
  TempDir dir;
  for (int rep = 0; rep < 2; ++rep) {
    write_run(dir.file("runs"), synthetic_run("caffenet", 256, 1, rep, {{"samples_per_s", 390.0 + rep * 20}}));
    write_run(dir.file("runs"), synthetic_run("caffenet", 64, 1, rep, {{"samples_per_s", 245.0 + rep * 10}}));
    write_run(dir.file("runs"), synthetic_run("caffenet", 256, 4, rep, {{"samples_per_s", 890.0 + rep * 20}}));
  }
  const std::string file = dir.file("anchor.jsonl");
  write_text(file,
             R"({"compile": "", "net": "caffenet", "batch": 256, "mode": "fp32", "world": 1, "samples_per_s": 200.0}
{"compile": "", "net": "caffenet", "batch": 64, "mode": "fp32", "world": 1, "samples_per_s": 100}

{"compile": "", "net": "caffenet", "batch": 256, "mode": "fp32", "world": 4, "samples_per_s": 300.0}
{"compile": "default", "net": "caffenet", "batch": 256, "mode": "fp32", "world": 4, "samples_per_s": 350.0}
{"net": "caffenet", "batch": 1024, "mode": "fp32", "world": 4, "error": "oom"}
{"compile": "", "net": "resnetim", "batch": 256, "mode": "fp32", "world": 4, "samples_per_s": 80.0}
)");
  report::ReportOptions o;
  o.results_dir = dir.file("runs");
  o.plots = false;
  o.baselines = {file};
  report::write_report(o);
  const auto rows = read_csv(dir.file("runs/report/baseline.csv"));
  const auto row = [&](int gpus, int batch, const std::string& source) -> const CsvRow& {
    for (const CsvRow& r : rows)
      if (r.at("gpus") == std::to_string(gpus) && r.at("batch") == std::to_string(batch) && r.at("baseline") == source)
        return r;
    ADD_FAILURE() << "no row of " << gpus << " GPUs at " << batch << " against " << source;
    return rows.front();
  };
  ASSERT_EQ(rows.size(), 4u);  // 1 rank at 64 and 256 and 4 at 256 against anchor, 4 against its compiled run
  const auto num = [](const CsvRow& r, const std::string& k) { return std::stod(r.at(k)); };
  const CsvRow& four = row(4, 256, "anchor");
  EXPECT_DOUBLE_EQ(num(four, "samples_per_s_mean"), 900.0);
  EXPECT_DOUBLE_EQ(num(four, "baseline_samples_per_s_mean"), 300.0);
  EXPECT_DOUBLE_EQ(num(four, "ratio_mean"), 3.0);
  EXPECT_DOUBLE_EQ(num(four, "efficiency_mean"), 900.0 / (4 * 400.0));
  EXPECT_DOUBLE_EQ(num(four, "baseline_efficiency_mean"), 300.0 / (4 * 200.0));
  EXPECT_DOUBLE_EQ(num(four, "weak_efficiency_mean"), 900.0 / (4 * 250.0));
  EXPECT_DOUBLE_EQ(num(four, "baseline_weak_efficiency_mean"), 300.0 / (4 * 100.0));
  const CsvRow& one = row(1, 256, "anchor");
  EXPECT_DOUBLE_EQ(num(one, "ratio_mean"), 2.0);
  EXPECT_DOUBLE_EQ(num(one, "efficiency_mean"), 1.0);
  EXPECT_DOUBLE_EQ(num(one, "baseline_efficiency_mean"), 1.0);
  EXPECT_DOUBLE_EQ(num(row(1, 64, "anchor"), "ratio_mean"), 2.5);
  const CsvRow& compiled = row(4, 256, "anchor compile=default");
  EXPECT_DOUBLE_EQ(num(compiled, "ratio_mean"), 900.0 / 350.0);
  EXPECT_EQ(compiled.at("baseline_efficiency_mean"), "");  // no compiled 1-GPU run
  EXPECT_EQ(compiled.at("baseline_weak_efficiency_mean"), "");
  const std::string md = slurp(dir.file("runs/report/baseline.md"));
  EXPECT_NE(md.find("1 baseline measurement(s) failed there"), std::string::npos) << md;
}

// Each bad input is one ConfigError naming the file, and the line where there is one.
TEST(ReportBaseline, BadLinesNameTheFileAndLine) {
  TempDir dir;
  const auto error_of = [&](const std::string& text) {
    const std::string file = dir.file("b.jsonl");
    write_text(file, text);
    try {
      report::read_baseline(file);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string good = R"({"net": "caffenet", "batch": 64, "mode": "bf16", "world": 1, "samples_per_s": 9.0})";
  const std::string file = dir.file("b.jsonl");
  EXPECT_EQ(error_of(good + "\nnot json\n"), file + ":2: not a JSON object");
  EXPECT_EQ(error_of(good + "\n[1, 2]\n"), file + ":2: not a JSON object");
  EXPECT_EQ(error_of(R"({"net": "caffenet", "mode": "bf16", "world": 1, "samples_per_s": 9.0})"),
            file + ":1: no \"batch\"");
  EXPECT_EQ(error_of(R"({"net": "caffenet", "batch": "64", "mode": "bf16", "world": 1, "samples_per_s": 9.0})"),
            file + ":1: \"batch\" is \"64\", expected a number");
  EXPECT_EQ(error_of(R"({"net": "caffenet", "batch": 64.5, "mode": "bf16", "world": 1, "samples_per_s": 9.0})"),
            file + ":1: \"batch\" is 64.5, expected a whole number >= 1");
  EXPECT_EQ(error_of(R"({"net": "caffenet", "batch": 64, "mode": "bf16", "world": 1, "samples_per_s": 0})"),
            file + ":1: \"samples_per_s\" is 0, expected a positive number");
  EXPECT_EQ(error_of("\n\n"), "--baseline " + file + ": no measurement in the file");
  EXPECT_EQ(error_of(good), "no error");
  EXPECT_THROW(report::read_baseline(dir.file("missing.jsonl")), ConfigError);
  EXPECT_EQ(report::baseline_net("resnetim"), "resnet34");
  EXPECT_EQ(report::baseline_net("caffenet"), "caffenet");

  // A file of another study: nothing to put it beside is an error, not an empty table.
  write_run(dir.file("runs"), synthetic_run("lenet", 64, 1, 0, {{"samples_per_s", 10.0}}));
  write_text(dir.file("other.jsonl"), good + "\n");
  report::ReportOptions o;
  o.results_dir = dir.file("runs");
  o.plots = false;
  o.baselines = {dir.file("other.jsonl")};
  try {
    report::write_report(o);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("none of its 1 measurement(s)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cnnscale
