// Problem sets beyond DeepBench's shape files: the layers of a shipped network, the sparse sets
// (inputs, reference, refusals) and the RNN cells (the reference against cuDNN's cells by hand,
// inputs, flops, tolerance and refusals).
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

// Li et al.'s Table I, (b, i, f, k, s) per row: batch, square input, filters, square kernel, stride;
// unpadded. Its rows and nothing else, in its order; a conv set only.
TEST(KernelBenchSets, LiTableOneIsTheTablesFiveConfigurations) {
  const auto rows = measure::read_conv_shapes(measure::bench_shape_file("conv", "li-table1"));
  const std::array<std::array<int64_t, 5>, 5> table = {{{128, 128, 96, 11, 1},
                                                        {128, 128, 96, 3, 1},
                                                        {128, 32, 128, 9, 1},
                                                        {128, 16, 128, 7, 1},
                                                        {128, 13, 384, 3, 1}}};
  ASSERT_EQ(rows.size(), table.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(measure::conv_label(rows[i]));
    const ConvProblem& p = rows[i];
    EXPECT_EQ((std::array<int64_t, 5>{p.n, p.w, p.k, p.s, p.stride_w}), table[i]);
    EXPECT_EQ(p.h, p.w);
    EXPECT_EQ(p.r, p.s);
    EXPECT_EQ(p.stride_h, p.stride_w);
    EXPECT_EQ(p.pad_w + p.pad_h, 0);
  }
  // Input channels, which the table leaves out: convnet-benchmarks' for its layers, L2's for Conv2.
  EXPECT_EQ(rows[0].c, 3);
  EXPECT_EQ(rows[1].c, 64);
  EXPECT_EQ(rows[4].c, 384);
  EXPECT_EQ(measure::bench_set_source("li-table1"), "Li et al. Table I (set li-table1)");
  EXPECT_EQ(measure::bench_set_source("training"), "DeepBench training set");
  expect_usage_error({"bench", "gemm", "--device", "cpu", "--set", "li-table1"}, {"--set"});
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
