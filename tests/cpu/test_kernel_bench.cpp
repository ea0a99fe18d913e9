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
