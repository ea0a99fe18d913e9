// Checkpoints: HDF5 round trip of every field, the tmp + rename protocol (a failed write leaves no
// partial file and the previous checkpoint intact), keeping the newest two, and restoring a net
// and solver with name and shape checks. Checksums and finiteness on load, and the rotation on a
// full disk and beside a damaged file: test_checkpoint_faults.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "backend/backend.hpp"
#include "common/temp_dir.hpp"
#include "solver/checkpoint.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

CheckpointArray array(const std::string& name, std::vector<int64_t> shape, float base) {
  CheckpointArray a{name, shape, {}};
  int64_t n = 1;
  for (auto d : shape) n *= d;
  for (int64_t i = 0; i < n; ++i) a.values.push_back(base + 0.001f * static_cast<float>(i) - 1e-7f);
  return a;
}

CheckpointContents sample_contents(int64_t iteration) {
  CheckpointContents c;
  c.weights = {array("conv1/weight", {4, 1, 3, 3}, 0.5f), array("conv1/bias", {4}, -1.0f),
               array("inception_3a/1x1/weight", {2, 4}, 3.0f)};
  c.history = {array("conv1/weight", {4, 1, 3, 3}, 0.01f), array("conv1/bias", {4}, 0.0f),
               array("inception_3a/1x1/weight", {2, 4}, -0.5f)};
  c.state = {array("bn1/running_mean", {4}, 0.1f)};
  c.meta.iteration = iteration;
  c.meta.epoch = iteration / 10;
  c.meta.lr = 0.012345678901234567;
  c.meta.loader_rng_state = "123 456 789 with spaces\nand a newline";
  c.meta.loader_epoch = 3;
  c.meta.loader_position = 7;
  c.meta.run_config = R"({"net":"lenet","batch":64})";
  c.meta.network = "";
  c.meta.solver = R"({"lr":0.02})";
  return c;
}

void expect_equal(const std::vector<CheckpointArray>& a, const std::vector<CheckpointArray>& b) {
  ASSERT_EQ(a.size(), b.size());
  std::map<std::string, const CheckpointArray*> by_name;
  for (const auto& x : b) by_name[x.name] = &x;
  for (const auto& x : a) {
    ASSERT_TRUE(by_name.count(x.name)) << x.name;
    EXPECT_EQ(x.shape, by_name[x.name]->shape) << x.name;
    // Bit-exact: compare the representations, not approximately.
    ASSERT_EQ(x.values.size(), by_name[x.name]->values.size());
    EXPECT_EQ(0, std::memcmp(x.values.data(), by_name[x.name]->values.data(), x.values.size() * sizeof(float)));
  }
}

TEST(Checkpoint, RoundTripIsExact) {
  TempDir dir;
  CheckpointContents c = sample_contents(42);
  write_checkpoint(dir.file("a.h5"), c);
  CheckpointContents r = read_checkpoint(dir.file("a.h5"));
  expect_equal(c.weights, r.weights);
  expect_equal(c.history, r.history);
  expect_equal(c.state, r.state);
  EXPECT_EQ(r.meta.iteration, 42);
  EXPECT_EQ(r.meta.epoch, 4);
  EXPECT_EQ(r.meta.lr, c.meta.lr);
  EXPECT_EQ(r.meta.loader_rng_state, c.meta.loader_rng_state);
  EXPECT_EQ(r.meta.loader_epoch, 3);
  EXPECT_EQ(r.meta.loader_position, 7);
  EXPECT_EQ(r.meta.run_config, c.meta.run_config);
  EXPECT_EQ(r.meta.network, "");
  EXPECT_EQ(r.meta.solver, c.meta.solver);
  EXPECT_EQ(dir.entries(), std::vector<std::string>({"a.h5"}));
}

TEST(Checkpoint, FailedWriteLeavesNoPartialFileAndKeepsTheOld) {
  TempDir dir;
  const std::string path = dir.file("ckpt.h5");
  write_checkpoint(path, sample_contents(1));
  const auto before = fs::file_size(path);
  CheckpointContents bad = sample_contents(2);
  bad.weights.push_back(bad.weights[0]);  // a duplicate name: HDF5 refuses the second dataset
  EXPECT_THROW(write_checkpoint(path, bad), RuntimeError);
  EXPECT_EQ(dir.entries(), std::vector<std::string>({"ckpt.h5"}));  // no ckpt.h5.tmp left behind
  EXPECT_EQ(fs::file_size(path), before);
  EXPECT_EQ(read_checkpoint(path).meta.iteration, 1);
  // Nothing at all when there was no previous file.
  EXPECT_THROW(write_checkpoint(dir.file("new.h5"), bad), RuntimeError);
  EXPECT_EQ(dir.entries(), std::vector<std::string>({"ckpt.h5"}));
}

TEST(Checkpoint, DirectoryKeepsTheNewestTwo) {
  TempDir dir;
  CheckpointDir cd(dir.file("ckpts"));
  EXPECT_FALSE(cd.latest().has_value());
  for (int64_t it : {10, 20, 100}) cd.save(sample_contents(it));
  EXPECT_EQ(cd.list(), std::vector<std::string>({cd.path_for(20), cd.path_for(100)}));
  // 30 after 100: the run went back (resumed from an older checkpoint); 100 is of the branch it
  // left and goes, the newest two of its own branch stay.
  cd.save(sample_contents(30));
  auto all = cd.list();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], cd.path_for(20));
  EXPECT_EQ(all[1], cd.path_for(30));
  EXPECT_EQ(*cd.latest(), cd.path_for(30));
  EXPECT_EQ(fs::path(cd.path_for(30)).filename().string(), "checkpoint-000000030.h5");
}

TEST(Checkpoint, BadFilesAreConfigErrorsNamingThem) {
  TempDir dir;
  try {
    read_checkpoint(dir.file("missing.h5"));
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("missing.h5")), std::string::npos) << e.what();
  }
  std::ofstream(dir.file("text.h5")) << "not hdf5\n";
  try {
    read_checkpoint(dir.file("text.h5"));
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("text.h5: not an HDF5 file"), std::string::npos) << e.what();
  }
}

const char* kNet = R"(
name: ckpt_net
input: {shape: [1, 6, 6], classes: 3}
layers:
  - {name: conv, type: Convolution, bottom: data, top: conv, num_output: 2, kernel: 3, weight_filler: {type: xavier}}
  - {name: bn, type: BatchNorm, bottom: conv, top: bn}
  - {name: fc, type: InnerProduct, bottom: bn, top: fc, num_output: ${classes}, weight_filler: {type: xavier}}
  - {name: loss, type: SoftmaxWithLoss, bottom: [fc, label], top: loss}
)";

TEST(Checkpoint, CaptureAndRestoreNetAndSolver) {
  TempDir dir;
  auto backend = make_backend("cpu");
  NetSpec spec = NetSpec::load_string(kNet, "ckpt_net.yaml");
  Net a(spec, *backend, 2, 1), b(spec, *backend, 2, 99);
  SgdSolver sa(a, SolverConfig{}, 10, 100), sb(b, SolverConfig{}, 10, 100);
  for (size_t i = 0; i < sa.history().size(); ++i) backend->fill(sa.history()[i], 0.125f * static_cast<float>(i + 1));
  for (const auto& [name, t] : a.state()) backend->fill(t, 0.75f);
  CheckpointMeta meta;
  meta.iteration = 7;
  CheckpointContents c = capture_checkpoint(a, sa, meta);
  EXPECT_EQ(c.weights.size(), sa.params().size());
  EXPECT_FALSE(c.state.empty());
  write_checkpoint(dir.file("n.h5"), c);
  restore_checkpoint(read_checkpoint(dir.file("n.h5")), dir.file("n.h5"), b, sb);
  expect_equal(capture_checkpoint(b, sb, meta).weights, c.weights);
  expect_equal(capture_checkpoint(b, sb, meta).history, c.history);
  expect_equal(capture_checkpoint(b, sb, meta).state, c.state);

  // A different network: the error names the file and the parameter.
  NetOptions wider;
  wider.classes = 4;
  NetSpec other = NetSpec::load_string(kNet, "ckpt_net.yaml", wider);
  Net n(other, *backend, 2, 1);
  SgdSolver sn(n, SolverConfig{}, 10, 100);
  try {
    restore_checkpoint(c, dir.file("n.h5"), n, sn);
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("n.h5: weights 'fc/weight' has shape"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cnnscale
