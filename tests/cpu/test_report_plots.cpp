// `cnnscale report` figures and command line: the PNG files are produced by scripts/report_plots.py
// (skipped only when /usr/bin/python3 lacks matplotlib; setup.sh installs it, so CI runs them),
// the power trace of a GPU-like run (2 GPUs, and 8 as small multiples), a 1/2/4/8-GPU scaling
// sweep, and the CLI's exit codes (2 for a bad RESULTS_DIR, one line).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/report.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using testing::gpu_run;
using testing::power_series;
using testing::read_csv;
using testing::run_cnnscale;
using testing::scaling_run;
using testing::slurp;
using testing::synthetic_run;
using testing::TempDir;
using testing::write_run;

bool python_has_matplotlib() {
  return std::system("/usr/bin/python3 -c 'import matplotlib, numpy, h5py' >/dev/null 2>&1") == 0;
}

bool is_png(const std::string& path) {
  const std::string head = slurp(path).substr(0, 8);
  return head == std::string("\x89PNG\r\n\x1a\n", 8);
}

// A small two-network sweep: 1 and 2 ranks, two batches, two repeats; one GPU-like run has power.
void write_sweep(const std::string& root) {
  for (const std::string net : {"lenet", "convnet"})
    for (int batch : {64, 128})
      for (int n : {1, 2})
        for (int rep = 0; rep < 2; ++rep) {
          const double spb = 0.01 * batch / 64 / (n == 1 ? 1 : 1.6) * (1 + 0.05 * rep);
          RunResults r = synthetic_run(net, batch, n, rep,
                                       {{"seconds_per_batch", spb},
                                        {"samples_per_s", batch / spb},
                                        {"joules_per_batch", 30 * spb * n},
                                        {"time_data_s", spb * 0.1},
                                        {"time_forward_s", spb * 0.3},
                                        {"time_backward_s", spb * 0.5},
                                        {"time_allreduce_s", n == 1 ? 0.0 : spb * 0.05},
                                        {"time_update_s", spb * 0.05},
                                        {"time_total_s", spb}});
          write_run(root, r);
        }
  RunResults gpu = synthetic_run("lenet", 64, 2, 9, {{"seconds_per_batch", 0.005}, {"samples_per_s", 12800.0}});
  gpu.summary.device = std::string("gpu");
  gpu.summary.gpu_names = std::string("NVIDIA H100,NVIDIA H100");
  for (int k = 0; k < 2; ++k) {
    PowerSeries p;
    p.rank = k;
    for (int i = 0; i < 20; ++i) {
      p.t_s.push_back(0.1 * i);
      p.power_w.push_back(300 + 10 * k + i);
      p.avg_power_w.push_back(kMissing);
      p.energy_mj.push_back(kMissing);
      p.sm_clock_mhz.push_back(kMissing);
      p.temperature_c.push_back(kMissing);
    }
    gpu.power.push_back(p);
  }
  write_run(root, gpu);
}

TEST(ReportPlots, EveryFigureIsAPngAndReportMdShowsThem) {
  if (!python_has_matplotlib()) GTEST_SKIP() << "/usr/bin/python3 cannot import matplotlib/numpy/h5py";
  TempDir dir;
  write_sweep(dir.str());
  report::ReportOptions o;
  o.results_dir = dir.str();
  const report::ReportOutcome out = report::write_report(o);
  // Batch 128 on 2 GPUs is batch 64 per GPU, which has its 1-GPU run: the weak-scaling figure too.
  std::vector<std::string> names = report::kFigureNames;
  names.push_back(report::kWeakScalingFigure);
  ASSERT_EQ(out.figures.size(), names.size());
  const std::string md = slurp(out.report_md);
  for (const std::string& name : names) {
    EXPECT_TRUE(is_png(dir.file("report/" + name))) << name;
    EXPECT_NE(md.find("](" + name + ")"), std::string::npos) << name;
  }
  // The run with the most GPUs that has power samples is the one traced.
  EXPECT_NE(md.find("lenet-b64-n2-r9"), std::string::npos);
  for (const auto& e : fs::directory_iterator(dir.file("report")))
    EXPECT_FALSE(e.path().string().ends_with(".tmp") || e.path().filename().string().starts_with(".")) << e.path();
  // Speedup of the variant-free sweep uses the 1-GPU rows.
  EXPECT_EQ(read_csv(dir.file("report/scaling.csv")).size(), 9u);
}

// The scaling study with an 8-GPU point: two networks, two batches, 1/2/4/8 GPUs, two repeats, one
// configuration without its 8-GPU run, and an 8-GPU run with a power trace per GPU.
TEST(ReportPlots, EightGpuSweepGivesEveryFigure) {
  if (!python_has_matplotlib()) GTEST_SKIP() << "/usr/bin/python3 cannot import matplotlib/numpy/h5py";
  TempDir dir;
  for (const std::string net : {"net_a", "net_bb"})
    for (int batch : {64, 128})
      for (int n : {1, 2, 4, 8})
        for (int rep = 0; rep < 2; ++rep)
          if (net != "net_bb" || batch != 128 || n != 8) write_run(dir.str(), scaling_run(net, batch, n, rep));
  RunResults gpu = scaling_run("net_a", 64, 8, 9);
  gpu.summary.device = std::string("gpu");
  std::string names;
  for (int k = 0; k < 8; ++k) {
    names += (k ? "," : "") + std::string("NVIDIA H100");
    gpu.power.push_back(power_series(k, 30, 300));
  }
  gpu.summary.gpu_names = names;
  write_run(dir.str(), gpu);

  report::ReportOptions o;
  o.results_dir = dir.str();
  const report::ReportOutcome out = report::write_report(o);
  // These runs have no phase timings: that figure is left out with a line. Batch 128 on 2 GPUs has
  // the 1-GPU run of its per-GPU 64: the weak-scaling figure is drawn.
  ASSERT_EQ(out.figures.size(), report::kFigureNames.size());
  for (const std::string& name : report::kFigureNames)
    EXPECT_EQ(is_png(dir.file("report/" + name)), name != "phases.png") << name;
  EXPECT_TRUE(is_png(dir.file("report/" + report::kWeakScalingFigure)));
  EXPECT_NE(slurp(out.report_md).find("- `phases.png` not drawn: no phase timings were recorded"), std::string::npos);
  EXPECT_NE(slurp(out.report_md).find("net_a-b64-n8-r9"), std::string::npos) << "the 8-GPU run's power is traced";
  const auto by_gpus = read_csv(dir.file("report/by_gpus.csv"));
  ASSERT_EQ(by_gpus.size(), 5u);  // the GPU run is a variant of its own (device=gpu)
  EXPECT_EQ(by_gpus[0].count("speedup_g8_mean"), 1u);
}

// A 1/2-rank sweep of `repeats` runs per configuration, on CPU or (as far as the report can tell) GPU.
void write_scaling(const std::string& root, bool gpu, int repeats) {
  for (int n : {1, 2})
    for (int rep = 0; rep < repeats; ++rep) {
      RunResults r = scaling_run("net_a", 64, n, rep);
      r.summary.time_forward_s = 0.001;
      r.summary.time_total_s = 0.002;
      write_run(root, gpu ? gpu_run(r) : r);
    }
}

TEST(ReportPlots, AFigureWithoutDataIsLeftOutWithALineNotAnImage) {
  if (!python_has_matplotlib()) GTEST_SKIP() << "/usr/bin/python3 cannot import matplotlib/numpy/h5py";
  TempDir dir;
  write_scaling(dir.str(), false, 2);
  fs::create_directories(dir.file("report"));
  { std::ofstream(dir.file("report/power_trace.png")) << "an older report's figure"; }
  report::ReportOptions o;
  o.results_dir = dir.str();
  const report::ReportOutcome out = report::write_report(o);
  // CPU runs: no power samples; no energy counters either (the synthetic runs have joules, so that one stays).
  ASSERT_EQ(out.figures_left_out.size(), 1u);
  EXPECT_EQ(out.figures_left_out[0].first, "power_trace.png");
  EXPECT_EQ(out.figures.size(), report::kFigureNames.size() - 1);
  EXPECT_FALSE(fs::exists(dir.file("report/power_trace.png"))) << "no stale image is left behind";
  const std::string md = slurp(out.report_md);
  EXPECT_EQ(md.find("](power_trace.png)"), std::string::npos) << md;
  EXPECT_NE(md.find("- `power_trace.png` not drawn: no power samples in net_a-b64-n2-r"), std::string::npos) << md;
  for (const std::string& path : out.figures) EXPECT_TRUE(is_png(path)) << path;
}

// What the figures say, read back from the PNG's Description (report_plots.py stores its titles,
// axis labels and legends there).
TEST(ReportPlots, FiguresNameRanksOrGpusAndHowManyRunsEachMeanHas) {
  if (!python_has_matplotlib()) GTEST_SKIP() << "/usr/bin/python3 cannot import matplotlib/numpy/h5py";
  TempDir dir;  // one per test: a second would share its name
  const std::string cpu = dir.file("cpu"), gpu = dir.file("gpu");
  write_scaling(cpu, false, 2);
  write_scaling(gpu, true, 1);
  for (const std::string& d : {cpu, gpu}) {
    report::ReportOptions o;
    o.results_dir = d;
    report::write_report(o);
  }
  auto png = [](const std::string& root, const std::string& name) {
    return slurp(std::string(root).append("/report/").append(name));
  };
  const std::string cpu_bars = png(cpu, "time_per_batch.png");
  EXPECT_NE(cpu_bars.find("x: batch-ranks"), std::string::npos);
  EXPECT_NE(cpu_bars.find("legend: 1 rank, 2 ranks"), std::string::npos);
  EXPECT_NE(cpu_bars.find("full training step"), std::string::npos);
  EXPECT_NE(cpu_bars.find("n = 2 runs each"), std::string::npos);
  EXPECT_EQ(cpu_bars.find("GPU"), std::string::npos);
  const std::string cpu_scaling = png(cpu, "scaling.png");
  EXPECT_NE(cpu_scaling.find("x: ranks"), std::string::npos);
  EXPECT_EQ(cpu_scaling.find("GPU"), std::string::npos);
  EXPECT_NE(png(cpu, "phases.png").find("x: batch-ranks"), std::string::npos);

  const std::string gpu_bars = png(gpu, "time_per_batch.png");
  EXPECT_NE(gpu_bars.find("x: batch-GPUs"), std::string::npos);
  EXPECT_NE(gpu_bars.find("legend: 1 GPU, 2 GPUs"), std::string::npos);
  EXPECT_NE(gpu_bars.find("1 run each, no error bars"), std::string::npos);
  EXPECT_NE(png(gpu, "scaling.png").find("x: GPUs"), std::string::npos);
}

TEST(ReportPlots, CommandLineWritesTheReportAndRejectsABadDirectory) {
  if (!python_has_matplotlib()) GTEST_SKIP() << "/usr/bin/python3 cannot import matplotlib/numpy/h5py";
  TempDir dir;
  write_sweep(dir.str());
  auto ok = run_cnnscale({"report", dir.str(), "--out", dir.file("rep"), "--power-run", "lenet-b64-n1-r0"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("report.md"), std::string::npos) << ok.out;
  // The chosen run is a CPU run: no power samples, so no power figure but a line naming the run.
  for (const std::string& name : report::kFigureNames)
    EXPECT_EQ(is_png(dir.file("rep/" + name)), name != "power_trace.png") << name;
  const std::string md = slurp(dir.file("rep/report.md"));
  EXPECT_NE(md.find("- `power_trace.png` not drawn: no power samples in lenet-b64-n1-r0"), std::string::npos) << md;

  auto bad = run_cnnscale({"report", dir.file("nowhere")});
  EXPECT_EQ(bad.exit_code, 2);
  ASSERT_EQ(bad.err_lines().size(), 1u) << bad.err;
  EXPECT_NE(bad.err.find("does not exist"), std::string::npos) << bad.err;

  auto no_python = run_cnnscale({"report", dir.str(), "--python", dir.file("nopython")});
  EXPECT_EQ(no_python.exit_code, 1);
  EXPECT_NE(no_python.err.find("--no-plots"), std::string::npos) << no_python.err;
  auto skipped = run_cnnscale({"report", dir.str(), "--python", dir.file("nopython"), "--no-plots"});
  EXPECT_EQ(skipped.exit_code, 0) << skipped.err;
}

}  // namespace
}  // namespace cnnscale
