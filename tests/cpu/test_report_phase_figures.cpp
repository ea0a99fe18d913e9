// The report's two measurements of forward and backward under measure=phases: in-step time (phase
// timers inside the training step) and the isolated loops, named apart in headers, captions and CSV
// columns, never summed as a split of the step; the isolated loops' update + exchange energy, phase
// power, samples/s and whole-training joules from summary.json; the study's backward incl. exchange;
// the GFLOPS basis.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/temp_dir.hpp"
#include "cpu/test_report_util.hpp"

namespace cnnscale {
namespace {

using testing::read_csv;
using testing::report_without_plots;
using testing::row_of;
using testing::slurp;
using testing::synthetic_run;
using testing::TempDir;

// A measure=phases run whose in-step and isolated-loop figures differ, as they do on a GPU: the
// isolated forward + backward (5 + 10 ms) exceeds the step (12 ms).
RunResults phases_run(int ranks) {
  RunResults r = synthetic_run("lenet", 64, ranks, 0,
                               {{"measure", std::string("phases")},
                                {"seconds_per_batch", 0.012},
                                {"samples_per_s", 64 / 0.012},
                                {"joules_per_batch", 5.0},
                                {"watts", 5.0 / 0.012},
                                {"whole_iterations", 100.0},
                                {"time_forward_s", 0.004},
                                {"time_backward_s", 0.006},
                                {"time_total_s", 0.012},
                                {"loop_forward_s", 0.005},
                                {"loop_backward_s", 0.010},
                                {"loop_update_allreduce_s", 0.002},
                                {"energy_forward_j", 1.0},
                                {"energy_backward_j", 3.0},
                                {"energy_update_allreduce_j", 0.5},
                                {"energy_full_step_j", 4.5}});
  if (ranks > 1) r.summary.time_allreduce_s = 0.0015;
  return r;
}

double number(const testing::CsvRow& row, const std::string& column) {
  return std::stod(row.at(column));
}

TEST(ReportPhaseFigures, TimeTableNamesInStepAndIsolatedLoopApartAndNeverSumsTheLoops) {
  TempDir dir;
  testing::write_run(dir.str(), phases_run(1));
  testing::write_run(dir.str(), phases_run(2));
  report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/time.csv"));
  const auto& one = row_of(rows, "lenet", 1, 64);
  const auto& two = row_of(rows, "lenet", 2, 64);
  // The old columns hold the in-step figures on every row, measure=phases included.
  EXPECT_DOUBLE_EQ(number(one, "forward_seconds_per_batch_mean"), 0.004);
  EXPECT_DOUBLE_EQ(number(one, "backward_seconds_per_batch_mean"), 0.006);
  EXPECT_DOUBLE_EQ(number(one, "isolated_forward_seconds_per_batch_mean"), 0.005);
  EXPECT_DOUBLE_EQ(number(one, "isolated_backward_seconds_per_batch_mean"), 0.010);
  // The study's backward: in-step backward + exposed allreduce; one rank exchanges nothing.
  EXPECT_DOUBLE_EQ(number(two, "backward_with_exchange_seconds_per_batch_mean"), 0.006 + 0.0015);
  EXPECT_DOUBLE_EQ(number(one, "backward_with_exchange_seconds_per_batch_mean"), 0.006);
  // No column is the isolated forward + backward (or its whole-training projection).
  for (const auto& [column, value] : one)
    if (column.ends_with("_mean") && !value.empty()) {
      EXPECT_NE(std::stod(value), 0.005 + 0.010) << column;
      EXPECT_NE(std::stod(value), (0.005 + 0.010) * 100) << column;
    }
  const std::string md = slurp(dir.file("report/time.md"));
  for (const char* text :
       {"forward in-step", "backward in-step", "forward isolated-loop", "backward isolated-loop",
        "backward incl. exchange, in-step (study's definition)", "not parts of the step",
        "in-step backward + exposed allreduce", "Isolated-loop backward never includes the exchange"})
    EXPECT_NE(md.find(text), std::string::npos) << text << "\n" << md;
  const std::string phases = slurp(dir.file("report/phases.md"));
  EXPECT_NE(phases.find("Phase breakdown (in-step time)"), std::string::npos) << phases;
  EXPECT_NE(phases.find("isolated-loop figures (Time and Energy tables) are other measurements"), std::string::npos);
}

TEST(ReportPhaseFigures, EnergyTableHasTheIsolatedLoopsUpdateEnergyPowerAndSamplesPerSecond) {
  TempDir dir;
  testing::write_run(dir.str(), phases_run(2));
  report_without_plots(dir.str());
  const testing::CsvRow row = read_csv(dir.file("report/energy.csv")).at(0);
  EXPECT_DOUBLE_EQ(number(row, "forward_joules_per_batch_mean"), 1.0);
  EXPECT_DOUBLE_EQ(number(row, "backward_joules_per_batch_mean"), 3.0);
  EXPECT_DOUBLE_EQ(number(row, "isolated_update_exchange_joules_per_batch_mean"), 0.5);
  EXPECT_DOUBLE_EQ(number(row, "isolated_full_step_joules_per_batch_mean"), 4.5);
  // Power = the phase's joules / its isolated-loop seconds; samples/s = global batch / those seconds
  // (each computed by one division, as the report does).
  EXPECT_DOUBLE_EQ(number(row, "isolated_forward_watts_mean"), 1.0 / 0.005);
  EXPECT_DOUBLE_EQ(number(row, "isolated_backward_watts_mean"), 3.0 / 0.010);
  EXPECT_DOUBLE_EQ(number(row, "isolated_update_exchange_watts_mean"), 0.5 / 0.002);
  EXPECT_DOUBLE_EQ(number(row, "isolated_forward_samples_per_s_mean"), 64 / 0.005);
  EXPECT_DOUBLE_EQ(number(row, "isolated_backward_samples_per_s_mean"), 64 / 0.010);
  // The study's whole-training joules per phase: the isolated-loop joules per batch × whole_iterations
  // (100), beside the step's whole-training joules, which they do not replace.
  EXPECT_DOUBLE_EQ(number(row, "isolated_forward_whole_joules_mean"), 1.0 * 100);
  EXPECT_DOUBLE_EQ(number(row, "isolated_backward_whole_joules_mean"), 3.0 * 100);
  const std::string md = slurp(dir.file("report/energy.md"));
  for (const char* text : {"update + exchange isolated-loop", "add up to the isolated full-step loop, not to the step",
                           "bounds the study's backward energy from above", "forward isolated-loop whole training (J)",
                           "backward isolated-loop whole training (J)",
                           "a per-batch figure scaled to the whole training, not measured over it",
                           "energy_backward_j × whole_iterations"})
    EXPECT_NE(md.find(text), std::string::npos) << text << "\n" << md;
}

TEST(ReportPhaseFigures, SteadyRunsHaveNoIsolatedLoopColumnsAndOneRankNoExchangeColumn) {
  TempDir dir;
  testing::write_run(dir.str(), synthetic_run("lenet", 64, 1, 0,
                                              {{"seconds_per_batch", 0.1},
                                               {"joules_per_batch", 2.0},
                                               {"time_forward_s", 0.03},
                                               {"time_backward_s", 0.06}}));
  report_without_plots(dir.str());
  const testing::CsvRow time = read_csv(dir.file("report/time.csv")).at(0);
  EXPECT_EQ(time.count("isolated_forward_seconds_per_batch_mean"), 0u);
  EXPECT_EQ(time.count("backward_with_exchange_seconds_per_batch_mean"), 0u);
  const testing::CsvRow energy = read_csv(dir.file("report/energy.csv")).at(0);
  for (const char* column : {"isolated_update_exchange_joules_per_batch_mean", "isolated_forward_whole_joules_mean",
                             "isolated_backward_whole_joules_mean"})
    EXPECT_EQ(energy.count(column), 0u) << column;
  EXPECT_EQ(slurp(dir.file("report/time.md")).find("isolated"), std::string::npos);
}

TEST(ReportPhaseFigures, EfficiencyCaptionStatesTheGflopsBasisAndTheStudys) {
  TempDir dir;
  testing::write_run(dir.str(), phases_run(1));
  report_without_plots(dir.str());
  const std::string md = slurp(dir.file("report/efficiency.md"));
  for (const char* text : {"6 × forward multiply-adds (MACs) per sample × samples/s", "Eqs. 1–10",
                           "pooling, ReLU, dropout, batch normalisation and softmax"})
    EXPECT_NE(md.find(text), std::string::npos) << text << "\n" << md;
}

}  // namespace
}  // namespace cnnscale
