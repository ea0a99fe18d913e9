// `cnnscale report` says what a mix of unequal ranks measured: SM partitions of identical GPUs and
// CPU slowdowns are emulations (each table and figure that shows them says what the emulation
// leaves out), a mix of GPU models was measured as it is; and the scaling figures carry the
// tables' note on BLAS threads per CPU rank. The figures receive each note in figure_notes.csv.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/temp_dir.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/report.hpp"
#include "experiment/report_data.hpp"
#include "experiment/report_figure_notes.hpp"
#include "parallel/split_policy.hpp"

namespace cnnscale {
namespace {

using testing::csv_records;
using testing::read_csv;
using testing::report_without_plots;
using testing::scaling_run;
using testing::slurp;
using testing::synthetic_run;
using testing::TempDir;
using testing::write_run;

constexpr const char* kH100 = "NVIDIA H100 80GB HBM3";
constexpr const char* kH200 = "NVIDIA H200";

// The words each kind of mix is known by in the notes.
constexpr const char* kPartitions = "Emulated GPU mix (mix \"… SMs\")";
constexpr const char* kSlowdowns = "Emulated CPU mix (mix \"slowdown …\")";
constexpr const char* kModels = "Measured on GPUs of different models";

// Which ranks a mix has: the GPU model of each (empty: CPU ranks), its SMs (0: the whole GPU) or
// slowdown (1: none).
struct Rank {
  std::string gpu;
  double sms = 0, slowdown = 1;
};

// A 2-rank run at global batch 64 under `policy`, as train records a mix of those ranks.
RunResults mix_run(const std::vector<Rank>& ranks, const std::string& mix, const std::string& policy, int repeat = 0) {
  SummaryValues figures = {{"seconds_per_batch", 0.05}, {"samples_per_s", 1280.0}, {"split", policy}};
  if (!mix.empty()) figures["mix"] = mix;
  RunResults r = synthetic_run("lenet", 64, 2, repeat, figures);
  r.run_id = fmt::format("lenet-{}-r{}", policy, repeat);
  std::string names;
  for (size_t k = 0; k < ranks.size(); ++k) {
    names += (k ? "," : "") + ranks[k].gpu;
    RankSummary rank;
    rank.rank = double(k);
    rank.local_batch = 32.0;
    rank.compute_s = 0.02 * ranks[k].slowdown;
    if (ranks[k].sms > 0) rank.sms = ranks[k].sms;
    if (ranks[k].slowdown != 1) rank.slowdown = ranks[k].slowdown;
    r.rank_summary.push_back(rank);
  }
  if (!ranks[0].gpu.empty()) {
    r.summary.device = std::string("gpu");
    r.summary.gpu_names = names;
  }
  r.split.policy = policy;
  r.split.changes = {SplitChange{0, {32, 32}}};
  return r;
}

void write_policies(const std::string& root, const std::vector<Rank>& ranks, const std::string& mix) {
  for (const std::string policy : {"even", "proportional"}) write_run(root, mix_run(ranks, mix, policy));
}

std::map<std::string, std::string> notes_of(const std::string& root) {
  return report::figure_notes(report::group_runs(report::scan_runs(root)));
}

// Every table that shows the mix's rows carries `note`, and so does every figure that draws them.
void expect_noted(const std::string& root, const std::string& note) {
  report_without_plots(root);
  for (const char* table : {"hetero", "hetero_ranks", "time", "energy", "phases"}) {
    const std::string md = slurp(root + "/report/" + table + ".md");
    EXPECT_NE(md.find(note), std::string::npos) << table << ":\n" << md;
  }
  const auto notes = notes_of(root);
  for (const std::string figure : {"rank_balance.png", "time_per_batch.png", "joules_per_batch.png", "phases.png"}) {
    ASSERT_TRUE(notes.count(figure)) << figure;
    EXPECT_NE(notes.at(figure).find(note), std::string::npos) << figure << ": " << notes.at(figure);
  }
}

TEST(ReportEmulationNotes, SmPartitionsOfOneModelAreAnEmulationAndSayWhatTheyShare) {
  TempDir dir;
  write_policies(dir.str(), {{kH100, 132}, {kH100, 66}}, "132+66 SMs");
  expect_noted(dir.str(), kPartitions);
  const std::string md = slurp(dir.file("report/hetero.md"));
  for (const char* words : {"each rank trains on a GPU of its own (NVIDIA H100 80GB HBM3)", "memory bandwidth",
                            "L2 cache, clocks, power limit and idle power", "not a slower GPU model",
                            "its whole board's NVML energy counter", "not the joules of a slower GPU"})
    EXPECT_NE(md.find(words), std::string::npos) << words << "\n" << md;
  EXPECT_EQ(md.find(kSlowdowns), std::string::npos) << md;
  EXPECT_EQ(md.find(kModels), std::string::npos) << md;
}

TEST(ReportEmulationNotes, CpuSlowdownsSayTheRankSleepsAndItsJoulesAreNotASlowerRanks) {
  TempDir dir;
  write_policies(dir.str(), {{"", 0, 1}, {"", 0, 3}}, "slowdown 1+3");
  expect_noted(dir.str(), kSlowdowns);
  const std::string md = slurp(dir.file("report/hetero_ranks.md"));
  for (const char* words : {"sleeps (f − 1) × its own forward and backward time", "its joules are not",
                            "RAPL counts each host's package and DRAM once"})
    EXPECT_NE(md.find(words), std::string::npos) << words << "\n" << md;
  EXPECT_EQ(md.find(kPartitions), std::string::npos) << md;
  EXPECT_EQ(md.find(kModels), std::string::npos) << md;
}

TEST(ReportEmulationNotes, GpusOfTwoModelsAreARealMixNamedByTheirModels) {
  TempDir dir;
  write_policies(dir.str(), {{kH100}, {kH200}}, "");
  expect_noted(dir.str(), std::string(kModels) + " (NVIDIA H100 80GB HBM3 + NVIDIA H200), not emulated");
  const std::string md = slurp(dir.file("report/hetero.md"));
  EXPECT_EQ(md.find("Emulated"), std::string::npos) << "a real mix gets no emulation note\n" << md;
  const auto rows = read_csv(dir.file("report/hetero.csv"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("mix"), "NVIDIA H100 80GB HBM3 + NVIDIA H200") << "no \"2 equal GPUs\"";
}

TEST(ReportEmulationNotes, EqualRanksUnderAnotherSplitHaveNoEmulationNote) {
  TempDir dir;
  write_policies(dir.str(), {{kH100}, {kH100}}, "");
  report_without_plots(dir.str());
  const std::string md = slurp(dir.file("report/hetero.md"));
  EXPECT_EQ(md.find("Emulated"), std::string::npos) << md;
  EXPECT_EQ(md.find(kModels), std::string::npos) << md;
  EXPECT_FALSE(notes_of(dir.str()).count("rank_balance.png"));
}

// As a sweep on 2 cores runs them: 1 rank with 2 BLAS threads, 2 ranks with 1 each; the strong
// (batch 64 on 2 ranks) and the weak (batch 128 on 2 ranks, 64 each) scaling figures say so.
TEST(ReportEmulationNotes, ScalingFiguresCarryTheTablesThreadNote) {
  TempDir dir;
  for (int batch : {64, 128})
    for (int n : {1, 2}) {
      RunResults r = scaling_run("net_a", batch, n, 0);
      r.summary.threads_per_rank = n == 1 ? 2.0 : 1.0;
      write_run(dir.str(), r);
    }
  report_without_plots(dir.str());
  const std::string pair = "1 rank ran 2 BLAS threads, 2 ranks 1 each (2 in all)";
  const auto notes = notes_of(dir.str());
  for (const auto& [figure, table] : std::vector<std::pair<std::string, std::string>>{
           {"scaling.png", "scaling"}, {"weak_scaling.png", "weak_scaling"}}) {
    ASSERT_TRUE(notes.count(figure)) << figure;
    EXPECT_NE(notes.at(figure).find(pair), std::string::npos) << notes.at(figure);
    EXPECT_NE(slurp(dir.file("report/" + table + ".md")).find(notes.at(figure)), std::string::npos)
        << "the figure's note is the table's";
  }
  EXPECT_FALSE(notes.count("rank_balance.png"));
  EXPECT_FALSE(notes.count("time_per_batch.png")) << "equal ranks: nothing emulated";
  // The file the plot script reads: figure,note, quoted where the note has commas.
  const auto records = csv_records(report::figure_notes_csv(notes));
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0], (std::vector<std::string>{"figure", "note"}));
  EXPECT_EQ(records[1], (std::vector<std::string>{"scaling.png", notes.at("scaling.png")}));
}

// The figures themselves: the note is drawn on them (the PNG's Description lists a figure's words)
// and stands under each image in report.md.
TEST(ReportEmulationNotes, FiguresDrawTheirNotes) {
  if (std::system("/usr/bin/python3 -c 'import matplotlib, numpy, h5py' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import matplotlib/numpy/h5py";
  TempDir dir;
  const std::vector<Rank> slowed = {{"", 0, 1}, {"", 0, 3}};
  write_run(dir.str(), mix_run(slowed, "slowdown 1+3", "even"));
  RunResults automatic = mix_run(slowed, "slowdown 1+3", "auto");
  automatic.split.refine_every = 20;
  automatic.split.refine_model = kRefineModel;
  automatic.split.changes = {SplitChange{0, {32, 32}}, SplitChange{20, {44, 20}}};
  write_run(dir.str(), automatic);
  for (int n : {1, 2}) {
    RunResults r = scaling_run("net_a", 64, n, 0);
    r.summary.threads_per_rank = n == 1 ? 2.0 : 1.0;
    write_run(dir.str(), r);
  }
  report::ReportOptions o;
  o.results_dir = dir.str();
  const report::ReportOutcome out = report::write_report(o);
  const auto notes = notes_of(dir.str());
  EXPECT_EQ(read_csv(dir.file("report/figure_notes.csv")).size(), notes.size());
  const std::string md = slurp(out.report_md);
  for (const std::string figure : {"rank_balance.png", "split_history.png", "scaling.png", "time_per_batch.png"}) {
    ASSERT_TRUE(notes.count(figure)) << figure;
    const std::string png = slurp(dir.file("report/" + figure));
    EXPECT_NE(png.find("note: Note: " + notes.at(figure)), std::string::npos) << figure;
    EXPECT_NE(md.find("](" + figure + ")\n\nNote: " + notes.at(figure)), std::string::npos) << figure;
  }
  EXPECT_NE(notes.at("rank_balance.png").find(kSlowdowns), std::string::npos);
  EXPECT_NE(notes.at("scaling.png").find("1 rank ran 2 BLAS threads"), std::string::npos);
  // Figures worth looking at by eye: copied where CNNSCALE_TEST_KEEP_FIGURES points.
  if (const char* keep = std::getenv("CNNSCALE_TEST_KEEP_FIGURES"); keep && *keep) {
    std::filesystem::create_directories(keep);
    for (const std::string& f : out.figures)
      std::filesystem::copy_file(f, std::filesystem::path(keep) / std::filesystem::path(f).filename(),
                                 std::filesystem::copy_options::overwrite_existing);
  }
}

}  // namespace
}  // namespace cnnscale
