// The kernel benchmarks' pieces: DeepBench's shape sets as shipped, shape parsing and its errors,
// the host references (against hand-computed values and the adjoint identities of convolution),
// the tolerance and error arithmetic, timing statistics, the counter-aligned power window against
// a fake clock and counter, and `bench gemm|conv` on the CPU with --check, its JSON and result folder.
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

std::string src(const std::string& rel) {
  return (fs::path(CNNSCALE_SOURCE_DIR) / rel).string();
}

// Data rows of a shipped shape file (not comments, not the header).
int data_rows(const std::string& path) {
  std::ifstream in(path);
  int rows = -1;  // the header
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && l[0] != '#') ++rows;
  return rows;
}

TEST(KernelBenchShapes, DeepBenchSetsAreCompleteAndParse) {
  // DeepBench's counts per set (code/kernels/*_problems.h).
  const std::vector<std::pair<std::string, int>> expected = {
      {"gemm-training", 160},         {"gemm-inference-server", 75},
      {"gemm-inference-device", 13},  {"conv-training", 94},
      {"conv-inference-server", 107}, {"conv-inference-device", 17},
      {"rnn-training", 53},           {"rnn-inference-server", 69},
      {"rnn-inference-device", 3},    {"sparse-inference-server", 24},
      {"sparse-inference-device", 8}};
  for (const auto& [name, count] : expected)
    EXPECT_EQ(data_rows(src(fmt::format("data/bench/{}.csv", name))), count) << name;
  for (const std::string& set : measure::bench_set_names()) {
    const auto g = measure::read_gemm_shapes(measure::bench_shape_file("gemm", set));
    const auto c = measure::read_conv_shapes(measure::bench_shape_file("conv", set));
    EXPECT_EQ(static_cast<int>(g.size()), data_rows(src(fmt::format("data/bench/gemm-{}.csv", set))));
    EXPECT_EQ(static_cast<int>(c.size()), data_rows(src(fmt::format("data/bench/conv-{}.csv", set))));
    const auto r = measure::read_rnn_shapes(measure::bench_shape_file("rnn", set));
    EXPECT_EQ(static_cast<int>(r.size()), data_rows(src(fmt::format("data/bench/rnn-{}.csv", set))));
  }
  const auto rnn = measure::read_rnn_shapes(measure::bench_shape_file("rnn", "training"));
  EXPECT_EQ(rnn[0], (RnnProblem{RnnCell::Vanilla, 1760, 16, 50}));
  int cells[3] = {0, 0, 0};
  for (const RnnProblem& p : rnn) ++cells[static_cast<int>(p.cell)];
  EXPECT_GT(cells[0], 0);
  EXPECT_GT(cells[1], 0);
  EXPECT_GT(cells[2], 0);
  // Rows as DeepBench lists them: the first GEMM, a transposed one, the first convolution (a
  // 20x5 filter over a 700x161 spectrogram, stride 2) and a ResNet-style 7x7/2.
  const auto g = measure::read_gemm_shapes(measure::bench_shape_file("gemm", "training"));
  EXPECT_EQ(g[0].m, 1760);
  EXPECT_EQ(g[0].n, 16);
  EXPECT_EQ(g[0].k, 1760);
  EXPECT_FALSE(g[0].trans_a);
  EXPECT_TRUE(g[20].trans_a);
  const auto c = measure::read_conv_shapes(measure::bench_shape_file("conv", "training"));
  EXPECT_EQ(c[0].w, 700);
  EXPECT_EQ(c[0].h, 161);
  EXPECT_EQ(c[0].s, 20);  // width
  EXPECT_EQ(c[0].r, 5);
  EXPECT_EQ(c[0].stride_w, 2);
  EXPECT_EQ(c[0].out_w(), (700 - 20) / 2 + 1);
  bool seen_7x7 = false;
  for (const ConvProblem& p : c) seen_7x7 |= p.r == 7 && p.s == 7 && p.stride_h == 2 && p.c == 3 && p.h == 224;
  EXPECT_TRUE(seen_7x7);
}

TEST(KernelBenchShapes, MalformedRowsNameFileAndLine) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("kb_shapes_{}", ::getpid());
  fs::create_directories(dir);
  auto expect_error = [&](const std::string& text, const std::string& fragment) {
    const std::string path = (dir / "s.csv").string();
    std::ofstream(path) << text;
    try {
      measure::read_gemm_shapes(path);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_error("m,n,k,trans_a,trans_b\n4,4,4,0,0\n4,x,4,0,0\n", "s.csv:3: n: 'x' is not an integer");
  expect_error("# c\nm,n,k,trans_a,trans_b\n4,4,4,0,2\n", "s.csv:3: trans_b: expected 1 or 0");
  expect_error("m,n,k,trans_a,trans_b\n4,4,0,0,0\n", "s.csv:2: k: 0 is below 1");
  expect_error("m,n,k,trans_a\n", "s.csv:1: expected the header row");
  expect_error("m,n,k,trans_a,trans_b\n", "no problems listed");
  fs::remove_all(dir);
  try {
    measure::parse_conv_shape("10,10,3,1,4,5,5,0,0,1,1");  // a 5x5 filter on an unpadded 10x10 fits
    measure::parse_conv_shape("4,4,3,1,4,5,5,0,0,1,1");
    ADD_FAILURE() << "a 5x5 filter on a 4x4 input was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit"), std::string::npos) << e.what();
  }
  const GemmProblem p = measure::parse_gemm_shape("5,6,7");
  EXPECT_EQ(p.m * 100 + p.n * 10 + p.k, 567);
  EXPECT_THROW(measure::parse_gemm_shape("5,6"), ConfigError);
}

TEST(KernelBenchReference, GemmMatchesHandComputedProduct) {
  // Column-major A (2x3) = [1 2 3; 4 5 6], B (3x2) = [1 0; 0 1; 1 1]: C = [4 5; 10 11].
  GemmProblem p{2, 2, 3, false, false};
  KernelInputs in{{1, 4, 2, 5, 3, 6}, {1, 0, 1, 0, 1, 1}};
  Reference r = measure::gemm_reference(p, in);
  EXPECT_EQ(r.value, (std::vector<double>{4, 10, 5, 11}));
  EXPECT_EQ(r.magnitude, (std::vector<double>{4, 10, 5, 11}));
  // The same product with A stored transposed (3x2 column-major) and B stored transposed.
  GemmProblem t{2, 2, 3, true, true};
  KernelInputs tin{{1, 2, 3, 4, 5, 6}, {1, 0, 0, 1, 1, 1}};
  EXPECT_EQ(measure::gemm_reference(t, tin).value, (std::vector<double>{4, 10, 5, 11}));
}

TEST(KernelBenchReference, ConvolutionPassesAreAdjoint) {
  // <fwd(x, w), dy> = <x, bwd_data(dy, w)> = <w, bwd_filter(x, dy)>: the three passes sum the same
  // products, so each reference checks the others (with padding and unequal strides in play).
  ConvProblem p;
  p.n = 2, p.c = 3, p.h = 7, p.w = 6, p.k = 4, p.r = 3, p.s = 2, p.pad_h = 1, p.pad_w = 1, p.stride_h = 2,
  p.stride_w = 1;
  const KernelInputs f = measure::conv_inputs(p, ConvPass::Forward, KernelPrecision::FP32, 7);
  const KernelInputs d = measure::conv_inputs(p, ConvPass::BackwardData, KernelPrecision::FP32, 7);
  const std::vector<float>& x = f.first;
  const std::vector<float>& w = f.second;
  const std::vector<float>& dy = d.first;
  ASSERT_EQ(d.second, w);  // the same seed draws the same filter
  auto dot = [](const std::vector<double>& a, const std::vector<float>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
  };
  const double via_y = dot(measure::conv_reference(p, ConvPass::Forward, {x, w}).value, dy);
  const double via_x = dot(measure::conv_reference(p, ConvPass::BackwardData, {dy, w}).value, x);
  const double via_w = dot(measure::conv_reference(p, ConvPass::BackwardFilter, {x, dy}).value, w);
  EXPECT_NEAR(via_x, via_y, 1e-9 * std::fabs(via_y));
  EXPECT_NEAR(via_w, via_y, 1e-9 * std::fabs(via_y));
  // A hand case: one channel, 3x3 input 1..9, a 2x2 filter of ones, no padding: window sums.
  ConvProblem q;
  q.n = 1, q.c = 1, q.h = 3, q.w = 3, q.k = 1, q.r = 2, q.s = 2;
  EXPECT_EQ(measure::conv_reference(q, ConvPass::Forward, {{1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 1, 1}}).value,
            (std::vector<double>{12, 16, 24, 28}));
  EXPECT_DOUBLE_EQ(q.flops(), 2.0 * 4 * 4);
}

TEST(KernelBenchReference, InputsAreExactInTheirFormat) {
  GemmProblem p{8, 8, 8};
  for (float v : measure::gemm_inputs(p, KernelPrecision::INT8, 3).first) {
    EXPECT_EQ(v, std::floor(v));
    EXPECT_LE(std::fabs(v), 8.0f);
  }
  const auto bf = measure::gemm_inputs(p, KernelPrecision::BF16, 3).first;
  int nonzero = 0;
  for (float v : bf) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    EXPECT_EQ(bits & 0xFFFFu, 0u) << v;  // bf16 keeps the top 16 bits of a float
    nonzero += v != 0.0f;
  }
  EXPECT_GT(nonzero, 60);  // never all-zero data
}

TEST(KernelBenchCheck, ErrorsAndTolerances) {
  Reference r{{4, -2, 0}, {4, 6, 0}};
  EXPECT_EQ(measure::normalized_error({4, -2, 0}, r), 0.0);
  EXPECT_DOUBLE_EQ(measure::normalized_error({4, -1.4f, 0}, r), (2 - 1.4f) / 6.0);
  EXPECT_TRUE(std::isinf(measure::normalized_error({4, NAN, 0}, r)));
  EXPECT_GT(measure::normalized_error({4, -2, 1e-30f}, r), 1.0);  // a term-less element must be exactly 0
  EXPECT_EQ(measure::check_tolerance(KernelPrecision::INT8, 1000), 0.0);
  EXPECT_LT(measure::check_tolerance(KernelPrecision::FP32, 100),
            measure::check_tolerance(KernelPrecision::FP32, 1000));
  EXPECT_GE(measure::check_tolerance(KernelPrecision::BF16, 1), std::ldexp(1.0, -8));
  EXPECT_GE(measure::check_tolerance(KernelPrecision::TF32, 1), std::ldexp(1.0, -9));
  EXPECT_LT(measure::check_tolerance(KernelPrecision::FP16, 1), measure::check_tolerance(KernelPrecision::BF16, 1));
  const GemmProblem padded = measure::pad_for_int8({1760, 1, 35, true, false});
  EXPECT_EQ(padded.m, 1760);
  EXPECT_EQ(padded.n, 4);
  EXPECT_EQ(padded.k, 36);
  EXPECT_TRUE(padded.trans_a);
}

TEST(KernelBenchTiming, StatisticsPerCall) {
  const measure::TimingStats s = measure::timing_stats({4, 2, 8, 6}, 2);  // ms per repeat of 2 calls
  EXPECT_DOUBLE_EQ(s.median_ms, 2.5);
  EXPECT_DOUBLE_EQ(s.min_ms, 1.0);
  EXPECT_DOUBLE_EQ(s.max_ms, 4.0);
  EXPECT_EQ(s.repeats, 4);
  EXPECT_DOUBLE_EQ(measure::timing_stats({3, 1, 2}, 1).median_ms, 2.0);
  measure::TimingOptions o;
  o.min_repeat_ms = 2.0;
  o.max_calls_per_repeat = 100;
  EXPECT_EQ(measure::calls_per_repeat(0.3, o), 7);
  EXPECT_EQ(measure::calls_per_repeat(5.0, o), 1);
  EXPECT_EQ(measure::calls_per_repeat(1e-6, o), 100);
}

// A device drawing `watts` while busy and idle_watts otherwise, whose counter (joules) refreshes
// every `period` seconds of a fake clock that only sleeps advance.
struct FakeDevice {
  double t = 0.013, watts = 300, idle_watts = 60, period = 0.1;
  // A burst after idle draws burst_watts for its first burst_seconds (a power controller's lag).
  double burst_watts = 300, burst_seconds = 0;
  double busy_until = 0, busy_since = 0, energy = 0;
  int64_t enqueued = 0;
  double seconds_per_call = 1e-3;
  void advance(double dt) {
    for (double done = 0; done < dt;) {  // in steps of 0.1 ms, enough for a 0.5 ms poll
      const double step = std::min(1e-4, dt - done);
      const bool busy = t < busy_until;
      energy += step * (!busy ? idle_watts : t - busy_since < burst_seconds ? burst_watts : watts);
      t += step;
      done += step;
    }
  }
  double shown = 0, shown_at = 0;
  void refresh() {
    if (std::floor(t / period) > std::floor(shown_at / period)) {
      shown = energy;
      shown_at = t;
    }
  }
  measure::PowerWindowHooks hooks() {
    measure::PowerWindowHooks h;
    h.counter_joules = [this]() -> std::optional<double> {
      refresh();
      return shown;
    };
    h.enqueue = [this](int64_t n) {
      enqueued += n;
      if (busy_until <= t) busy_since = t;
      busy_until = std::max(busy_until, t) + static_cast<double>(n) * seconds_per_call;
    };
    h.now_seconds = [this] { return t; };
    h.sleep_seconds = [this](double s) { advance(s); };
    h.drain = [this] { advance(std::max(0.0, busy_until - t)); };
    return h;
  }
};

TEST(KernelBenchEnergy, WindowBetweenCounterUpdatesReadsTheBusyPower) {
  FakeDevice d;
  const measure::PowerWindow w = measure::measure_power_window(d.hooks(), d.seconds_per_call, 0.25);
  ASSERT_TRUE(w.watts) << w.method;
  // The window starts and ends at refreshes (within one 0.5 ms poll), so the busy power comes
  // out to the polling interval over the window: 2 x 0.5 ms / 0.3 s, about 0.3 %, not NVML's period.
  EXPECT_NEAR(*w.watts, 300.0, 300.0 * 0.01);
  EXPECT_GE(w.seconds, 0.25);
  EXPECT_LT(w.seconds, 0.25 + 0.1 + 0.002);
  EXPECT_GT(w.calls, 250);
  EXPECT_NE(w.method.find("two updates"), std::string::npos);
}

TEST(KernelBenchEnergy, SettlingSkipsTheBurstAfterIdle) {
  // 400 W for the first 0.4 s of a burst, 300 W after: a window opened at once reads the transient.
  FakeDevice quick;
  quick.burst_watts = 400;
  quick.burst_seconds = 0.4;
  const measure::PowerWindow early = measure::measure_power_window(quick.hooks(), quick.seconds_per_call, 0.25);
  ASSERT_TRUE(early.watts);
  EXPECT_GT(*early.watts, 330.0);
  FakeDevice settled = quick;
  const measure::PowerWindow w = measure::measure_power_window(settled.hooks(), settled.seconds_per_call, 0.25, 0.5);
  ASSERT_TRUE(w.watts);
  EXPECT_NEAR(*w.watts, 300.0, 3.0);
  EXPECT_NE(w.method.find("0.50 s of back-to-back calls"), std::string::npos) << w.method;
}

TEST(KernelBenchEnergy, FrozenOrMissingCounterGivesNoFigure) {
  FakeDevice d;
  measure::PowerWindowHooks h = d.hooks();
  h.counter_joules = []() -> std::optional<double> { return 5.0; };  // never refreshes
  measure::PowerWindow w = measure::measure_power_window(h, d.seconds_per_call, 0.25);
  EXPECT_FALSE(w.watts);
  EXPECT_NE(w.method.find("did not update"), std::string::npos);
  h.counter_joules = []() -> std::optional<double> { return std::nullopt; };
  w = measure::measure_power_window(h, d.seconds_per_call, 0.25);
  EXPECT_FALSE(w.watts);
  EXPECT_EQ(w.calls, 0);
}

TEST(KernelBenchMarks, FastestAndLowestEnergyPerProblemAndPass) {
  auto row = [](int64_t problem, const std::string& pass, double ms, std::optional<double> j, bool supported = true) {
    measure::KernelBenchRow r;
    r.problem = problem;
    r.pass = pass;
    r.supported = supported;
    r.timing.median_ms = ms;
    r.timing.repeats = supported ? 3 : 0;
    r.joules_per_call = j;
    return r;
  };
  std::vector<measure::KernelBenchRow> rows = {row(0, "fwd", 2.0, 0.5), row(0, "fwd", 1.0, 0.7),
                                               row(0, "fwd", 0.1, {}, false), row(0, "bwd_data", 3.0, 0.2),
                                               row(1, "fwd", 5.0, {})};
  measure::mark_best(rows);
  EXPECT_TRUE(rows[1].fastest);
  EXPECT_TRUE(rows[0].lowest_energy);  // the slower one drew less energy
  EXPECT_FALSE(rows[2].fastest);       // unsupported never wins
  EXPECT_TRUE(rows[3].fastest && rows[3].lowest_energy);
  EXPECT_TRUE(rows[4].fastest);
  EXPECT_FALSE(rows[4].lowest_energy);  // no energy figure, no energy winner
}

TEST(KernelBenchCli, CpuGemmChecksEveryTransposeAndSavesAFolder) {
  const fs::path root = fs::temp_directory_path() / fmt::format("kb_results_{}", ::getpid());
  fs::remove_all(root);
  CliResult r = run_cnnscale({"bench", "gemm", "--device", "cpu", "--shapes", "tests/data/bench/gemm-small.csv",
                              "--check", "--json", "--repeats", "3", "--warmup", "1", "--quiet", "--results",
                              root.string(), "--experiment", "kb"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kind"], "gemm");
  EXPECT_EQ(j["precision"], "fp32");
  EXPECT_GT(j["peak_tflops"].get<double>(), 0.0);
  ASSERT_EQ(j["rows"].size(), 4u);  // one OpenBLAS variant per problem
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["check"], "ok") << row.dump();
    EXPECT_GT(row["median_ms"].get<double>(), 0.0);
    EXPECT_GT(row["tflops"].get<double>(), 0.0);
    EXPECT_TRUE(row["fastest"].get<bool>());
  }
  EXPECT_EQ(j["rows"][1]["trans_a"], true);
  EXPECT_EQ(j["rows"][3]["trans_b"], true);
  // The result folder: summary.json (the same object), cases.csv (a row per variant), cases.h5.
  std::vector<fs::path> folders;
  for (const auto& e : fs::directory_iterator(root / "kb" / "bench")) folders.push_back(e.path());
  ASSERT_EQ(folders.size(), 1u);
  EXPECT_EQ(folders[0].filename().string().rfind("gemm-fp32-", 0), 0u) << folders[0];
  EXPECT_TRUE(fs::exists(folders[0] / "summary.json"));
  EXPECT_TRUE(fs::exists(folders[0] / "cases.h5"));
  std::ifstream csv(folders[0] / "cases.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header.rfind("problem,m,n,k,trans_a,trans_b,padded_from,library,algorithm", 0), 0u) << header;
  int lines = 0;
  for (std::string l; std::getline(csv, l);) ++lines;
  EXPECT_EQ(lines, 4);
  fs::remove_all(root);
}

TEST(KernelBenchCli, CpuConvChecksAllThreePasses) {
  // 9x8 input, 3 channels, batch 2, 4 filters of 3 (wide) x 2 (high), padding 1x0, strides 1x2.
  CliResult r = run_cnnscale({"bench", "conv", "--device", "cpu", "--shape", "9,8,3,2,4,3,2,1,0,1,2", "--check",
                              "--json", "--repeats", "3", "--no-peak", "--quiet", "--no-results"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 3u);
  std::vector<std::string> passes;
  for (const auto& row : j["rows"]) {
    passes.push_back(row["pass"]);
    EXPECT_EQ(row["check"], "ok") << row.dump();
    EXPECT_LE(row["check_error"].get<double>(), row["check_tolerance"].get<double>());
    EXPECT_EQ(row["s"], 3);
    EXPECT_EQ(row["stride_h"], 2);
  }
  EXPECT_EQ(passes, (std::vector<std::string>{"fwd", "bwd_data", "bwd_filter"}));
  EXPECT_TRUE(j["peak_tflops"].is_null());
  // The table names the pass and the problem.
  CliResult t = run_cnnscale({"bench", "conv", "--device", "cpu", "--shape", "9,8,3,2,4,3,2,1,0,1,2", "--pass", "fwd",
                              "--repeats", "2", "--no-peak", "--quiet", "--no-results"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("n=2 c=3 8x9 k=4 2x3/2x1 pad 0x1"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("im2col + cblas_sgemm"), std::string::npos) << t.out;
}

TEST(KernelBenchCli, BadRequestsFailBeforeAnyWork) {
  expect_usage_error({"bench", "gemm", "--device", "cpu", "--shape", "5,x,7"}, {"--shape", "n: 'x' is not an integer"});
  expect_usage_error({"bench", "gemm", "--device", "cpu", "--precision", "bf16", "--shape", "8,8,8"},
                     {"fp32 only", "bf16"});
  expect_usage_error({"bench", "gemm", "--device", "cpu", "--precision", "fp8", "--shape", "8,8,8"},
                     {"--precision", "fp8"});
  expect_usage_error({"bench", "gemm", "--set", "training", "--shape", "8,8,8"},
                     {"one of --set, --shapes, --shape and --net"});
  expect_usage_error({"bench", "conv", "--device", "cpu", "--shape", "8,8,1,1,1,3,3,0,0,1,1", "--pass", "sideways"},
                     {"--pass", "sideways"});
  expect_usage_error({"bench", "conv", "--device", "cpu", "--shapes", "tests/data/bench/gemm-small.csv"},
                     {"gemm-small.csv:2: expected the header row"});
  // Refused before the backend starts or the peak runs (one line on stderr, no progress line).
  expect_usage_error({"bench", "conv", "--device", "cpu", "--precision", "int8", "--shape", "8,8,1,1,1,3,3,0,0,1,1"},
                     {"int8"});
  expect_usage_error({"bench", "conv", "--device", "cpu", "--shape", "8,8,1,1,1,3,3,0,0,1,1", "--pass", "fwd,fwd"},
                     {"--pass", "fwd is listed twice"});
  expect_usage_error({"bench", "gemm", "--device", "cpu", "--shape", "99999999999,1,1"}, {"m:", "above"});
  expect_usage_error({"bench", "gemm", "--device", "cpu", "--shape", "100000,100000,4"}, {"operand C", "2^31"});
}

}  // namespace
}  // namespace cnnscale::testing

namespace cnnscale::testing {
namespace {

TEST(KernelBenchSweep, OneAxisAroundLiEtAlsBase) {
  const measure::ConvSweepBase base = measure::parse_sweep_base("64,128,64,11,1");
  EXPECT_EQ(base.c, 3);  // an image layer's channels unless given
  const auto ks = measure::conv_sweep("k", {1, 5, 11}, base);
  ASSERT_EQ(ks.size(), 3u);
  for (const ConvProblem& p : ks) {
    EXPECT_EQ(p.n, 64);
    EXPECT_EQ(p.h, 128);
    EXPECT_EQ(p.k, 64);
    EXPECT_EQ(p.r, p.s);
    EXPECT_EQ(measure::sweep_value("k", p), p.r);
  }
  EXPECT_EQ(ks[2].out_h(), 118);  // unpadded, stride 1
  const auto ss = measure::conv_sweep("s", measure::default_sweep_values("s"), base);
  EXPECT_EQ(ss.back().stride_h, 11);
  EXPECT_EQ(ss.back().out_h(), (128 - 11) / 11 + 1);
  EXPECT_THROW(measure::conv_sweep("q", {1}, base), ConfigError);
  EXPECT_THROW(measure::conv_sweep("k", {200}, base), ConfigError);  // larger than the input
  EXPECT_THROW(measure::parse_sweep_base("64,128,64"), ConfigError);
  CliResult r = run_cnnscale({"bench", "conv", "--device", "cpu", "--sweep", "f", "--sweep-base", "2,12,4,3,1,2",
                              "--sweep-values", "4,8", "--pass", "fwd", "--check", "--json", "--no-peak", "--quiet",
                              "--no-results", "--repeats", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["sweep_axis"], "f");
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][1]["sweep_value"], 8);
  EXPECT_EQ(j["rows"][1]["k"], 8);
  EXPECT_EQ(j["rows"][1]["check"], "ok");
  expect_usage_error({"bench", "conv", "--device", "cpu", "--sweep-values", "4,8"}, {"need --sweep"});
}

}  // namespace
}  // namespace cnnscale::testing

namespace cnnscale::testing {
namespace {

TEST(KernelBenchReport, TablesAndSweepFiguresFromResultFolders) {
  const fs::path root = fs::temp_directory_path() / fmt::format("kb_report_{}", ::getpid());
  fs::remove_all(root);
  const std::vector<std::string> common = {"--device",  "cpu",         "--repeats",    "2", "--quiet",
                                           "--results", root.string(), "--experiment", "k"};
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.end(), common.begin(), common.end());
    CliResult r = run_cnnscale(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  };
  run({"bench", "gemm", "--shapes", "tests/data/bench/gemm-small.csv"});
  run({"bench", "conv", "--sweep", "k", "--sweep-base", "2,12,4,3,1,2", "--sweep-values", "1,3,5", "--no-peak"});
  // A benchmark without a peak (and, on the CPU, without energy): its missing figures are blanks.
  run({"bench", "conv", "--shape", "9,8,3,2,4,3,2,1,0,1,2", "--no-peak"});
  const bool plots = std::system("/usr/bin/python3 -c 'import matplotlib, numpy' >/dev/null 2>&1") == 0;
  std::vector<std::string> args = {"report", root.string()};
  if (!plots) args.push_back("--no-plots");
  CliResult r = run_cnnscale(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path out = root / "report";
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  // The summary: the GEMM benchmark (4 problems, one OpenBLAS variant each, a measured peak) and the
  // one-shape conv benchmark; the sweep has its own table, not a summary row.
  const std::string summary = slurp(out / "kernels.csv");
  EXPECT_NE(summary.find("gemm fp32,tests/data/bench/gemm-small.csv"), std::string::npos) << summary;
  EXPECT_NE(summary.find("4 / 4"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("sweep k"), std::string::npos) << summary;
  EXPECT_NE(summary.find("conv fp32 NCHW,--shape"), std::string::npos) << summary;
  const std::string cases = slurp(out / "kernel_cases.md");
  for (const char* file : {"kernels.md", "kernels.csv", "kernel_cases.md", "kernel_cases.csv", "conv_sweep.csv"}) {
    const std::string text = slurp(out / file);
    EXPECT_EQ(text.find("nan"), std::string::npos) << file << ":\n" << text;
  }
  EXPECT_NE(cases.find("m=17 n=9 k=33 TN"), std::string::npos) << cases;
  EXPECT_NE(cases.find("OpenBLAS cblas_sgemm"), std::string::npos) << cases;
  // The sweep in long form: 3 values x 3 passes x 1 algorithm.
  const std::string sweep = slurp(out / "conv_sweep.csv");
  int lines = 0;
  for (char c : sweep) lines += c == '\n';
  EXPECT_EQ(lines, 1 + 9) << sweep;
  EXPECT_NE(sweep.find("conv fp32 NCHW,k,5,bwd_filter,im2col + cblas_sgemm,"), std::string::npos) << sweep;
  if (plots) {
    EXPECT_TRUE(fs::exists(out / "conv_sweep_time.png"));
    EXPECT_TRUE(fs::exists(out / "conv_sweep_memory.png"));
    EXPECT_NE(slurp(out / "report.md").find("Li et al., Fig. 3"), std::string::npos);
    // Problems by share of the peak: the GEMM benchmark measured one. Energy: drawn where the CPU's
    // RAPL counters were readable, else named as not drawn with the reason.
    EXPECT_TRUE(fs::exists(out / "kernels_peak.png"));
    EXPECT_TRUE(fs::exists(out / "kernels_energy.png") ||
                slurp(out / "report.md").find("`kernels_energy.png` not drawn: no benchmark read the energy") !=
                    std::string::npos)
        << slurp(out / "report.md");
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace cnnscale::testing

namespace cnnscale::testing {
namespace {

TEST(KernelBenchNet, LayersOfAShippedNetwork) {
  // LeNet: two convolutions and two fully connected layers, as DeepBench writes them.
  const NetProblems lenet = net_problems("lenet", 8);
  ASSERT_EQ(lenet.convs.size(), 2u);
  EXPECT_EQ(lenet.conv_names, (std::vector<std::string>{"conv1", "conv2"}));
  EXPECT_EQ(lenet.convs[1].c, 20);
  EXPECT_EQ(lenet.convs[1].h, 12);
  EXPECT_EQ(lenet.convs[1].k, 50);
  EXPECT_EQ(lenet.convs[1].r, 5);
  EXPECT_EQ(lenet.convs[1].n, 8);
  ASSERT_EQ(lenet.gemms.size(), 2u);
  EXPECT_EQ(lenet.gemms[0].m, 500);  // outputs
  EXPECT_EQ(lenet.gemms[0].n, 8);    // batch
  EXPECT_EQ(lenet.gemms[0].k, 800);  // 50 x 4 x 4 inputs
  EXPECT_TRUE(lenet.gemms[0].trans_a);
  // ResNet-50's 53 convolutions are 23 distinct shapes; repeats are counted in the name.
  const NetProblems resnet = net_problems("resnet50", 1);
  EXPECT_EQ(resnet.convs.size(), 23u);
  EXPECT_EQ(resnet.conv_names[2], "res2_1_conv2 (x3)");
  int total = 0;
  for (const std::string& n : resnet.conv_names) {
    const size_t x = n.find("(x");
    total += x == std::string::npos ? 1 : std::stoi(n.substr(x + 2));
  }
  EXPECT_EQ(total, 53);
  // CaffeNet's grouped convolutions are named, not benchmarked as something else.
  const NetProblems caffenet = net_problems("caffenet", 1);
  EXPECT_EQ(caffenet.skipped, (std::vector<std::string>{"conv2 (grouped)", "conv4 (grouped)", "conv5 (grouped)"}));
  CliResult r = run_cnnscale({"bench", "conv", "--device", "cpu", "--net", "lenet", "--batch", "2", "--pass", "fwd",
                              "--check", "--json", "--no-peak", "--quiet", "--no-results", "--repeats", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["source"], "lenet at batch 2");
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][1]["label"].get<std::string>().rfind("conv2: n=2 c=20 12x12 k=50", 0), 0u) << j["rows"][1];
  EXPECT_EQ(j["rows"][1]["check"], "ok");
  expect_usage_error({"bench", "gemm", "--device", "cpu", "--shape", "8,8,8", "--batch", "4"},
                     {"--batch applies to --net"});
}

}  // namespace
}  // namespace cnnscale::testing

namespace cnnscale::testing {
namespace {

TEST(KernelBenchSparse, SetsInputsReferenceAndRefusals) {
  const auto server = measure::read_sparse_shapes(measure::bench_shape_file("sparse", "inference-server"));
  const auto device = measure::read_sparse_shapes(measure::bench_shape_file("sparse", "inference-device"));
  EXPECT_EQ(server.size(), 24u);
  EXPECT_EQ(device.size(), 8u);
  EXPECT_EQ(server[0].m, 7680);
  EXPECT_EQ(server[0].n, 1);
  EXPECT_EQ(server[0].k, 2560);
  EXPECT_DOUBLE_EQ(server[0].sparsity, 0.95);
  // A's density: each element kept with probability 0.1 over 60,000 cells, so nnz is 6,000 with a
  // standard deviation of sqrt(60000 * 0.1 * 0.9) = 73; 4 sigma either way.
  const SparseProblem p{200, 3, 300, 0.9};
  const SparseInputs in = measure::sparse_inputs(p, 1);
  EXPECT_NEAR(static_cast<double>(in.nnz()), 6000.0, 4 * 73.5);
  ASSERT_EQ(in.row_ptr.size(), 201u);
  EXPECT_EQ(in.row_ptr.back(), in.nnz());
  for (size_t i = 0; i + 1 < in.row_ptr.size(); ++i) EXPECT_LE(in.row_ptr[i], in.row_ptr[i + 1]);
  for (int32_t c : in.col_idx) EXPECT_TRUE(c >= 0 && c < 300);
  EXPECT_EQ(in.b.size(), 900u);
  // A = [1 0 2; 0 3 0] (CSR), B = [1 1; 1 0; 1 2] column-major: C = [3 5; 3 0].
  SparseInputs hand{{0, 2, 3}, {0, 2, 1}, {1, 2, 3}, {1, 1, 1, 1, 0, 2}};
  const Reference r = measure::sparse_reference({2, 2, 3, 0.5}, hand);
  EXPECT_EQ(r.value, (std::vector<double>{3, 3, 5, 0}));
  EXPECT_EQ(measure::sparse_label({7680, 1, 2560, 0.95}), "m=7680 n=1 k=2560 95% zeros");
  // cuSPARSE is GPU-only; fp32 only; sparsity is a fraction; refused before any work.
  expect_usage_error({"bench", "spmm", "--device", "cpu", "--shape", "100,2,50,0.9"}, {"cuSPARSE", "--device gpu"});
  expect_usage_error({"bench", "spmm", "--device", "gpu", "--precision", "bf16", "--shape", "100,2,50,0.9"},
                     {"--precision bf16", "fp32"});
  expect_usage_error({"bench", "spmm", "--device", "gpu", "--shape", "100,2,50,1.5"}, {"sparsity", "[0, 1)"});
  expect_usage_error({"bench", "spmm", "--device", "gpu", "--set", "training"}, {"--set"});
}

}  // namespace
}  // namespace cnnscale::testing

namespace cnnscale::testing {
namespace {

TEST(KernelBenchSparse, TableNamesWhereSparseWins) {
  measure::KernelBenchResult r;
  r.kind = "spmm";
  r.precision = "fp32";
  auto row = [](int64_t problem, double sparsity, double speedup) {
    measure::KernelBenchRow x;
    x.problem = problem;
    x.sparse = {100, 8, 200, sparsity};
    x.speedup_vs_dense = speedup;
    x.library = "cuSPARSE";
    x.timing.median_ms = 1.0;
    x.timing.repeats = 1;
    return x;
  };
  // 90 %: slower than dense; 95 %: faster with one of its variants; 99 %: faster.
  r.rows = {row(0, 0.9, 0.6), row(1, 0.95, 0.9), row(1, 0.95, 1.4), row(2, 0.99, 3.0)};
  const std::string t = report::kernel_bench_table(r);
  EXPECT_NE(t.find("m=100 n=8 k=200: 90%: 0.60x 95%: 1.40x 99%: 3.00x; sparse wins from 95% zeros"), std::string::npos)
      << t;
  r.rows = {row(0, 0.9, 0.6), row(1, 0.99, 0.8)};
  EXPECT_NE(report::kernel_bench_table(r).find("sparse never wins here"), std::string::npos);
}

}  // namespace
}  // namespace cnnscale::testing

namespace cnnscale::testing {
namespace {

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

// One unit, one sequence, two steps, by hand. Each gate gets its own bias, so a cell that read the
// gates in another order than cuDNN's (lstm: input, forget, cell, output; gru: reset, update, new)
// would give other numbers.
TEST(KernelBenchRnn, ReferenceFollowsCudnnsCellsByHand) {
  auto inputs = [](int gates) {
    RnnInputs in;
    in.x = {1.0f, -1.0f};
    in.w.assign(static_cast<size_t>(gates), {0.0f});
    in.r.assign(static_cast<size_t>(gates), {0.0f});
    in.bw.assign(static_cast<size_t>(gates), {0.0f});
    in.br.assign(static_cast<size_t>(gates), {0.0f});
    return in;
  };
  auto sig = [](double a) { return 1.0 / (1.0 + std::exp(-a)); };
  {  // vanilla (ReLU): h1 = relu(0.5 + 0.1 + 0.1) = 0.7; h2 = relu(-0.5 + 0.25 * 0.7 + 0.2) = 0
    RnnInputs in = inputs(1);
    in.w[0] = {0.5f};
    in.r[0] = {0.25f};
    in.bw[0] = {0.1f};
    in.br[0] = {0.1f};
    const measure::Reference r = measure::rnn_reference({RnnCell::Vanilla, 1, 1, 2}, in);
    EXPECT_NEAR(r.value[0], 0.7, 1e-6);
    EXPECT_EQ(r.value[1], 0.0);
    EXPECT_EQ(r.magnitude[0], 1.0);
  }
  {  // lstm: input gate sigma(1), forget sigma(0.5), cell candidate tanh(-0.5), output sigma(-1)
    RnnInputs in = inputs(4);
    in.bw = {{1.0f}, {0.5f}, {-0.5f}, {-1.0f}};
    const measure::Reference r = measure::rnn_reference({RnnCell::Lstm, 1, 1, 2}, in);
    const double c1 = sig(1) * std::tanh(-0.5), c2 = sig(0.5) * c1 + sig(1) * std::tanh(-0.5);
    EXPECT_NEAR(r.value[0], sig(-1) * std::tanh(c1), 1e-12);
    EXPECT_NEAR(r.value[1], sig(-1) * std::tanh(c2), 1e-12);
  }
  {  // gru: reset sigma(2) scales only the recurrent part of the new gate; update sigma(0.5)
    RnnInputs in = inputs(3);
    in.x = {1.0f, 1.0f};
    in.bw = {{2.0f}, {0.5f}, {0.0f}};
    in.w[2] = {1.0f};
    in.r[2] = {1.0f};
    in.br[2] = {0.25f};
    const measure::Reference r = measure::rnn_reference({RnnCell::Gru, 1, 1, 2}, in);
    const double z = sig(0.5), reset = sig(2);
    const double h1 = (1 - z) * std::tanh(1 + reset * 0.25);
    const double h2 = (1 - z) * std::tanh(1 + reset * (h1 + 0.25)) + z * h1;
    EXPECT_NEAR(r.value[0], h1, 1e-12);
    EXPECT_NEAR(r.value[1], h2, 1e-12);
  }
}

TEST(KernelBenchRnn, InputsFlopsToleranceAndRefusals) {
  const RnnProblem p{RnnCell::Lstm, 32, 4, 5};
  const RnnInputs in = measure::rnn_inputs(p, KernelPrecision::BF16, 3);
  ASSERT_EQ(in.w.size(), 4u);
  EXPECT_EQ(in.x.size(), 5u * 4 * 32);
  for (const auto& w : in.w)
    for (float v : w) {
      EXPECT_LE(std::fabs(v), 0.5f / 32);
      EXPECT_EQ(v, round_to(DType::BF16, v));  // exact in the format the device reads
    }
  // DeepBench's count: 2 x gates x hidden x (input + hidden) x batch x steps, training 3x.
  EXPECT_DOUBLE_EQ(p.flops(false), 2.0 * 4 * 32 * 64 * 4 * 5);
  EXPECT_DOUBLE_EQ(p.flops(true), 3 * p.flops(false));
  // The fp32 bound is far below what a wrong gate or a transposed matrix makes (order 0.1).
  EXPECT_LT(measure::rnn_check_tolerance(KernelPrecision::FP32, p), 1e-3);
  EXPECT_GT(measure::rnn_check_tolerance(KernelPrecision::BF16, p),
            measure::rnn_check_tolerance(KernelPrecision::FP32, p));
  // The ReLU cell's errors shrink by half a step, so its bound stays near two steps' worth over
  // DeepBench's long sequences; the gated cells' bounds grow with the sequence.
  const RnnProblem long_relu{RnnCell::Vanilla, 32, 1, 672};
  EXPECT_LT(measure::rnn_check_tolerance(KernelPrecision::FP32, long_relu),
            2 * 6 * measure::check_tolerance(KernelPrecision::FP32, 66) * 1.0001);
  EXPECT_GT(measure::rnn_check_tolerance(KernelPrecision::FP32, RnnProblem{RnnCell::Gru, 32, 1, 40}),
            measure::rnn_check_tolerance(KernelPrecision::FP32, RnnProblem{RnnCell::Gru, 32, 1, 20}));
  // Negative control: the same inputs with two gates' matrices swapped (the mistake a wrong gate
  // order makes) fail the fp32 check for every cell. The inputs are seeded and the reference is
  // double, so the margins are the same on any machine: about 2500x the bound for the ReLU cell,
  // 37x for GRU and 4.4x for LSTM, whose bound carries the widest worst-case gain.
  for (RnnCell cell : {RnnCell::Vanilla, RnnCell::Lstm, RnnCell::Gru}) {
    const RnnProblem q{cell, 32, 4, 5};
    const RnnInputs good = measure::rnn_inputs(q, KernelPrecision::FP32, 3);
    RnnInputs bad = good;
    if (cell == RnnCell::Vanilla)
      std::swap(bad.w[0], bad.r[0]);  // one gate: input and recurrent matrices swapped
    else
      std::swap(bad.w[0], bad.w[1]);
    const measure::Reference ref = measure::rnn_reference(q, good);
    const measure::Reference wrong = measure::rnn_reference(q, bad);
    std::vector<float> out(wrong.value.begin(), wrong.value.end());
    EXPECT_GT(measure::normalized_error(out, ref), measure::rnn_check_tolerance(KernelPrecision::FP32, q))
        << rnn_cell_name(cell);
  }
  EXPECT_EQ(measure::rnn_label(p), "lstm h=32 n=4 t=5");
  EXPECT_EQ(measure::parse_rnn_shape("512,16,25,gru"), (RnnProblem{RnnCell::Gru, 512, 16, 25}));
  expect_usage_error({"bench", "rnn", "--device", "cpu", "--shape", "64,4,5,lstm"}, {"runs on a GPU"});
  expect_usage_error({"bench", "rnn", "--device", "gpu", "--shape", "64,4,5,cnn"}, {"--shape", "cell 'cnn'"});
  expect_usage_error({"bench", "rnn", "--device", "gpu", "--shape", "64,4,5,lstm", "--pass", "sideways"},
                     {"--pass", "sideways"});
  expect_usage_error({"bench", "rnn", "--device", "gpu", "--shape", "64,4,5,lstm", "--precision", "int8"}, {"int8"});
  const fs::path bad = fs::temp_directory_path() / fmt::format("rnn_bad_{}.csv", ::getpid());
  std::ofstream(bad) << "hidden,batch,time_steps,cell\n64,4,5,lstm\n64,0,5,gru\n";
  EXPECT_THROW(
      {
        try {
          measure::read_rnn_shapes(bad.string());
        } catch (const ConfigError& e) {
          EXPECT_NE(std::string(e.what()).find(":3: batch: 0 is below 1"), std::string::npos) << e.what();
          throw;
        }
      },
      ConfigError);
  fs::remove(bad);
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

namespace cnnscale::testing {
namespace {

// A list run in two parts (--limit, then --from) is one benchmark in the report's summary, with how
// much of the list the parts cover; a part run again replaces its cases rather than adding to them.
TEST(KernelBenchReport, AListSplitOverRunsIsOneBenchmark) {
  const fs::path root = fs::temp_directory_path() / fmt::format("kb_split_{}", ::getpid());
  fs::remove_all(root);
  auto run = [&](std::vector<std::string> args) {
    for (const char* a : {"--device", "cpu", "--repeats", "2", "--quiet", "--no-peak", "--experiment", "k"})
      args.push_back(a);
    args.push_back("--results");
    args.push_back(root.string());
    CliResult r = run_cnnscale(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  };
  run({"bench", "gemm", "--shapes", "tests/data/bench/gemm-small.csv", "--limit", "2"});
  run({"bench", "gemm", "--shapes", "tests/data/bench/gemm-small.csv", "--from", "2"});  // overlaps problem 2
  CliResult r = run_cnnscale({"report", root.string(), "--no-plots"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = read_csv((root / "report" / "kernels.csv").string());
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].at("benchmark"), "gemm fp32");
  EXPECT_EQ(rows[0].at("source"), "tests/data/bench/gemm-small.csv (4 of 4 problems, 2 runs)");
  EXPECT_EQ(rows[0].at("problems"), "4");
  EXPECT_EQ(rows[0].at("variants"), "4 / 4");
  fs::remove_all(root);
}

}  // namespace
}  // namespace cnnscale::testing
