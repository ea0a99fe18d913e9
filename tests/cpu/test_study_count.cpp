// The study's counting (net/study_count.hpp, Castro et al. Eqs. 1-9), layer by layer against hand
// arithmetic of the equations; what study_layers reads from a network file; and netinfo's
// `--counting study` output beside its own (whose default output stays as it was).
#include <gtest/gtest.h>

#include "cpu/cli_runner.hpp"
#include "net/netinfo.hpp"
#include "net/study_count.hpp"

namespace cnnscale {
namespace {

std::string network_file(const std::string& name) {
  return std::string(CNNSCALE_SOURCE_DIR) + "/networks/" + name + ".yaml";
}

StudyLayer layer(const std::string& type, int64_t input, int64_t output) {
  StudyLayer l;
  l.type = type;
  l.input = l.first_input = input;
  l.output = output;
  return l;
}

void expect_count(const StudyLayer& l, int64_t ops, int64_t read, int64_t written) {
  StudyCount c = study_count(l);
  EXPECT_EQ(c.ops, ops) << l.type;
  EXPECT_EQ(c.read, read) << l.type;
  EXPECT_EQ(c.written, written) << l.type;
}

TEST(StudyCount, ConvolutionEq1WithBiasAdds) {
  // CaffeNet conv1: 96 filters 11x11 over 3 channels, 55x55 outputs from 3x227x227.
  StudyLayer l = layer("Convolution", 3 * 227 * 227, 96 * 55 * 55);
  l.out_channels = 96;
  l.weights = 11 * 11 * 3 * 96;
  l.bias = true;
  l.params = l.weights + 96;
  // Eq. 1: (k_w k_h)(w_out h_out) ch_in ch_out, + ch_out adds for the bias; Eq. 8: input +
  // parameters; Eq. 9: output.
  expect_count(l, 121LL * 55 * 55 * 3 * 96 + 96, 3 * 227 * 227 + 34944, 96 * 55 * 55);
  l.bias = false;
  l.params = l.weights;
  expect_count(l, 121LL * 55 * 55 * 3 * 96, 3 * 227 * 227 + 34848, 96 * 55 * 55);
  // Two groups (CaffeNet conv2): each output sees ch_in / 2 channels, the weights say so.
  StudyLayer g = layer("Convolution", 96 * 27 * 27, 256 * 27 * 27);
  g.out_channels = 256;
  g.weights = 5 * 5 * 48 * 256;
  g.params = g.weights;
  expect_count(g, 25LL * 27 * 27 * 48 * 256, 96 * 27 * 27 + 307200, 256 * 27 * 27);
}

TEST(StudyCount, FullyConnectedEq2PoolingEq3) {
  StudyLayer fc = layer("InnerProduct", 256 * 6 * 6, 4096);
  fc.out_channels = 4096;
  fc.weights = 9216LL * 4096;
  fc.params = fc.weights + 4096;
  // Eq. 2: (w_in h_in) ch_in ch_out; no bias adds (the text gives them to convolutions only), but
  // the bias is read with the weights.
  expect_count(fc, 9216LL * 4096, 9216 + 9216LL * 4096 + 4096, 4096);

  StudyLayer pool = layer("Pooling", 96 * 55 * 55, 96 * 27 * 27);
  pool.window = 9;
  expect_count(pool, 9 * 27 * 27 * 96, 96 * 55 * 55, 96 * 27 * 27);  // Eq. 3: (k_w k_h)(w_out h_out) ch
  StudyLayer global = layer("Pooling", 512 * 2 * 2, 512);
  global.window = 4;  // a global pool's window is the plane: one operation per input value
  expect_count(global, 512 * 4, 2048, 512);
}

TEST(StudyCount, ElementwiseEqs4To7AndTheLayersTheEquationsLeaveOut) {
  expect_count(layer("ReLU", 1000, 1000), 1000, 1000, 1000);          // Eq. 4
  expect_count(layer("Dropout", 4096, 4096), 4096, 4096, 4096);       // Eq. 5
  StudyLayer bn = layer("BatchNorm", 64 * 16 * 16, 64 * 16 * 16);
  bn.params = 128;  // scale and shift
  expect_count(bn, 2 * 16384, 16384 + 128, 16384);                    // Eq. 6
  // Eq. 7: three per class; the loss layer also reads the label, and writes the K probabilities.
  StudyLayer softmax = layer("SoftmaxWithLoss", 1000, 1);
  softmax.input = 1001;
  expect_count(softmax, 3000, 1001, 1000);
  // LRN: local_size multiply-adds, an add, a power and two divisions per value (Netscope's count).
  StudyLayer lrn = layer("LRN", 96 * 27 * 27, 96 * 27 * 27);
  lrn.local_size = 5;
  expect_count(lrn, 9 * 69984, 69984, 69984);
  // An Eltwise sum of two bottoms: one addition per value; it reads both.
  StudyLayer sum = layer("Eltwise", 500, 500);
  sum.input = 1000;
  expect_count(sum, 500, 1000, 500);
  expect_count(layer("Flatten", 100, 100), 0, 100, 100);
  StudyLayer accuracy = layer("Accuracy", 1001, 2);
  accuracy.runs_in_training = false;  // test-phase only: not part of a training forward
  expect_count(accuracy, 0, 0, 0);
}

TEST(StudyCount, FusedReluCountsAsItsOwnLayer) {
  StudyLayer l = layer("Convolution", 8, 4 * 3 * 3);
  l.out_channels = 4;
  l.weights = 2 * 2 * 2 * 4;
  l.params = l.weights;
  l.fused_relu = true;
  expect_count(l, 32 * 9 + 36, 8 + 32 + 36, 36 + 36);
}

TEST(StudyCount, StudyLayersReadTheNetworkFile) {
  NetSpec spec = NetSpec::load(network_file("caffenet"));
  std::vector<StudyLayer> layers = study_layers(spec);
  ASSERT_EQ(layers.size(), spec.layers().size());
  auto named = [&](const std::string& name) {
    for (size_t i = 0; i < layers.size(); ++i)
      if (spec.layers()[i].name == name) return layers[i];
    throw std::runtime_error("no layer " + name);
  };
  EXPECT_EQ(named("conv2").weights, 5 * 5 * 48 * 256);
  EXPECT_TRUE(named("conv2").bias);
  EXPECT_EQ(named("conv2").out_channels, 256);
  EXPECT_EQ(named("pool1").window, 9);
  EXPECT_EQ(named("norm1").local_size, 5);
  EXPECT_EQ(named("fc6").weights, 9216LL * 4096);
  EXPECT_EQ(named("loss").first_input, 1000);
  EXPECT_FALSE(named("accuracy").runs_in_training);
  // A global pool's window is its input plane (ResNet-34: 512 channels at 7x7); layers without a
  // bias add none.
  NetSpec resnet = NetSpec::load(network_file("resnet34"));
  std::vector<StudyLayer> res = study_layers(resnet);
  ASSERT_EQ(resnet.layers()[res.size() - 4].name, "pool5");
  EXPECT_EQ(res[res.size() - 4].window, 49);
  EXPECT_FALSE(res[0].bias);
  EXPECT_EQ(study_count(res[0]).ops, resnet.layers()[0].cost.forward_macs);
}

TEST(StudyCount, CaffeNetGivesTheStudysRowToItsDigits) {
  // Table 1 of seed 003: CaffeNet 727.20 M operations, 239.1 MB read, 6 MB written, CTC 11.6.
  // Summed by hand: MACs 724,406,816 + conv bias adds 1,376 + ReLU 658,272 + pooling 1,102,176 +
  // LRN 9 x 113,248 + dropout 8,192 + softmax 3,000 = 727,199,064.
  StudyTotals t = study_totals(study_layers(NetSpec::load(network_file("caffenet"))));
  EXPECT_EQ(t.count.ops, 727199064);
  EXPECT_NEAR(4.0 * static_cast<double>(t.count.read) / (1 << 20), 239.1, 0.05);
  EXPECT_NEAR(4.0 * static_cast<double>(t.count.written) / (1 << 20), 6.0, 0.5);  // printed as "6"
  EXPECT_NEAR(t.ctc, 11.6, 0.05);
}

TEST(StudyCount, NetinfoPrintsTheStudysCountingBesideOurs) {
  NetSpec spec = NetSpec::load(network_file("caffenet"));
  const std::string ours = netinfo_table(spec, 1);
  for (const char* s : {"study ops", "(study)", "(ours)"})
    EXPECT_EQ(ours.find(s), std::string::npos) << s << ": the default table is today's\n" << ours;
  EXPECT_FALSE(netinfo_json(spec, 1).contains("study"));
  const std::string both = netinfo_table(spec, 1, Counting::Study);
  for (const char* s : {"study ops", "caffenet (ours)", "caffenet (study)", "727.20M", "724.41M", "239.11 MB", "Eq. 8"})
    EXPECT_NE(both.find(s), std::string::npos) << s << "\n" << both;
  nlohmann::json j = netinfo_json(spec, 1, Counting::Study);
  EXPECT_EQ(j.at("study").at("ops").get<int64_t>(), 727199064);
  EXPECT_EQ(j.at("layers")[0].at("study").at("ops").get<int64_t>(), 105415200 + 96);
  EXPECT_EQ(j.at("forward_macs").get<int64_t>(), 724406816) << "our counting unchanged beside it";

  testing::CliResult r = testing::run_cnnscale({"netinfo", "caffenet", "--counting", "study"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("caffenet (study)"), std::string::npos) << r.out;
  testing::expect_usage_error({"netinfo", "caffenet", "--counting", "theirs"}, {"--counting", "theirs"});
}

}  // namespace
}  // namespace cnnscale
