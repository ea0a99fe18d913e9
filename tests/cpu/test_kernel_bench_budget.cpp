// The benchmark loop's budgets, with cases that spin for a known time: energy-within reads only
// variants near the fastest, a stop keeps whole problems and says where to resume, slow calls get
// fewer repeats, --from/--limit take a slice; and power_while's window cut at counter refreshes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/half.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/kernel_bench_output.hpp"
#include "measure/bench_shapes.hpp"
#include "measure/kernel_bench_run.hpp"
#include "measure/kernel_bench_suite.hpp"
#include "net/bench_problems.hpp"

namespace cnnscale::testing {
namespace {

namespace fs = std::filesystem;
using measure::Reference;

// A case of two variants that spin for 0.1 ms and 2 ms a call: the second is 20x slower, far past
// the 2x the test reads within, whatever a loaded machine adds to either.
class SpinCase : public KernelCase {
 public:
  explicit SpinCase(std::array<int, 2>* calls = nullptr) : calls_(calls) {}
  const std::vector<KernelVariant>& variants() const override { return variants_; }
  void run(size_t v) override {
    if (calls_) ++(*calls_)[v];
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(v == 0 ? 100 : 2000);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  std::vector<float> output(size_t) override { return {}; }
  int64_t operand_bytes() const override { return 0; }

 private:
  std::array<int, 2>* calls_;
  std::vector<KernelVariant> variants_{{"spin", "fast"}, {"spin", "slow"}};
};

class SpinBench : public KernelBench {
 public:
  // Calls per variant of each case made so far, in order (a deque: the addresses stay put).
  std::deque<std::array<int, 2>> calls;
  std::unique_ptr<KernelCase> gemm(const GemmProblem&, KernelPrecision, const KernelInputs&) override {
    calls.push_back({0, 0});
    return std::make_unique<SpinCase>(&calls.back());
  }
  std::unique_ptr<KernelCase> conv(const ConvProblem&, ConvPass, KernelPrecision, Layout,
                                   const KernelInputs&) override {
    return std::make_unique<SpinCase>();
  }
};

// --kernels' hook: after each variant's timed repeats, exactly one more call, handed over with the
// variant's row (its timing done), so the traced call is outside every timed repeat.
TEST(KernelBenchKernels, EachVariantIsHandedOverOnceAfterItsTiming) {
  std::unique_ptr<Backend> cpu = make_backend("cpu", 0, Precision::FP32);
  SpinBench bench;
  measure::KernelBenchOptions o;
  o.timing.repeats = 3;
  o.timing.min_repeat_ms = 0;
  std::vector<std::string> seen;
  std::vector<std::array<int, 2>> calls_before;
  o.profile_call = [&](const measure::KernelBenchRow& row, const std::function<void()>& call) {
    EXPECT_GT(row.timing.repeats, 0) << "handed over before its timing";
    seen.push_back(row.algorithm);
    calls_before.push_back(bench.calls.back());
    call();
  };
  const measure::KernelBenchResult r = measure::run_gemm_bench(*cpu, bench, {GemmProblem{8, 8, 8, false, false}}, o);
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(seen, (std::vector<std::string>{"fast", "slow"}));
  // The handed call is the variant's own: one call more of it, none of the other.
  const std::array<int, 2> after = bench.calls.back();
  EXPECT_EQ(after[0], calls_before[0][0] + 1);
  EXPECT_EQ(after[1], calls_before[1][1] + 1);
}

TEST(KernelBenchEnergy, EnergyWithinReadsOnlyVariantsNearTheFastest) {
  std::unique_ptr<Backend> cpu = make_backend("cpu", 0, Precision::FP32);
  SpinBench bench;
  measure::KernelBenchOptions o;
  o.timing.repeats = 3;
  o.timing.min_repeat_ms = 2;
  o.energy_window_seconds = 0.1;
  // A counter that refreshes every 10 ms with 100 J/s of wall time.
  const auto t0 = std::chrono::steady_clock::now();
  o.counter_joules = [t0]() -> std::optional<double> {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return std::floor(s / 0.01) * 0.01 * 100.0;
  };
  o.first_problem = 4;  // as under --from 5
  const GemmProblem p{8, 8, 8, false, false};
  // Every variant read without --energy-within.
  measure::KernelBenchResult all = measure::run_gemm_bench(*cpu, bench, {p}, o);
  ASSERT_EQ(all.rows.size(), 2u);
  for (const auto& r : all.rows) {
    EXPECT_EQ(r.problem, 4);
    ASSERT_TRUE(r.watts) << r.algorithm;
    // The window's ends are seen late by at most a poll or a scheduling delay, a few ms against >= 100 ms.
    EXPECT_NEAR(*r.watts, 100.0, 100.0 * 0.5);
    EXPECT_TRUE(r.energy_note.empty());
  }
  // Within 2x of the fastest: the 20x slower variant is not read, and says why.
  o.energy_within = 2;
  measure::KernelBenchResult near = measure::run_gemm_bench(*cpu, bench, {p}, o);
  ASSERT_EQ(near.rows.size(), 2u);
  EXPECT_EQ(near.energy_within, 2);
  EXPECT_TRUE(near.rows[0].watts && near.rows[0].fastest && near.rows[0].lowest_energy);
  EXPECT_FALSE(near.rows[1].watts);
  EXPECT_FALSE(near.rows[1].joules_per_call);
  EXPECT_NE(near.rows[1].energy_note.find("--energy-within 2"), std::string::npos) << near.rows[1].energy_note;
}

TEST(KernelBenchEnergy, AStopKeepsWholeProblemsAndSaysWhereToResume) {
  std::unique_ptr<Backend> cpu = make_backend("cpu", 0, Precision::FP32);
  measure::KernelBenchOptions o;
  o.timing.repeats = 2;
  o.first_problem = 10;
  const GemmProblem p{8, 8, 8, false, false};
  // The slow variant (2 ms a call, one call a repeat) makes 3 warm-up calls, 1 sizing call and 2
  // repeats: 6 calls. The flag is polled before every problem, variant and call.
  struct Stop {
    const char* where;
    size_t the_case;
    size_t variant;
    int after_calls;
  };
  for (const Stop& at : {Stop{"before problem 11", 0, 1, 6}, Stop{"inside problem 11's first variant", 1, 0, 2},
                         Stop{"inside problem 11's second variant", 1, 1, 4}}) {
    SCOPED_TRACE(at.where);
    SpinBench bench;
    o.stop_requested = [&] {
      return bench.calls.size() > at.the_case && bench.calls[at.the_case][at.variant] >= at.after_calls;
    };
    measure::KernelBenchResult r = measure::run_gemm_bench(*cpu, bench, {p, p, p, p}, o);
    ASSERT_TRUE(r.stopped_before);
    EXPECT_EQ(*r.stopped_before, 11);  // problem 10 ran; 11 is dropped whole and runs on resume
    ASSERT_EQ(r.rows.size(), 2u);
    EXPECT_EQ(r.rows.back().problem, 10);
    // A stop inside a variant is answered before the variant's next call.
    EXPECT_EQ(bench.calls[at.the_case][at.variant], at.after_calls);
    const nlohmann::json j = report::kernel_bench_json(r, "t", "h");
    EXPECT_EQ(j["status"], "interrupted");
    EXPECT_EQ(j["resume_from"], 12);  // --from is 1-based
  }
  SpinBench bench;
  o.stop_requested = [] { return false; };
  const nlohmann::json done = report::kernel_bench_json(measure::run_gemm_bench(*cpu, bench, {p}, o), "t", "h");
  EXPECT_EQ(done["status"], "complete");
  EXPECT_TRUE(done["resume_from"].is_null());
}

// Calls of 50 ms or more against a budget of 0.2 s: the cold call leaves room for at most
// floor(0.1 / 0.05) = 2 more warm-up calls and the repeats for at most floor(0.2 / 0.05) = 4, never
// under 3; sleep_for never returns early, so every bound holds however loaded the machine.
TEST(KernelBenchTiming, SlowCallsGetFewerRepeatsWithinTheBudget) {
  std::unique_ptr<Backend> cpu = make_backend("cpu", 0, Precision::FP32);
  int calls = 0;
  auto call = [&] {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  };
  measure::TimingOptions o;
  o.max_seconds = 0.2;
  const measure::TimingStats t = measure::time_calls(*cpu, call, o);
  EXPECT_EQ(t.calls_per_repeat, 1);
  EXPECT_GE(t.repeats, 3);
  EXPECT_LE(t.repeats, 4);
  EXPECT_GE(t.median_ms, 50.0);
  EXPECT_LE(calls, 1 + 2 + 1 + 4);  // cold, warm-up, sizing, repeats
  // Without the budget: every asked-for repeat.
  o.max_seconds = 0;
  o.repeats = 5;
  EXPECT_EQ(measure::time_calls(*cpu, call, o).repeats, 5);
  // A budget never cuts below the repeats asked for when they are fewer than 3.
  o.max_seconds = 0.01;
  o.repeats = 2;
  EXPECT_EQ(measure::time_calls(*cpu, call, o).repeats, 2);
}

TEST(KernelBenchCli, FromAndLimitTakeASliceThatKeepsTheListsIndices) {
  CliResult r =
      run_cnnscale({"bench", "gemm", "--device", "cpu", "--shapes", "tests/data/bench/gemm-small.csv", "--from", "2",
                    "--limit", "2", "--json", "--repeats", "2", "--no-peak", "--quiet", "--no-results"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["problem"], 1);
  EXPECT_EQ(j["rows"][1]["problem"], 2);
  EXPECT_EQ(j["rows"][0]["trans_a"], true);  // the list's second problem (see the previous test)
  EXPECT_NE(j["source"].get<std::string>().find("(problems 2 to 3 of 4)"), std::string::npos) << j["source"];
  CliResult tail = run_cnnscale({"bench", "gemm", "--device", "cpu", "--shapes", "tests/data/bench/gemm-small.csv",
                                 "--from", "4", "--json", "--repeats", "2", "--no-peak", "--quiet", "--no-results"});
  ASSERT_EQ(tail.exit_code, 0) << tail.err;
  EXPECT_EQ(nlohmann::json::parse(tail.out)["rows"].size(), 1u);
  expect_usage_error({"bench", "gemm", "--device", "cpu", "--shapes", "tests/data/bench/gemm-small.csv", "--from", "5"},
                     {"--from 5", "the list has 4 problem(s)"});
}

}  // namespace
}  // namespace cnnscale::testing

namespace cnnscale::testing {
namespace {

// power_while against a counter of 100 W of wall time refreshed every 10 ms: work that runs for a
// fixed time (as a collective's fixed count of calls) gets a window cut at two refreshes inside it.
TEST(KernelBenchEnergy, PowerWhileCutsTheWindowAtUpdatesInsideTheWork) {
  const auto t0 = std::chrono::steady_clock::now();
  auto counter = [t0]() -> std::optional<double> {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return std::floor(s / 0.01) * 0.01 * 100.0;
  };
  auto work = [] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); };
  const auto called = std::chrono::steady_clock::now();
  const PowerWindow w = power_while(counter, work, 0.05);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - called).count();
  ASSERT_TRUE(w.watts) << w.method;
  // Each end is seen late by at most a poll (0.5 ms) or a scheduling delay: a few ms of 200 or more.
  EXPECT_NEAR(*w.watts, 100.0, 100.0 * 0.1);
  // From a refresh 0.05 s or more into the work to the last refresh before its end: the settle is
  // honoured (the window is no longer than the call less it, give or take one 10 ms refresh).
  EXPECT_GT(w.seconds, 0.15);
  EXPECT_LE(w.seconds, elapsed - 0.05 + 0.011);
  EXPECT_NE(w.method.find("second thread"), std::string::npos);
  // A counter that never moves, or none: no figure, and the work still runs (its collectives must).
  int ran = 0;
  const PowerWindow frozen = power_while([]() -> std::optional<double> { return 7.0; }, [&] { ++ran; }, 0.0);
  EXPECT_FALSE(frozen.watts);
  EXPECT_NE(frozen.method.find("did not update twice"), std::string::npos);
  const PowerWindow none = power_while(
      nullptr, [&] { ++ran; }, 0.0);
  EXPECT_FALSE(none.watts);
  EXPECT_EQ(ran, 2);
  // A failing work's error comes through, the sampling thread joined.
  EXPECT_THROW(power_while(
                   counter, [] { throw RuntimeError("peer gone"); }, 0.0),
               RuntimeError);
}

}  // namespace
}  // namespace cnnscale::testing
