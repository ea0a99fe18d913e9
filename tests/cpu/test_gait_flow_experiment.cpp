// experiments/gait_flow.yaml end to end on the CPU: sequences written here (textured squares moving
// over a textured background, one direction per class) through `cnnscale data flow`, then a sweep
// of the experiment file itself training the gait 2D-CNN on those volumes with its mirror and
// shifts, shortened by overrides to two iterations; the run completes and records its augmentation.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "data/shard_convert.hpp"
#include "data/shards.hpp"
#include "experiment/report_data.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

// Frame `f` of a sequence: a 20 x 20 textured square moving (vx, vy) pixels a frame over a
// textured background, 72 x 60 grey (the flow converter's default height).
void write_gait_frame(const std::string& file, int f, int vx, int vy) {
  const int w = 72, h = 60;
  std::ofstream out(file, std::ios::binary);
  out << "P5\n" << w << " " << h << "\n255\n";
  const int x0 = 14 + vx * f, y0 = 18 + vy * f;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const bool in = x >= x0 && x < x0 + 20 && y >= y0 && y < y0 + 20;
      const double v = in ? 170 + 60 * std::sin((x - x0) * 0.9) * std::cos((y - y0) * 0.7)
                          : 70 + 25 * std::sin(x * 0.31 + y * 0.17) + 15 * std::cos(y * 0.43);
      out.put(static_cast<char>(std::lround(v)));
    }
}

TEST(GaitFlowExperiment, FlowShardsTrainThroughTheExperimentWithMirror) {
  testing::TempDir t;
  // Two subjects, two sequences each: class 0 walks right, class 1 down; 31 frames give 30 flows,
  // two volumes of 25 (a new one every 5): 8 volumes of 50 x 60 x 60, as the gait networks take.
  const int motion[4][3] = {{2, 0, 0}, {1, 0, 0}, {0, 1, 1}, {0, 2, 1}};  // vx, vy, label
  fs::create_directories(t.file("gait"));
  std::ofstream list_file(t.file("gait/list.txt"));
  for (int s = 0; s < 4; ++s) {
    const std::string seq = fmt::format("seq{}", s);
    fs::create_directories(t.file("gait/" + seq));
    for (int f = 0; f < 31; ++f)
      write_gait_frame(t.file(fmt::format("gait/{}/{:03d}.pgm", seq, f)), f, motion[s][0], motion[s][1]);
    list_file << seq << " " << motion[s][2] << "\n";
  }
  list_file.close();
  // The networks classify 150 subjects: the volumes say so, whatever labels the list uses.
  const std::vector<std::string> convert = {"data",      "flow", "--list", t.file("gait/list.txt"),
                                            "--classes", "150",  "--out",  t.file("flow")};
  if (!shard_conversion_has_opencv()) {
    testing::expect_usage_error(convert, {"no OpenCV", "libopencv-dev"});
    return;
  }
  const testing::CliResult converted = testing::run_cnnscale(convert);
  ASSERT_EQ(converted.exit_code, 0) << converted.err;
  const ShardDataset volumes(t.file("flow"), "train");
  ASSERT_EQ(volumes.size(), 8);
  ASSERT_EQ(volumes.byte_affine()->packed().size(), 3u * 50);  // the loader knows it holds flow

  const std::string experiment = std::string(CNNSCALE_SOURCE_DIR) + "/experiments/gait_flow.yaml";
  const testing::CliResult r = testing::run_cnnscale(
      {"sweep", experiment, "dataset.name=hdf5:" + t.file("flow"), "device=cpu", "matrix.network=[cnn2d_gait]",
       "matrix.batch=[4]", "networks.cnn2d_gait={iterations: 2}", "--results", t.file("res")});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("1 ran, 0 already complete, 0 failed"), std::string::npos) << r.err;
  // The run as the report reads it: complete, the 2D-CNN on those volumes, mirrored and shifted.
  const std::vector<report::RunRecord> runs = report::scan_runs(t.file("res"));
  ASSERT_EQ(runs.size(), 1u);
  const report::RunRecord& run = runs.front();
  EXPECT_EQ(run.run_config.value("augment", std::string()), "random crop, pad 5, mirror") << run.run_config.dump();
  EXPECT_EQ(run.run_config.value("data", std::string()), "hdf5:" + t.file("flow")) << run.run_config.dump();
  std::ifstream in(fs::path(run.folder) / "summary.json");
  const nlohmann::json summary = nlohmann::json::parse(in);
  EXPECT_EQ(summary["status"], "complete");
  EXPECT_EQ(summary["summary"]["net"], "cnn2d_gait");
  EXPECT_EQ(summary["summary"]["iterations"], 2);
}

}  // namespace
}  // namespace cnnscale
