// `bench allreduce`'s energy per size, run on one process with an injected energy counter: the
// window's allreduce count, joules per byte, watts and the figures above idle following from the
// counter, no figures from an unreadable or reset counter, and the refusals of the options.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "cpu/cli_runner.hpp"
#include "experiment/report_allreduce.hpp"
#include "parallel/mpi_env.hpp"

namespace cnnscale {
namespace {

// The bench reads the process's MpiEnv (main makes it in the binary); one rank here.
const MpiEnv& one_process_env() {
  static MpiEnv* env = MpiEnv::current() ? MpiEnv::current() : new MpiEnv(nullptr, nullptr);
  return *env;
}

AllreduceBenchConfig energy_config(double window, EnergyCounterOpener opener) {
  AllreduceBenchConfig cfg;
  cfg.gpu = false;
  cfg.min_bytes = 1024;
  cfg.max_bytes = 16 * 1024;
  cfg.step_factor = 4;  // 1K, 4K, 16K
  cfg.warmup_iters = 1;
  cfg.iters = 5;
  cfg.energy_window_seconds = window;
  cfg.energy_settle_seconds = 0.01;  // the default half second would only make the tests slow
  cfg.open_energy_counter = std::move(opener);
  cfg.energy_counter_name = "test counter";
  return cfg;
}

TEST(AllreduceBenchEnergy, WindowCountFillsTheWindowAtTheTimedMean) {
  EXPECT_EQ(allreduce_energy_iters(2.0, 1e-3), 2000);
  EXPECT_EQ(allreduce_energy_iters(1.0, 3e-4), 3334);  // rounded up: the window is a minimum
  EXPECT_EQ(allreduce_energy_iters(2.0, 3.0), 1);      // one allreduce longer than the window
  EXPECT_EQ(allreduce_energy_iters(2.0, 0.0), 1);
}

// A counter of 100 W of wall time, refreshed every 10 ms, read as the kernel benches read theirs
// (power_while: between two of its updates inside the work): every window reads about 100 W, and
// each figure follows from the row's power and time per allreduce by the definitions in
// allreduce_bench.hpp.
TEST(AllreduceBenchEnergy, JoulesPerByteWattsAndAboveIdleFollowFromTheCounter) {
  one_process_env();
  std::vector<std::string> opened;
  const auto t0 = std::chrono::steady_clock::now();
  AllreduceBenchConfig cfg = energy_config(0.1, [&](const std::string& uuid) -> EnergyCounter {
    opened.push_back(uuid);
    return [t0]() -> std::optional<double> {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return std::floor(s / 0.01) * 0.01 * 100.0;
    };
  });
  cfg.energy_settle_seconds = 0.02;  // as energy_config's, but a whole refresh period later
  const AllreduceBenchResult r = run_allreduce_bench(cfg);
  ASSERT_EQ(opened, std::vector<std::string>{""});  // a CPU rank has no GPU UUID
  EXPECT_NE(r.energy_method.find("test counter"), std::string::npos) << r.energy_method;
  EXPECT_EQ(r.energy_window_seconds, 0.1);
  EXPECT_EQ(r.energy_settle_seconds, 0.02);
  // The windows' ends are seen late by at most a poll or a scheduling delay: a few ms of 100 or more.
  ASSERT_FALSE(std::isnan(r.idle_watts));
  EXPECT_NEAR(r.idle_watts, 100.0, 100.0 * 0.15);
  ASSERT_EQ(r.rows.size(), 3u);
  for (const AllreduceBenchRow& row : r.rows) {
    SCOPED_TRACE(row.bytes);
    // Whole batches of the count the timed median gives (one process: its allreduce is nearly free,
    // so more batches follow until the time asked has passed); time_us * 1e-6 may differ from the
    // bench's seconds in the last bit, moving the batch's ceil by one.
    const double needed = 0.02 + 0.1 + kAllreduceEnergyMarginSeconds;
    EXPECT_NEAR(static_cast<double>(row.energy_batch),
                static_cast<double>(allreduce_energy_iters(needed, row.time_us * 1e-6)), 1.0);
    ASSERT_GT(row.energy_batch, 0);
    EXPECT_GE(row.energy_iters, row.energy_batch);
    EXPECT_EQ(row.energy_iters % row.energy_batch, 0);
    // The window: from a refresh 0.02 s or more into the run to the last refresh before its end (the
    // run lasts `needed` at least): about needed - 0.03 s; half of `needed` leaves room for the
    // sampling thread to be scheduled late at either end on a loaded machine.
    EXPECT_GE(row.energy_seconds, needed / 2);
    EXPECT_NEAR(row.watts, 100.0, 100.0 * 0.15);
    const double bytes = static_cast<double>(row.bytes), per_allreduce = row.joules / row.watts;
    // The time base is the whole energy run, which lasted `needed` at least (not the shorter window).
    EXPECT_GE(per_allreduce * static_cast<double>(row.energy_iters), needed);
    // The same double arithmetic as the bench's: equal to rounding of a few ulps.
    EXPECT_DOUBLE_EQ(row.nj_per_byte, row.joules / bytes * 1e9);
    EXPECT_NEAR(row.dynamic_nj_per_byte, (row.watts - r.idle_watts) * per_allreduce / bytes * 1e9,
                1e-9 * std::fabs(row.nj_per_byte) + 1e-12);
  }
}

TEST(AllreduceBenchEnergy, UnreadableOrResetCounterGivesNoFigures) {
  one_process_env();
  // Never readable: the windows still run (they hold collectives on every rank), the figures are NaN.
  const AllreduceBenchResult none = run_allreduce_bench(energy_config(0.01, [](const std::string&) -> EnergyCounter {
    return []() -> std::optional<double> { return std::nullopt; };
  }));
  EXPECT_TRUE(std::isnan(none.idle_watts));
  for (const AllreduceBenchRow& row : none.rows) {
    EXPECT_GE(row.energy_iters, 1);
    EXPECT_TRUE(std::isnan(row.joules) && std::isnan(row.nj_per_byte) && std::isnan(row.watts) &&
                std::isnan(row.dynamic_nj_per_byte));
  }
  // A counter that goes backwards (a driver reset) in every window.
  auto value = std::make_shared<double>(1e6);
  const AllreduceBenchResult reset = run_allreduce_bench(energy_config(0.01, [&](const std::string&) -> EnergyCounter {
    return [value]() -> std::optional<double> { return *value -= 1.0; };
  }));
  EXPECT_TRUE(std::isnan(reset.idle_watts));
  for (const AllreduceBenchRow& row : reset.rows) EXPECT_TRUE(std::isnan(row.nj_per_byte));
  // No counter at all for this rank (the opener found none).
  const AllreduceBenchResult absent =
      run_allreduce_bench(energy_config(0.01, [](const std::string&) -> EnergyCounter { return nullptr; }));
  for (const AllreduceBenchRow& row : absent.rows) EXPECT_TRUE(std::isnan(row.joules));
}

TEST(AllreduceBenchEnergy, ZeroWindowNeverOpensTheCounter) {
  one_process_env();
  bool opened = false;
  const AllreduceBenchResult r = run_allreduce_bench(energy_config(0.0, [&](const std::string&) -> EnergyCounter {
    opened = true;
    return nullptr;
  }));
  EXPECT_FALSE(opened);
  EXPECT_EQ(r.energy_method, "");
  for (const AllreduceBenchRow& row : r.rows) {
    EXPECT_EQ(row.energy_iters, 0);
    EXPECT_TRUE(std::isnan(row.joules));
  }
  EXPECT_THROW(run_allreduce_bench(energy_config(-1.0, nullptr)), ConfigError);
}

// The counters are the GPUs': asking for energy of host-memory allreduces is an error before any work.
TEST(AllreduceBenchEnergy, CpuDeviceRefusesAnEnergyWindow) {
  testing::CliResult r = testing::run_cnnscale(
      {"bench", "allreduce", "--device", "cpu", "-b", "1K", "-e", "4K", "--energy-window", "1", "--no-results"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(r.out, "");
  ASSERT_EQ(r.err_lines().size(), 1u) << r.err;
  EXPECT_NE(r.err.find("--energy-window"), std::string::npos) << r.err;
  testing::CliResult ok = testing::run_cnnscale(
      {"bench", "allreduce", "--device", "cpu", "-b", "1K", "-e", "4K", "--energy-window", "0", "--no-results"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.out.find("nJ/B"), std::string::npos) << ok.out;
}

}  // namespace
}  // namespace cnnscale
