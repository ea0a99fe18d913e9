// The study's Table 1 (Castro et al., seed 003) from the networks cnnscale ships for it: counted
// with the study's Eqs. 1-9 (net/study_count.hpp), each row's network within 5 % of the study on
// every column that a network can match, and each documented exception (docs/seeds.md, "Table 1")
// asserted as the arithmetic there states it.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "net/net.hpp"
#include "net/study_count.hpp"

namespace cnnscale {
namespace {

constexpr double kMB = 1024.0 * 1024.0;  // the study's MB: 2^20 bytes (CaffeNet's row pins it)

// Table 1 of seed 003, per sample, forward, as printed: the independent reference.
struct Row {
  const char* network;  // the file in networks/ that reproduces the row
  double ops_m, read_mb, written_mb, ctc;
};
constexpr Row kCaffeNet{"caffenet", 727.20, 239.1, 6, 11.6};
constexpr Row kCnn2d{"cnn2d_gait_study", 783.84, 73.8, 1.9, 40.5};
constexpr Row kGaitResNet{"resnet_gait_study", 425.13, 87.6, 4.8, 18.5};
constexpr Row kResNetIm{"resnetim_study", 2080.96, 97.1, 46.6, 81.8};

struct Counted {
  StudyTotals totals;
  int64_t params = 0;
  double ops_m() const { return static_cast<double>(totals.count.ops) / 1e6; }
  double read_mb() const { return 4.0 * static_cast<double>(totals.count.read) / kMB; }
  double written_mb() const { return 4.0 * static_cast<double>(totals.count.written) / kMB; }
};

Counted count(const std::string& network) {
  NetSpec spec = NetSpec::load(std::string(CNNSCALE_SOURCE_DIR) + "/networks/" + network + ".yaml");
  return {study_totals(study_layers(spec)), spec.total_params()};
}

// The bar is 5 %; the study prints 3-5 significant digits (rounding < 0.1 %, CaffeNet's
// "6 MB" excepted: < 10 %, hence its own bound below), so the bound is the issue's.
constexpr double kWithin = 0.05;

void expect_within(double ours, double study, const char* column, const char* network) {
  EXPECT_LE(std::abs(ours / study - 1.0), kWithin) << network << " " << column << ": " << ours << " vs the study's "
                                                   << study;
}

TEST(StudyTable1, CaffeNetMatchesEveryColumn) {
  Counted c = count(kCaffeNet.network);
  expect_within(c.ops_m(), kCaffeNet.ops_m, "operations", kCaffeNet.network);
  expect_within(c.read_mb(), kCaffeNet.read_mb, "read", kCaffeNet.network);
  EXPECT_NEAR(c.written_mb(), kCaffeNet.written_mb, 0.5) << "printed as a whole number";
  expect_within(c.totals.ctc, kCaffeNet.ctc, "CTC", kCaffeNet.network);
}

TEST(StudyTable1, Cnn2dMatchesAllButWritten) {
  Counted c = count(kCnn2d.network);
  expect_within(c.ops_m(), kCnn2d.ops_m, "operations", kCnn2d.network);
  expect_within(c.read_mb(), kCnn2d.read_mb, "read", kCnn2d.network);
  expect_within(c.totals.ctc, kCnn2d.ctc, "CTC", kCnn2d.network);
  // The exception (docs/seeds.md): the operations need conv1 (96 filters 7x7 over 50 channels,
  // 235,200 multiply-adds per output position) at >= 2,749 positions (646.6 M of the row's 5 %
  // lower bound, 744.6 M, after the other layers' 98 M), so conv1 and its ReLU write >= 2 x 96 x
  // 2,749 values = 2.01 MB, above 1.9 MB + 5 %. At the text's 54x54 they write 2.14 MB.
  const double conv1_relu1_mb = 4.0 * 2 * 96 * 54 * 54 / kMB;
  EXPECT_NEAR(conv1_relu1_mb, 2.136, 0.001);
  EXPECT_GT(4.0 * 2 * 96 * 2749 / kMB, kCnn2d.written_mb * (1 + kWithin));
  EXPECT_GT(c.written_mb(), conv1_relu1_mb);
  EXPECT_NEAR(c.written_mb(), 2.78, 0.01);
}

TEST(StudyTable1, GaitResNetMatchesAllButWritten) {
  Counted c = count(kGaitResNet.network);
  expect_within(c.ops_m(), kGaitResNet.ops_m, "operations", kGaitResNet.network);
  expect_within(c.read_mb(), kGaitResNet.read_mb, "read", kGaitResNet.network);
  expect_within(c.totals.ctc, kGaitResNet.ctc, "CTC", kGaitResNet.network);
  // The exception (docs/seeds.md): the closest variant searched writes 5.4 % less than the row.
  const double off = c.written_mb() / kGaitResNet.written_mb - 1.0;
  EXPECT_LT(off, -kWithin);
  EXPECT_GT(off, -0.06);
}

TEST(StudyTable1, ResNetImMatchesAllButWritten) {
  Counted c = count(kResNetIm.network);
  expect_within(c.ops_m(), kResNetIm.ops_m, "operations", kResNetIm.network);
  expect_within(c.read_mb(), kResNetIm.read_mb, "read", kResNetIm.network);
  expect_within(c.totals.ctc, kResNetIm.ctc, "CTC", kResNetIm.network);
  // The exception (docs/seeds.md): the row's own read and written disagree for ResNet-34's
  // parameters. Read less the parameters leaves the activation values read; every value a layer
  // writes is read by a later one (all but the softmax's K), so written cannot exceed it.
  EXPECT_EQ(c.params, 21797672);
  const double study_read_values = kResNetIm.read_mb * kMB / 4.0;
  const double study_written_values = kResNetIm.written_mb * kMB / 4.0;
  const double activations_read = study_read_values - static_cast<double>(c.params);
  EXPECT_NEAR(activations_read / 1e6, 3.65, 0.01);
  EXPECT_NEAR(study_written_values / 1e6, 12.22, 0.01);
  EXPECT_GT(study_written_values, activations_read + 1000.0);
  // ... and in cnnscale's networks, the invariant holds.
  const double ours_activations_read = static_cast<double>(c.totals.count.read - c.params);
  EXPECT_LE(static_cast<double>(c.totals.count.written), ours_activations_read + 1000.0);
  EXPECT_NEAR(c.written_mb(), 11.1, 0.05);
}

}  // namespace
}  // namespace cnnscale
