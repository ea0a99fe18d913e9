// `cnnscale report` on unequal ranks: the heterogeneous table's rows, its best marks per network,
// batch and mix, which runs it leaves out (and that the scaling table leaves them out), each rank's
// busy and waiting time, the auto split's history, and the two figures drawn from them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "common/temp_dir.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/report.hpp"
#include "experiment/report_data.hpp"
#include "parallel/split_policy.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using testing::read_csv;
using testing::slurp;
using testing::synthetic_run;
using testing::TempDir;
using testing::write_run;

// A 2-rank CPU run at global batch 64 whose split policy ended with `shares`. Rank k needs
// `per_sample[k]` seconds per sample, so the figures follow from the shares as the trainer derives
// them: the step is the slowest rank's compute plus 2 ms of exchange, the others wait for it.
RunResults hetero_run(const std::string& mix, const std::string& policy, std::vector<int64_t> shares, double joules,
                      int repeat = 0, int batch = 64) {
  const std::vector<double> per_sample =
      mix.empty() ? std::vector<double>{1e-3, 1e-3} : std::vector<double>{1e-3, 3e-3};
  std::vector<double> compute;
  double slowest = 0, sum = 0, ideal = 0;
  for (size_t k = 0; k < shares.size(); ++k) {
    compute.push_back(shares[k] * per_sample[k]);
    slowest = std::max(slowest, compute[k]);
    sum += compute[k];
    ideal += 1 / per_sample[k];
  }
  const double seconds = slowest + 2e-3, speed = batch / seconds;
  SummaryValues figures = {{"seconds_per_batch", seconds},
                           {"samples_per_s", speed},
                           {"joules_per_batch", joules},
                           {"edp_batch_js", joules * seconds},
                           {"iterations", 60.0},
                           {"split", policy},
                           {"split_shares", fmt::format("{}+{}", shares[0], shares[1])},
                           {"imbalance", (slowest - sum / 2) / slowest},
                           {"waiting_joules_per_batch", 20.0 * (2 * slowest - sum)},
                           {"ideal_samples_per_s", ideal},
                           {"efficiency", speed / ideal}};
  if (!mix.empty()) figures["mix"] = mix;
  RunResults r = synthetic_run("lenet", batch, 2, repeat, figures);
  r.run_id = fmt::format("lenet-b{}-{}-{}-r{}", batch, mix.empty() ? "equal" : "slow", policy, repeat);
  for (size_t k = 0; k < shares.size(); ++k) {
    RankSummary rank;
    rank.rank = double(k);
    rank.local_batch = double(shares[k]);
    rank.compute_s = compute[k];
    rank.imbalance_wait_s = slowest - compute[k];
    rank.exchange_wait_s = slowest - compute[k] + 2e-3;
    rank.wait_watts = 20.0;
    rank.waiting_joules_per_batch = 20.0 * (slowest - compute[k]);
    if (!mix.empty()) rank.slowdown = per_sample[k] / per_sample[0];
    r.rank_summary.push_back(rank);
  }
  r.split.policy = policy.substr(0, policy.find(' '));
  r.split.changes = {SplitChange{0, shares}};
  // As train writes it: auto, energy and edp refine online every 20 steps, the others keep their shares.
  const bool online = r.split.policy == "auto" || r.split.policy == "energy" || r.split.policy == "edp";
  r.split.refine_every = online ? 20 : 0;
  if (online) r.split.refine_model = kRefineModel;
  return r;
}

// Slowed rank 1 (slowdown 1+3) under four policies, equal ranks under even and manual, and runs the
// table leaves out: an even split of equal ranks with nothing to compare, one rank, no split figure.
void write_mixes(const std::string& root) {
  write_run(root, hetero_run("slowdown 1+3", "even", {32, 32}, 10.0, 0));
  write_run(root, hetero_run("slowdown 1+3", "even", {32, 32}, 10.4, 1));
  // The model-based policies recorded what their models predicted: proportional 40 ms per batch and
  // 75 mJ per sample against a measured 50 ms and 6 J / 64 (ratios 1.25), energy only a time.
  RunResults proportional = hetero_run("slowdown 1+3", "proportional", {48, 16}, 6.0);
  proportional.summary.predicted_seconds_per_batch = 0.040;
  proportional.summary.predicted_joules_per_sample = 0.075;
  proportional.summary.joules_per_sample = 6.0 / 64;
  write_run(root, proportional);
  RunResults automatic = hetero_run("slowdown 1+3", "auto", {46, 18}, 6.2);
  automatic.summary.split_changes = 2.0;
  automatic.split.changes = {SplitChange{0, {32, 32}}, SplitChange{20, {44, 20}}, SplitChange{40, {46, 18}}};
  write_run(root, automatic);
  RunResults energy = hetero_run("slowdown 1+3", "energy", {40, 24}, 5.0);
  energy.summary.predicted_seconds_per_batch = 0.070;
  write_run(root, energy);
  write_run(root, hetero_run("", "even", {32, 32}, 4.0));
  write_run(root, hetero_run("", "manual", {40, 24}, 4.5));
  write_run(root, hetero_run("", "even", {64, 64}, 8.0, 0, 128));  // no other split at batch 128
  RunResults one = synthetic_run("lenet", 64, 1, 0, {{"samples_per_s", 900.0}, {"split", std::string("even")}});
  write_run(root, one);
  RunResults old = synthetic_run("lenet", 32, 2, 0, {{"samples_per_s", 800.0}});  // written before splits
  write_run(root, old);
}

// A folder inside a test's TempDir, with the same accessors.
struct TempDirView {
  std::string path;
  const std::string& str() const { return path; }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

const testing::CsvRow* find_row(const std::vector<testing::CsvRow>& rows, const std::string& mix,
                                const std::string& split) {
  for (const auto& r : rows)
    if (r.at("mix") == mix && r.at("split") == split) return &r;
  return nullptr;
}

TEST(ReportHetero, OneRowPerMixAndSplitWithTheBestMarkedPerMix) {
  TempDir dir;
  write_mixes(dir.str());
  testing::report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/hetero.csv"));
  ASSERT_EQ(rows.size(), 6u);
  // Rows of one mix together, from even to the model-based policies.
  const std::vector<std::pair<std::string, std::string>> order = {
      {"slowdown 1+3", "even"},   {"slowdown 1+3", "proportional"}, {"slowdown 1+3", "auto from even"},
      {"slowdown 1+3", "energy"}, {"2 equal ranks", "even"},        {"2 equal ranks", "manual 40+24"}};
  std::vector<std::pair<std::string, std::string>> got;
  for (const auto& r : rows) got.emplace_back(r.at("mix"), r.at("split"));
  auto equal_first = order;  // which mix comes first follows the configurations' order
  std::rotate(equal_first.begin(), equal_first.begin() + 4, equal_first.end());
  EXPECT_TRUE(got == order || got == equal_first);

  const auto* even = find_row(rows, "slowdown 1+3", "even");
  ASSERT_NE(even, nullptr);
  EXPECT_EQ(even->at("runs"), "2");  // the two repeats: mean ± std
  EXPECT_DOUBLE_EQ(std::stod(even->at("joules_per_batch_mean")), 10.2);
  EXPECT_FALSE(even->at("joules_per_batch_std").empty());
  EXPECT_DOUBLE_EQ(std::stod(even->at("imbalance_percent_mean")), 100 * (0.096 - 0.064) / 0.096);
  EXPECT_EQ(even->at("shares"), "32+32");
  // Even: 98 ms per batch against an ideal of 1000 + 333 samples/s.
  EXPECT_NEAR(std::stod(even->at("efficiency_percent_mean")), 100 * (64 / 0.098) / (1000 + 1000.0 / 3), 1e-9);

  // × even: proportional's 64 samples in 48 + 2 ms against even's in 96 + 2 ms; even itself 1;
  // equal ranks compare with their own even split; a set without an even row has none.
  const auto* proportional = find_row(rows, "slowdown 1+3", "proportional");
  ASSERT_NE(proportional, nullptr);
  EXPECT_NEAR(std::stod(proportional->at("speedup_vs_even_mean")), 0.098 / 0.050, 1e-9);
  EXPECT_DOUBLE_EQ(std::stod(even->at("speedup_vs_even_mean")), 1.0);
  const auto* manual = find_row(rows, "2 equal ranks", "manual 40+24");
  ASSERT_NE(manual, nullptr);
  EXPECT_NEAR(std::stod(manual->at("speedup_vs_even_mean")), (0.032 + 0.002) / (0.040 + 0.002), 1e-9);

  // Proportional is fastest and has the lowest EDP; energy the fewest joules; auto none.
  auto marks = [&](const std::string& mix, const std::string& split) {
    const auto* r = find_row(rows, mix, split);
    return r ? r->at("best_samples_per_s") + r->at("best_joules_per_batch") + r->at("best_edp") : "missing";
  };
  EXPECT_EQ(marks("slowdown 1+3", "proportional"), "101");
  EXPECT_EQ(marks("slowdown 1+3", "energy"), "010");
  EXPECT_EQ(marks("slowdown 1+3", "auto from even"), "000");  // it fitted no models: it started even
  EXPECT_EQ(marks("slowdown 1+3", "even"), "000");
  // Equal ranks are their own comparison: the even split wins every objective there.
  EXPECT_EQ(marks("2 equal ranks", "even"), "111");
  EXPECT_EQ(marks("2 equal ranks", "manual 40+24"), "000");

  const std::string md = slurp(dir.file("report/hetero.md"));
  EXPECT_NE(md.find("★"), std::string::npos);
  EXPECT_NE(md.find("efficiency (%)"), std::string::npos);
  EXPECT_NE(md.find("× even"), std::string::npos);
  EXPECT_NE(md.find("| slowdown 1+3 |"), std::string::npos);
  EXPECT_NE(slurp(dir.file("report/report.md")).find("### Unequal ranks and batch splits"), std::string::npos);
}

// The configurations whose split the probe's models chose, with what the models predicted beside
// what was measured; the others (even, auto from even, manual) have no row.
TEST(ReportHetero, SplitModelsPredictedAgainstMeasured) {
  TempDir dir;
  write_mixes(dir.str());
  testing::report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/split_models.csv"));
  ASSERT_EQ(rows.size(), 2u);
  const auto* prop = find_row(rows, "slowdown 1+3", "proportional");
  ASSERT_NE(prop, nullptr);
  EXPECT_EQ(prop->at("shares"), "48+16");
  EXPECT_DOUBLE_EQ(std::stod(prop->at("predicted_seconds_per_batch_mean")), 0.040);
  EXPECT_DOUBLE_EQ(std::stod(prop->at("seconds_per_batch_mean")), 0.050);  // 48 x 1 ms + 2 ms
  EXPECT_NEAR(std::stod(prop->at("seconds_ratio_mean")), 1.25, 1e-12);
  EXPECT_NEAR(std::stod(prop->at("joules_ratio_mean")), 1.25, 1e-12);
  const auto* energy = find_row(rows, "slowdown 1+3", "energy");
  ASSERT_NE(energy, nullptr);
  // 40 + 24 samples: rank 1, 24 x 3 ms, is the slowest; its 72 ms + 2 ms of exchange against 70 ms.
  EXPECT_NEAR(std::stod(energy->at("seconds_ratio_mean")), 0.074 / 0.070, 1e-12);
  EXPECT_TRUE(energy->at("joules_ratio_mean").empty());  // no prediction of joules: null
  EXPECT_EQ(find_row(rows, "slowdown 1+3", "even"), nullptr);
  EXPECT_NE(slurp(dir.file("report/report.md")).find("### Split models: predicted against measured"),
            std::string::npos);
}

// auto from the probe's shares (models recorded) and auto from even shares (none: --auto-start even,
// or a run from before the probe start) are two configurations, never averaged as repeats.
TEST(ReportHetero, AutoFromTheProbeAndFromEvenAreApart) {
  TempDir dir;
  RunResults probed = hetero_run("slowdown 1+3", "auto", {48, 16}, 6.0);
  probed.split.models = {RankModel{0, 1e-3, 1e-3, 0, 0, 0}, RankModel{1, 1e-3, 3e-3, 0, 0, 0}};
  probed.run_id += "-probed";
  write_run(dir.str(), probed);
  write_run(dir.str(), hetero_run("slowdown 1+3", "auto", {44, 20}, 6.4));
  write_run(dir.str(), hetero_run("slowdown 1+3", "even", {32, 32}, 10.0));
  testing::report_without_plots(dir.str());
  const auto rows = read_csv(dir.file("report/hetero.csv"));
  ASSERT_EQ(rows.size(), 3u);
  const auto* from_probe = find_row(rows, "slowdown 1+3", "auto");
  const auto* from_even = find_row(rows, "slowdown 1+3", "auto from even");
  ASSERT_NE(from_probe, nullptr);
  ASSERT_NE(from_even, nullptr);
  EXPECT_EQ(from_probe->at("shares"), "48+16");
  EXPECT_EQ(from_even->at("shares"), "44+20");
  EXPECT_EQ(from_probe->at("runs"), "1");
  EXPECT_EQ(from_even->at("runs"), "1");
}

TEST(ReportHetero, ScalingTablesLeaveUnequalRanksOutAndPlainSweepsHaveNoHeteroTable) {
  TempDir dir;  // one per test (a second would share its name): sub-folders instead
  const std::string mixes = dir.file("mixes"), plain = dir.file("plain");
  write_mixes(mixes);
  testing::report_without_plots(mixes);
  // by_gpus: batch 32 (no split figure), batch 64 (1 rank and the even split of equal ranks), batch 128.
  const auto by_gpus = read_csv(mixes + "/report/by_gpus.csv");
  EXPECT_EQ(by_gpus.size(), 3u);
  EXPECT_NE(slurp(mixes + "/report/by_gpus.md").find("5 configuration(s) of unequal ranks"), std::string::npos);
  // The other tables keep every configuration, the split and mix telling them apart.
  EXPECT_EQ(read_csv(mixes + "/report/time.csv").size(), 9u);

  write_run(plain, synthetic_run("lenet", 64, 2, 0, {{"samples_per_s", 900.0}}));
  const report::ReportOutcome out = testing::report_without_plots(plain);
  EXPECT_FALSE(fs::exists(plain + "/report/hetero.csv"));
  EXPECT_FALSE(fs::exists(plain + "/report/split_history.csv"));
  EXPECT_EQ(slurp(out.report_md).find("Unequal ranks"), std::string::npos);
}

TEST(ReportHetero, EachRankBusyAndWaitingAndTheAutoSplitHistory) {
  TempDir dir;
  write_mixes(dir.str());
  testing::report_without_plots(dir.str());
  const auto ranks = read_csv(dir.file("report/hetero_ranks.csv"));
  ASSERT_EQ(ranks.size(), 12u);  // 6 configurations × 2 ranks
  for (const auto& r : ranks) {
    if (r.at("mix") != "slowdown 1+3" || r.at("split") != "even") continue;
    const bool fast = r.at("rank") == "0";
    EXPECT_EQ(r.at("speed"), fast ? "slowdown 1" : "slowdown 3");
    EXPECT_DOUBLE_EQ(std::stod(r.at("compute_s_mean")), fast ? 0.032 : 0.096);
    EXPECT_DOUBLE_EQ(std::stod(r.at("imbalance_wait_s_mean")), fast ? 0.064 : 0.0);
    EXPECT_EQ(r.at("local_batch_mean"), "32");
  }
  const auto history = read_csv(dir.file("report/split_history.csv"));
  // The auto run's 3 splits x 2 ranks, then the energy run's one split, which its online
  // refinement kept: the policies that refine online are drawn, those that cannot are not.
  ASSERT_EQ(history.size(), 8u);
  EXPECT_EQ(history[0].at("run_id"), "lenet-b64-slow-auto-r0");
  EXPECT_EQ(history[2].at("iteration"), "20");
  EXPECT_EQ(history[2].at("share"), "44");
  EXPECT_EQ(history[3].at("speed"), "slowdown 3");
  EXPECT_EQ(history[5].at("end_iteration"), "60");
  EXPECT_EQ(history[6].at("split"), "energy");
  EXPECT_EQ(history[6].at("share"), "40");
  EXPECT_EQ(history[7].at("share"), "24");
}

// A policy that refines online (auto, energy, edp) with its start-up shares kept is another
// configuration, labelled "(probe only)": --rebalance-every 0, and energy / edp in files from
// before they refined (no refine_every recorded), whose auto still refined. So is one refined from
// the probe's models before the refinement was recorded (no refine_model: the time per sample was
// re-estimated alone), labelled "(slope-refined)"; auto from even refined the same way either way.
TEST(ReportHetero, SharesKeptFromTheProbeAreLabelledApart) {
  const auto label = [](const std::string& policy, int64_t refine_every, bool models,
                        const std::string& refine_model = kRefineModel) {
    report::RunRecord r;
    r.summary.split = policy;
    r.split.policy = policy;
    r.split.refine_every = refine_every;
    r.split.refine_model = refine_every > 0 ? refine_model : "";
    if (models) r.split.models.push_back(RankModel{});
    return r.text("split");
  };
  EXPECT_EQ(label("energy", 20, true), "energy");
  EXPECT_EQ(label("energy", 20, true, ""), "energy (slope-refined)");
  EXPECT_EQ(label("edp", 20, true, ""), "edp (slope-refined)");
  EXPECT_EQ(label("auto", 20, true, ""), "auto (slope-refined)");
  EXPECT_EQ(label("auto", 20, false, ""), "auto from even");
  EXPECT_EQ(label("energy", 0, true), "energy (probe only)");
  EXPECT_EQ(label("energy", -1, true), "energy (probe only)");
  EXPECT_EQ(label("edp", -1, true), "edp (probe only)");
  EXPECT_EQ(label("edp", 5, true), "edp");
  EXPECT_EQ(label("auto", -1, true), "auto (slope-refined)");
  EXPECT_EQ(label("auto", 0, true), "auto (probe only)");
  EXPECT_EQ(label("auto", -1, false), "auto from even");
  EXPECT_EQ(label("auto", 20, false), "auto from even");
  EXPECT_EQ(label("auto", 0, false), "auto from even (kept)");
  EXPECT_EQ(label("proportional", 0, true), "proportional");
  EXPECT_EQ(label("proportional", -1, true), "proportional");
}

TEST(ReportHetero, FiguresOfRankBalanceAndSplitHistory) {
  if (std::system("/usr/bin/python3 -c 'import matplotlib, numpy, h5py' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import matplotlib/numpy/h5py";
  TempDir root;  // one per test (a second would share its name): sub-folders instead
  const TempDirView dir{root.file("mixes")};
  write_mixes(dir.str());
  report::ReportOptions o;
  o.results_dir = dir.str();
  const report::ReportOutcome out = report::write_report(o);
  const std::string md = slurp(out.report_md);
  for (const std::string& name : report::kHeteroFigures) {
    const std::string png = slurp(dir.file("report/" + name));
    EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << name;
    EXPECT_NE(md.find("](" + name + ")"), std::string::npos) << name;
    EXPECT_NE(std::find(out.figures.begin(), out.figures.end(), dir.file("report/" + name)), out.figures.end());
  }
  // What they say, from the PNG's Description: axes with units, legends naming busy and waiting time.
  const std::string balance = slurp(dir.file("report/rank_balance.png"));
  EXPECT_NE(balance.find("y: ms per batch"), std::string::npos);
  EXPECT_NE(balance.find("compute (busy)"), std::string::npos);
  EXPECT_NE(balance.find("imbalance wait (waiting for the slowest rank)"), std::string::npos);
  const std::string history = slurp(dir.file("report/split_history.png"));
  EXPECT_NE(history.find("x: iteration"), std::string::npos);
  EXPECT_NE(history.find("y: share (samples of the global batch)"), std::string::npos);
  EXPECT_NE(history.find("legend: rank 0 (slowdown 1), rank 1 (slowdown 3)"), std::string::npos);
  // Figures worth looking at by eye: copied where CNNSCALE_TEST_KEEP_FIGURES points.
  if (const char* keep = std::getenv("CNNSCALE_TEST_KEEP_FIGURES"); keep && *keep) {
    fs::create_directories(keep);
    for (const std::string& f : out.figures)
      fs::copy_file(f, fs::path(keep) / fs::path(f).filename(), fs::copy_options::overwrite_existing);
  }

  // Without an auto run there is no history to draw: one line says so.
  const TempDirView fixed{root.file("fixed")};
  write_run(fixed.str(), hetero_run("slowdown 1+3", "proportional", {48, 16}, 6.0));
  o.results_dir = fixed.str();
  const report::ReportOutcome no_auto = report::write_report(o);
  EXPECT_TRUE(fs::exists(fixed.file("report/rank_balance.png")));
  EXPECT_FALSE(fs::exists(fixed.file("report/split_history.png")));
  EXPECT_NE(slurp(no_auto.report_md).find("- `split_history.png` not drawn: no run refined its split online"),
            std::string::npos);
}

}  // namespace
}  // namespace cnnscale
