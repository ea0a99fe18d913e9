// `cnnscale report`'s GPU models compared (Castro et al.'s Table 10 and Figs. 5-8) on synthetic runs
// that recorded GPU names: absent with one model; with two, a row per configuration both measured,
// each model's figures and the % against the reference; mixed-model jobs left out; the reference
// is the model of the most rows; the figure drawn.
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/temp_dir.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/report.hpp"

namespace cnnscale {
namespace {

using testing::CsvRow;
using testing::read_csv;
using testing::report_without_plots;
using testing::row_of;
using testing::sample_std;
using testing::slurp;
using testing::synthetic_run;
using testing::TempDir;
using testing::write_run;

// A run of `net` at `batch` on `gpus` GPUs named `names` (one per rank, comma-separated: a mix where
// they differ), step time `step`; forward, backward and joules follow from it.
RunResults model_run(const std::string& net, int batch, int gpus, int repeat, const std::string& names, double step) {
  RunResults r = synthetic_run(net, batch, gpus, repeat,
                               {{"seconds_per_batch", step},
                                {"samples_per_s", batch / step},
                                {"time_forward_s", 0.3 * step},
                                {"time_backward_s", 0.6 * step},
                                {"joules_per_batch", 300 * gpus * step}});
  r.summary.device = std::string("gpu");
  r.summary.gpu_names = names;
  // Runs of one configuration on two models would otherwise share a folder.
  std::string tag;
  for (char c : names) tag += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  r.run_id += "-" + tag;
  return r;
}

std::string named_gpus(const std::string& model, int gpus) {
  std::string out;
  for (int k = 0; k < gpus; ++k) out.append(k ? "," : "").append(model);
  return out;
}

const std::string kModelA100 = "NVIDIA A100", kModelH100 = "NVIDIA H100";

// (reference − model) / reference in % of the means, and its first-order std.
std::pair<double, double> expected_percent_less(const std::vector<double>& model,
                                                const std::vector<double>& reference) {
  auto mean = [](const std::vector<double>& v) { return (v[0] + v[1]) / v.size(); };
  const double ratio = mean(model) / mean(reference);
  const double rel = std::hypot(sample_std(model) / mean(model), sample_std(reference) / mean(reference));
  return {100 * (1 - ratio), 100 * ratio * rel};
}

TEST(ReportModels, OneGpuModelHasNoComparisonTable) {
  TempDir dir;
  for (int gpus : {1, 2})
    for (int rep = 0; rep < 2; ++rep)
      write_run(dir.str(), model_run("lenet", 64, gpus, rep, named_gpus(kModelH100, gpus), 0.01));
  // A mix of models is no model of its own: it does not make two.
  write_run(dir.str(), model_run("lenet", 64, 2, 0, kModelH100 + "," + kModelA100, 0.02));
  const report::ReportOutcome out = report_without_plots(dir.str());
  EXPECT_FALSE(std::filesystem::exists(dir.file("report/gpu_models.csv")));
  EXPECT_EQ(slurp(out.report_md).find("GPU models compared"), std::string::npos);
}

TEST(ReportModels, TwoModelsGiveARowPerSharedConfigurationWithEachModelsFiguresAndThePercent) {
  TempDir dir;
  // Both models: batch 64 on 1 GPU and batch 128 on 2 GPUs, two repeats each. Only the H100: batch 256
  // on 1 GPU. A job of both models at batch 64 on 2 GPUs: left out.
  const std::map<std::string, std::vector<double>> a100_steps = {{"64-1", {0.020, 0.022}}, {"128-2", {0.030, 0.033}}};
  const std::map<std::string, std::vector<double>> h100_steps = {{"64-1", {0.010, 0.012}}, {"128-2", {0.036, 0.034}}};
  for (const auto& [config, batch, gpus] : {std::tuple{"64-1", 64, 1}, std::tuple{"128-2", 128, 2}})
    for (int rep = 0; rep < 2; ++rep) {
      write_run(dir.str(),
                model_run("lenet", batch, gpus, rep, named_gpus(kModelA100, gpus), a100_steps.at(config)[rep]));
      write_run(dir.str(),
                model_run("lenet", batch, gpus, rep, named_gpus(kModelH100, gpus), h100_steps.at(config)[rep]));
    }
  write_run(dir.str(), model_run("lenet", 256, 1, 0, kModelH100, 0.05));
  write_run(dir.str(), model_run("lenet", 64, 2, 0, kModelH100 + "," + kModelA100, 0.02));
  const report::ReportOutcome out = report_without_plots(dir.str());

  const std::vector<CsvRow> rows = read_csv(dir.file("report/gpu_models.csv"));
  ASSERT_EQ(rows.size(), 2u) << "rows only where both models ran, no row for the mixed job";
  // Equal rows each: the reference is the first by name.
  for (const CsvRow& r : rows) {
    EXPECT_EQ(r.at("gpu_m1"), kModelA100);
    EXPECT_EQ(r.at("gpu_m2"), kModelH100);
    EXPECT_EQ(r.at("runs_m1"), "2");
    EXPECT_EQ(r.at("runs_m2"), "2");
    EXPECT_EQ(r.count("seconds_per_batch_vs_reference_percent_m1_mean"), 0u) << "the reference has no % of its own";
    EXPECT_EQ(r.count("forward_joules_per_batch_m1_mean"), 0u) << "no isolated loops, no columns of them";
  }
  // Bounds: the CSV prints each double's shortest round-trip form (csv_number), so a value read back is
  // the double the report computed; that is a mean of two doubles, a sample std or a ratio of means,
  // each a few roundings (a few 1e-16 relative) off the same expression here. Times here are 0.01 to
  // 0.05 s (1e-12 absolute: at least 2e-11 relative), joules and percents below 1e3 (1e-9 absolute: at
  // least 1e-12 relative), both far above those roundings; and every figure compared differs from a
  // wrong one (another model's, another sign) by more than 1 % of itself.
  for (const auto& [config, batch, gpus] : {std::tuple{"64-1", 64, 1}, std::tuple{"128-2", 128, 2}}) {
    const CsvRow& r = row_of(rows, "lenet", gpus, batch);
    const std::vector<double>&a = a100_steps.at(config), &h = h100_steps.at(config);
    EXPECT_NEAR(std::stod(r.at("seconds_per_batch_m1_mean")), (a[0] + a[1]) / 2, 1e-12);
    EXPECT_NEAR(std::stod(r.at("seconds_per_batch_m2_std")), sample_std(h), 1e-12);
    EXPECT_NEAR(std::stod(r.at("forward_seconds_per_batch_m2_mean")), 0.3 * (h[0] + h[1]) / 2, 1e-12);
    EXPECT_NEAR(std::stod(r.at("backward_seconds_per_batch_m1_mean")), 0.6 * (a[0] + a[1]) / 2, 1e-12);
    EXPECT_NEAR(std::stod(r.at("joules_per_batch_m2_mean")), 300 * gpus * (h[0] + h[1]) / 2, 1e-9);
    const auto [percent, spread] = expected_percent_less(h, a);
    for (const std::string figure :
         {"seconds_per_batch", "forward_seconds_per_batch", "backward_seconds_per_batch", "joules_per_batch"}) {
      // Every figure is a multiple of the step here: the same % for each.
      EXPECT_NEAR(std::stod(r.at(figure + "_vs_reference_percent_m2_mean")), percent, 1e-9) << figure;
      EXPECT_NEAR(std::stod(r.at(figure + "_vs_reference_percent_m2_std")), spread, 1e-9) << figure;
    }
  }
  // Faster on the H100 at 64-1 (positive), slower at 128-2 (negative): the study's sign.
  EXPECT_GT(std::stod(row_of(rows, "lenet", 1, 64).at("seconds_per_batch_vs_reference_percent_m2_mean")), 40);
  EXPECT_LT(std::stod(row_of(rows, "lenet", 2, 128).at("seconds_per_batch_vs_reference_percent_m2_mean")), 0);

  const std::string md = slurp(dir.file("report/gpu_models.md"));
  EXPECT_NE(md.find("Reference: NVIDIA A100"), std::string::npos) << md;
  EXPECT_NE(md.find("(reference − model) / reference × 100"), std::string::npos) << md;
  EXPECT_NE(md.find("all GPUs of the job"), std::string::npos) << md;
  EXPECT_NE(md.find("in-step"), std::string::npos) << md;
  EXPECT_NE(md.find("| GPU model (reference) |"), std::string::npos) << md;
  EXPECT_NE(md.find("1 configuration(s) measured on one model only"), std::string::npos) << md;
  const std::string report = slurp(out.report_md);
  EXPECT_NE(report.find("[GPU models compared (Castro et al., Table 10)](#gpu_models)"), std::string::npos);
  EXPECT_NE(report.find("[gpu_models.csv](gpu_models.csv)"), std::string::npos);
}

TEST(ReportModels, TheReferenceIsTheModelOfTheMostRowsAndAModelThatDidNotRunARowHasNoFigures) {
  TempDir dir;
  const std::string l40s = "NVIDIA L40S";
  // 64-1 on all three models, 128-1 on the H100 and the L40S: the H100 and the L40S are in two rows
  // each, the A100 in one; of the two, the H100 comes first by name.
  for (const std::string& m : {kModelA100, kModelH100, l40s})
    write_run(dir.str(), model_run("lenet", 64, 1, 0, m, 0.01));
  for (const std::string& m : {kModelH100, l40s}) write_run(dir.str(), model_run("lenet", 128, 1, 0, m, 0.02));
  report_without_plots(dir.str());
  const std::vector<CsvRow> rows = read_csv(dir.file("report/gpu_models.csv"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("gpu_m1"), kModelH100);
  EXPECT_EQ(rows[0].at("gpu_m2"), kModelA100);
  EXPECT_EQ(rows[0].at("gpu_m3"), l40s);
  const CsvRow& b128 = row_of(rows, "lenet", 1, 128);
  EXPECT_EQ(b128.at("runs_m2"), "0");
  EXPECT_EQ(b128.at("seconds_per_batch_m2_mean"), "");
  EXPECT_EQ(b128.at("seconds_per_batch_vs_reference_percent_m2_mean"), "");
  EXPECT_NEAR(std::stod(b128.at("seconds_per_batch_vs_reference_percent_m3_mean")), 0, 1e-12);
}

// The study's Table 10 has forward's and backward's joules apart: measure=phases' isolated loops.
TEST(ReportModels, IsolatedLoopJoulesOfForwardAndBackwardAreComparedWhereRunsHaveThem) {
  TempDir dir;
  for (const auto& [model, forward] : {std::pair{kModelA100, 2.0}, std::pair{kModelH100, 1.5}}) {
    RunResults r = model_run("lenet", 64, 1, 0, model, 0.01);
    r.summary.measure = std::string("phases");
    r.summary.energy_forward_j = forward;
    r.summary.energy_backward_j = 2 * forward;
    write_run(dir.str(), r);
  }
  report_without_plots(dir.str());
  const std::vector<CsvRow> rows = read_csv(dir.file("report/gpu_models.csv"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].at("forward_joules_per_batch_m1_mean"), "2");
  EXPECT_EQ(rows[0].at("backward_joules_per_batch_m2_mean"), "3");
  EXPECT_NEAR(std::stod(rows[0].at("forward_joules_per_batch_vs_reference_percent_m2_mean")), 25, 1e-9);
  EXPECT_NEAR(std::stod(rows[0].at("backward_joules_per_batch_vs_reference_percent_m2_mean")), 25, 1e-9);
  const std::string md = slurp(dir.file("report/gpu_models.md"));
  EXPECT_NE(md.find("| forward isolated-loop J/batch |"), std::string::npos) << md;
  EXPECT_NE(md.find("| forward isolated-loop joules vs reference (%) |"), std::string::npos) << md;
}

TEST(ReportModels, TwoModelsWithoutASharedConfigurationHaveATableThatSaysSo) {
  TempDir dir;
  write_run(dir.str(), model_run("lenet", 64, 1, 0, kModelA100, 0.01));
  write_run(dir.str(), model_run("lenet", 128, 1, 0, kModelH100, 0.01));
  report_without_plots(dir.str());
  EXPECT_TRUE(read_csv(dir.file("report/gpu_models.csv")).empty());
  EXPECT_NE(slurp(dir.file("report/gpu_models.md")).find("No configuration was measured on two or more"),
            std::string::npos);
}

bool matplotlib_for_models() {
  return std::system("/usr/bin/python3 -c 'import matplotlib, numpy, h5py' >/dev/null 2>&1") == 0;
}

TEST(ReportModels, TheFigureHasATimeAndAJoulesPanelPerNetworkAndABarPerModel) {
  if (!matplotlib_for_models()) GTEST_SKIP() << "/usr/bin/python3 cannot import matplotlib/numpy/h5py";
  TempDir dir;
  for (const std::string net : {"lenet", "convnet"})
    for (int gpus : {1, 2})
      for (int rep = 0; rep < 2; ++rep) {
        write_run(dir.str(), model_run(net, 64 * gpus, gpus, rep, named_gpus(kModelA100, gpus), 0.02 + 0.001 * rep));
        write_run(dir.str(), model_run(net, 64 * gpus, gpus, rep, named_gpus(kModelH100, gpus), 0.012 + 0.001 * rep));
      }
  report::ReportOptions o;
  o.results_dir = dir.str();
  const report::ReportOutcome out = report::write_report(o);
  const std::string png = dir.file("report/" + report::kGpuModelsFigure);
  ASSERT_NE(std::find(out.figures.begin(), out.figures.end(), png), out.figures.end());
  EXPECT_NE(slurp(out.report_md).find("](" + report::kGpuModelsFigure + ")"), std::string::npos);
  const std::string words = slurp(png);  // the PNG's Description holds its titles, axes and legend
  EXPECT_EQ(words.substr(1, 3), "PNG");
  for (const std::string net : {"lenet", "convnet"}) {
    EXPECT_NE(words.find("axes: " + net + ": time per batch"), std::string::npos) << net;
    EXPECT_NE(words.find("axes: " + net + ": joules per batch (all GPUs of the job)"), std::string::npos) << net;
  }
  EXPECT_NE(words.find("x: batch-GPUs"), std::string::npos);
  EXPECT_NE(words.find("legend: NVIDIA A100 (reference), NVIDIA H100"), std::string::npos);
  EXPECT_NE(words.find("n = 2 runs each"), std::string::npos);

  // One model: no table, so no figure and no line about one.
  const std::string one = dir.file("one");  // a second TempDir would share the test's name
  write_run(one, model_run("lenet", 64, 1, 0, kModelH100, 0.01));
  o.results_dir = one;
  const report::ReportOutcome single = report::write_report(o);
  EXPECT_FALSE(std::filesystem::exists(one + "/report/" + report::kGpuModelsFigure));
  for (const auto& [name, why] : single.figures_left_out) EXPECT_NE(name, report::kGpuModelsFigure);
}

}  // namespace
}  // namespace cnnscale
