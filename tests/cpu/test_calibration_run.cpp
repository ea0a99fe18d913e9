// check_calibrate_request (experiment/calibration_run.hpp): what calibrate refuses before it loads
// a network, a checkpoint or a data set, or opens a device.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "experiment/calibration_run.hpp"

namespace cnnscale {
namespace {

using testing::TempDir;

CalibrateRequest valid(const TempDir& dir) {
  // Neither the checkpoint nor the network exists: nothing here may be loaded.
  CalibrateRequest r;
  r.checkpoint = dir.file("missing.h5");
  r.data = "fashion-mnist";
  r.data_dir = dir.file("no-data");
  r.device = "cpu";
  r.method = "percentile";
  r.out = dir.file("table.json");
  return r;
}

std::string refusal(const CalibrateRequest& r) {
  try {
    check_calibrate_request(r);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(CalibrationRun, RefusesBeforeLoadingAnything) {
  const TempDir dir;
  EXPECT_EQ(refusal(valid(dir)), "");
  CalibrateRequest r = valid(dir);
  r.out = dir.file("no-folder/table.json");
  EXPECT_NE(refusal(r).find("--out"), std::string::npos) << refusal(r);
  r = valid(dir);
  r.percentile = 0;
  EXPECT_NE(refusal(r).find("--percentile"), std::string::npos);
  r = valid(dir);
  r.samples = 0;
  EXPECT_NE(refusal(r).find("--samples"), std::string::npos);
  r = valid(dir);
  r.test_samples = -2;
  EXPECT_NE(refusal(r).find("--test-samples"), std::string::npos);
  r = valid(dir);
  r.data = "synthetic";
  EXPECT_NE(refusal(r).find("real data"), std::string::npos) << refusal(r);
  r = valid(dir);
  r.out.clear();
  EXPECT_NE(refusal(r).find("written somewhere"), std::string::npos);
  r = valid(dir);
  r.method = "median";
  EXPECT_FALSE(refusal(r).empty());
}

// With a results root, its folder is made now, so that a calibration never fails at its end.
TEST(CalibrationRun, MakesTheResultsFolderBeforeTheWork) {
  const TempDir dir;
  CalibrateRequest r = valid(dir);
  r.results_root = dir.file("results");
  r.experiment = "calib";
  check_calibrate_request(r);
  EXPECT_TRUE(std::filesystem::is_directory(dir.file("results"))) << "no results folder made";
  r.experiment = "../escape";
  EXPECT_THROW(check_calibrate_request(r), ConfigError);
}

}  // namespace
}  // namespace cnnscale
