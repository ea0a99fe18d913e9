// `cnnscale report` on synthetic runs written with write_run_results: grouping of repeats, mean and
// sample std read back from the CSV equal to the inputs', best EDP, null handling ("—" in Markdown,
// empty in CSV, a note on an all-null table), the variant column (keys that vary within a network),
// partial folders ignored and the report's files. Scaling: test_report_scaling.cpp; the wide
// by_gpus table: test_report_by_gpus.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/report.hpp"
#include "experiment/report_data.hpp"
#include "experiment/report_table.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using testing::CsvRow;
using testing::read_csv;
using testing::report_without_plots;
using testing::row_of;
using testing::sample_std;
using testing::slurp;
using testing::synthetic_run;
using testing::TempDir;
using testing::write_run;

TEST(ReportStats, MeanSampleStdAndCountSkipNulls) {
  report::Stat s = report::stat_of({1.0, 2.0, 3.0, kMissing});
  EXPECT_EQ(s.n, 3);
  EXPECT_DOUBLE_EQ(s.mean, 2.0);
  EXPECT_DOUBLE_EQ(s.std, 1.0);
  EXPECT_EQ(s.min, 1.0);
  EXPECT_EQ(s.max, 3.0);
  report::Stat one = report::stat_of({5.0});
  EXPECT_EQ(one.n, 1);
  EXPECT_TRUE(std::isnan(one.std));
  EXPECT_EQ(report::format_stat(one), "5.000");
  EXPECT_TRUE(report::stat_of({kMissing}).null());
  EXPECT_EQ(report::format_stat(report::stat_of({})), "—");
  EXPECT_EQ(report::format_stat(report::stat_of({0.1, 0.3})), "0.2000 ± 0.1414");
  EXPECT_EQ(report::format_number(123456.7), "123457");
  EXPECT_EQ(report::csv_number(0.1), "0.1");
  EXPECT_EQ(report::csv_field("H100,H100"), "\"H100,H100\"");
}

TEST(Report, RepeatsAreGroupedAndCsvHoldsTheirMeanAndStd) {
  TempDir dir;
  const std::vector<double> spb = {0.125, 0.25, 0.2};
  for (int rep = 0; rep < 3; ++rep)
    write_run(dir.str(), synthetic_run("lenet", 64, 1, rep,
                                       {{"seconds_per_batch", spb[rep]},
                                        {"samples_per_s", 64 / spb[rep]},
                                        {"whole_training_seconds", spb[rep] * 1000},
                                        {"whole_iterations", 1000.0},
                                        {"time_forward_s", spb[rep] / 4},
                                        {"time_backward_s", spb[rep] / 2}}));
  write_run(dir.str(), synthetic_run("lenet", 128, 1, 0, {{"seconds_per_batch", 0.5}, {"samples_per_s", 256.0}}));
  const report::ReportOutcome out = report_without_plots(dir.str());
  EXPECT_EQ(out.runs, 4);
  EXPECT_EQ(out.configurations, 2);
  EXPECT_EQ(out.out_dir, (fs::path(dir.str()) / "report").string());

  const auto rows = read_csv(dir.file("report/time.csv"));
  ASSERT_EQ(rows.size(), 2u);
  const CsvRow& r = row_of(rows, "lenet", 1, 64);
  EXPECT_EQ(r.at("runs"), "3");
  const double mean = (spb[0] + spb[1] + spb[2]) / 3;
  EXPECT_DOUBLE_EQ(std::stod(r.at("seconds_per_batch_mean")), mean);
  EXPECT_DOUBLE_EQ(std::stod(r.at("seconds_per_batch_std")), sample_std(spb));
  EXPECT_DOUBLE_EQ(std::stod(r.at("samples_per_s_mean")), (64 / spb[0] + 64 / spb[1] + 64 / spb[2]) / 3);
  EXPECT_DOUBLE_EQ(std::stod(r.at("forward_seconds_per_batch_mean")), mean / 4);
  EXPECT_DOUBLE_EQ(std::stod(r.at("backward_whole_seconds_mean")), mean / 2 * 1000);
  // One run: a mean and no spread.
  const CsvRow& single = row_of(rows, "lenet", 1, 128);
  EXPECT_EQ(single.at("runs"), "1");
  EXPECT_EQ(single.at("seconds_per_batch_mean"), "0.5");
  EXPECT_EQ(single.at("seconds_per_batch_std"), "");
  EXPECT_EQ(single.at("forward_seconds_per_batch_mean"), "");  // null -> empty

  const std::string md = slurp(dir.file("report/time.md"));
  // Markdown in the unit that fits the column (up to 0.5 s: ms); the CSV above in seconds.
  EXPECT_NE(md.find("step ms/batch"), std::string::npos) << md;
  EXPECT_NE(md.find(report::format_stat(report::stat_of({125, 250, 200}))), std::string::npos) << md;
  EXPECT_NE(md.find("time_forward_s"), std::string::npos) << "the note says where forward/backward came from";
  EXPECT_EQ(md.find("variant"), std::string::npos) << "no variant column when only net/batch/GPUs vary";
}

TEST(Report, NullEnergyIsADashAnEmptyFieldAndANoteSayingWhy) {
  TempDir dir;
  RunResults r = synthetic_run("lenet", 64, 1, 0,
                               {{"seconds_per_batch", 0.1},
                                {"joules_per_batch", std::monostate{}},
                                {"watts", std::monostate{}},
                                {"whole_training_joules", std::monostate{}},
                                {"test_top1", std::monostate{}}});
  r.methods["joules_per_batch"] = "unavailable: no NVML and RAPL not readable";
  write_run(dir.str(), r);
  report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/energy.csv"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].at("joules_per_batch_mean"), "");
  EXPECT_EQ(rows[0].at("joules_per_batch_std"), "");
  EXPECT_EQ(rows[0].count("forward_joules_per_batch_mean"), 0u) << "optional columns only when present";
  const std::string md = slurp(dir.file("report/energy.md"));
  EXPECT_NE(md.find("| lenet | 1 | 64 | 1 | — | — | — |"), std::string::npos) << md;
  EXPECT_NE(md.find("Every value in this table is null"), std::string::npos) << md;
  EXPECT_NE(md.find("CPU run without NVML/RAPL"), std::string::npos) << md;
  EXPECT_NE(md.find("unavailable: no NVML and RAPL not readable"), std::string::npos) << md;
  EXPECT_NE(slurp(dir.file("report/accuracy.md")).find("—"), std::string::npos);
  EXPECT_EQ(read_csv(dir.file("report/accuracy.csv"))[0].at("top1_percent_mean"), "");
}

TEST(Report, LowestEdpPerNetworkIsMarkedAndUnitsAreKsAndMj) {
  TempDir dir;
  auto run = [&](const std::string& net, int batch, int n, double s, double j) {
    write_run(dir.str(),
              synthetic_run(net, batch, n, 0,
                            {{"whole_training_seconds", s}, {"whole_training_joules", j}, {"edp_training_js", s * j}}));
  };
  run("a", 64, 1, 2000, 3e6);
  run("a", 128, 1, 1000, 2e6);  // best of a
  run("b", 64, 1, 5000, 1e6);   // only one of b: best
  report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/whole.csv"));
  EXPECT_EQ(row_of(rows, "a", 1, 64).at("best_edp"), "0");
  EXPECT_EQ(row_of(rows, "a", 1, 128).at("best_edp"), "1");
  EXPECT_EQ(row_of(rows, "b", 1, 64).at("best_edp"), "1");
  EXPECT_DOUBLE_EQ(std::stod(row_of(rows, "a", 1, 64).at("whole_ks_mean")), 2.0);
  EXPECT_DOUBLE_EQ(std::stod(row_of(rows, "a", 1, 64).at("whole_mj_mean")), 3.0);
  EXPECT_DOUBLE_EQ(std::stod(row_of(rows, "a", 1, 64).at("edp_mj_ks_mean")), 6.0);
  const std::string md = slurp(dir.file("report/whole.md"));
  EXPECT_NE(md.find("| a | 1 | 128 | 1 | 1.000 | 2.000 | 2.000 | ★ |"), std::string::npos) << md;
}

TEST(Report, DifferentIdentityKeysAreSeparateConfigurationsWithAVariantColumn) {
  TempDir dir;
  RunResults overlap = synthetic_run("lenet", 64, 2, 0, {{"samples_per_s", 100.0}});
  RunResults serial = synthetic_run("lenet", 64, 2, 1, {{"samples_per_s", 80.0}});
  serial.run_id = "serial";
  serial.summary.allreduce_overlap = 0.0;
  write_run(dir.str(), overlap);
  write_run(dir.str(), serial);
  const auto out = report_without_plots(dir.str());
  EXPECT_EQ(out.configurations, 2);
  const auto rows = read_csv(dir.file("report/time.csv"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("variant"), "allreduce_overlap=0");
  EXPECT_EQ(rows[1].at("variant"), "allreduce_overlap=1");
  EXPECT_EQ(rows[0].at("samples_per_s_mean"), "80");
}

// The variant column lists keys that vary within a network: each network on its own dataset is none...
TEST(Report, KeysThatDifferOnlyBetweenNetworksAreNoVariant) {
  TempDir dir;
  for (int n : {1, 2}) {
    write_run(dir.str(), synthetic_run("net_a", 64, n, 0, {{"samples_per_s", 100.0 * n}}));
    RunResults b = synthetic_run("net_b", 64, n, 0, {{"samples_per_s", 50.0 * n}});
    b.summary.data = std::string("fashion-mnist");
    write_run(dir.str(), b);
  }
  EXPECT_EQ(report_without_plots(dir.str()).configurations, 4);
  for (const char* table : {"time", "scaling", "by_gpus"}) {
    const auto rows = read_csv(dir.file(std::string("report/") + table + ".csv"));
    ASSERT_FALSE(rows.empty()) << table;
    EXPECT_EQ(rows[0].count("variant"), 0u) << table;
  }
  EXPECT_EQ(slurp(dir.file("report/report.md")).find("| variant |"), std::string::npos);
}

// ... but two allreduce modes of one network are, and only that network's rows name them.
TEST(Report, KeysThatDifferWithinANetworkAreItsVariant) {
  TempDir dir;
  write_run(dir.str(), synthetic_run("net_a", 64, 1, 0, {{"samples_per_s", 100.0}}));
  write_run(dir.str(), synthetic_run("net_a", 64, 2, 0, {{"samples_per_s", 190.0}}));
  RunResults serial = synthetic_run("net_a", 64, 2, 1, {{"samples_per_s", 170.0}});
  serial.summary.allreduce_overlap = 0.0;
  write_run(dir.str(), serial);
  for (int n : {1, 2}) {
    RunResults b = synthetic_run("net_b", 64, n, 0, {{"samples_per_s", 50.0 * n}});
    b.summary.data = std::string("fashion-mnist");
    write_run(dir.str(), b);
  }
  report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/time.csv"));
  ASSERT_EQ(rows.size(), 5u);
  std::map<std::string, std::string> variants;  // "net gpus samples/s" -> variant
  for (const CsvRow& r : rows)
    variants[r.at("net") + " " + r.at("gpus") + " " + r.at("samples_per_s_mean")] = r.at("variant");
  EXPECT_EQ(variants.at("net_a 1 100"), "");  // a single rank has no allreduce mode
  EXPECT_EQ(variants.at("net_a 2 190"), "allreduce_overlap=1");
  EXPECT_EQ(variants.at("net_a 2 170"), "allreduce_overlap=0");
  EXPECT_EQ(variants.at("net_b 1 50"), "");
  EXPECT_EQ(variants.at("net_b 2 100"), "") << "net_b has one mode and one dataset";

  const auto wide = read_csv(dir.file("report/by_gpus.csv"));
  ASSERT_EQ(wide.size(), 3u);
  EXPECT_EQ(wide[0].at("variant"), "allreduce_overlap=0");
  EXPECT_EQ(wide[1].at("variant"), "allreduce_overlap=1");
  EXPECT_EQ(wide[2].at("net"), "net_b");
  EXPECT_EQ(wide[2].at("variant"), "");
}

TEST(Report, PartialAndUnrelatedFoldersAreIgnored) {
  TempDir dir;
  const std::string done = write_run(dir.str(), synthetic_run("lenet", 64, 1, 0, {{"samples_per_s", 10.0}}));
  fs::copy(done, dir.file("e/killed.partial"), fs::copy_options::recursive);
  fs::create_directories(dir.file("e/notes"));
  const auto out = report_without_plots(dir.str());
  EXPECT_EQ(out.runs, 1);
  // A second report over the same folder does not read its own output as runs.
  EXPECT_EQ(report_without_plots(dir.str()).runs, 1);
}

TEST(Report, BadResultsDirIsAConfigError) {
  TempDir dir;
  EXPECT_THROW(report_without_plots(dir.file("missing")), ConfigError);
  EXPECT_THROW(report_without_plots(dir.str()), ConfigError);  // no runs
  report::ReportOptions o;
  o.results_dir = dir.str();
  o.formats = {"xlsx"};
  EXPECT_THROW(report::write_report(o), ConfigError);
}

TEST(Report, ReportMdLinksEveryTableAndCsvOnlyWritesNoMarkdownTables) {
  TempDir dir;
  write_run(dir.str(), synthetic_run("lenet", 64, 1, 0, {{"samples_per_s", 10.0}}));
  report::ReportOptions o;
  o.results_dir = dir.str();
  o.out_dir = dir.file("out");
  o.plots = false;
  o.formats = {"csv"};
  report::write_report(o);
  const std::string md = slurp(dir.file("out/report.md"));
  for (const char* t : {"time", "energy", "whole", "efficiency", "accuracy", "scaling", "by_gpus", "phases"}) {
    EXPECT_TRUE(fs::exists(dir.file(std::string("out/") + t + ".csv"))) << t;
    EXPECT_FALSE(fs::exists(dir.file(std::string("out/") + t + ".md"))) << t;
    EXPECT_NE(md.find(std::string("(") + t + ".csv)"), std::string::npos) << t;
    EXPECT_NE(md.find(std::string("<a id=\"") + t + "\">"), std::string::npos) << t;
  }
  EXPECT_NE(md.find("--no-plots"), std::string::npos);
}

// A title that cites a table of a source document names the document: "study Table 4" alone leaves
// the reader to guess which of the five; report.md names the page that maps them to commands.
TEST(Report, TitlesCiteTheSourceStudyByNameAndReportMdNamesTheMap) {
  TempDir dir;
  write_run(dir.str(), synthetic_run("lenet", 64, 1, 0, {{"samples_per_s", 10.0}}));
  report::ReportOptions o;
  o.results_dir = dir.str();
  o.plots = false;
  report::write_report(o);
  const std::string md = slurp(dir.file("report/report.md"));
  for (const char* cite : {"Time (Castro et al., Tables 4/7)", "Energy (Castro et al., Tables 5/8)",
                           "(Castro et al., Tables 6/9)", "Efficiency (Castro et al., Table 11)",
                           "Accuracy (Castro et al., Tables 12/13)"})
    EXPECT_NE(md.find(cite), std::string::npos) << cite;
  EXPECT_EQ(md.find("study Table"), std::string::npos);
  EXPECT_NE(md.find("`docs/seeds.md`"), std::string::npos);
  EXPECT_NE(slurp(dir.file("report/time.md")).find("## Time (Castro et al., Tables 4/7)"), std::string::npos);
}

TEST(Report, MissingPythonFailsAfterWritingTheTables) {
  TempDir dir;
  write_run(dir.str(), synthetic_run("lenet", 64, 1, 0, {{"samples_per_s", 10.0}}));
  report::ReportOptions o;
  o.results_dir = dir.str();
  o.python = dir.file("no-such-python3");
  try {
    report::write_report(o);
    FAIL() << "expected a RuntimeError";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("--no-plots"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(dir.file("report/time.md")));
  EXPECT_TRUE(fs::exists(dir.file("report/report.md")));
}

}  // namespace
}  // namespace cnnscale
