// train's --test-batch is bounded: past the test set it is one batch of the whole set (the loader's
// buffers are not sized for the number given), and a test batch the network cannot hold is refused
// before training, naming the flag, where it used to fail after a whole epoch of training.
#include <gtest/gtest.h>

#include <fstream>

#include "common/temp_dir.hpp"
#include "cpu/cli_runner.hpp"
#include "core/error.hpp"
#include "data/loader.hpp"
#include "data/synthetic_dataset.hpp"
#include "net/net.hpp"

namespace cnnscale {
namespace {

bool fashion_mnist_missing(const testing::CliResult& r) {
  return r.exit_code != 0 && r.err.find("No such file") != std::string::npos;
}

// 10^11 samples of 784 floats would be 314 TB of buffers: it ran into bad_alloc after training.
TEST(TestBatch, PastTheTestSetIsOneBatchOfIt) {
  const testing::CliResult r =
      testing::run_cnnscale({"train", "--net", "lenet", "--data", "fashion-mnist", "--train-samples", "16",
                             "--test-samples", "100", "--batch", "8", "--iterations", "1", "--test-batch",
                             "100000000000", "--no-results", "--min-window", "0", "--json"});
  if (fashion_mnist_missing(r)) GTEST_SKIP() << "Fashion-MNIST is not installed here: " << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"test_samples\":100"), std::string::npos) << r.out;
}

// The loader itself: a batch past a dataset without drop_last is one batch of all of it.
TEST(TestBatch, LoaderClampsAnUnfilledBatchToTheDataset) {
  auto data = std::make_shared<SyntheticDataset>(Shape{1, 2, 2}, 3, 10, SyntheticFill::Gaussian, 1);
  LoaderOptions lo;
  lo.batch = int64_t{1} << 50;  // its buffers alone would be 2^52 bytes
  lo.shuffle = false;
  lo.drop_last = false;
  Loader loader(data, lo);
  EXPECT_EQ(loader.batches_per_epoch(), 1);
  const HostBatch& b = loader.next();
  EXPECT_EQ(b.count, 10);
  loader.release(b.slot);
}

// Net::reshape applies the bound Net's constructor applies: a batch whose activations pass 2^40
// values is refused by name (ConfigError), not attempted; the net keeps its batch.
TEST(TestBatch, NetReshapeRefusesABatchItCannotHold) {
  const NetSpec spec = NetSpec::load_string(
      "name: tiny\ninput: {shape: [1, 4, 4], classes: 2}\nlayers:\n"
      "  - {name: fc, type: InnerProduct, bottom: data, top: fc, num_output: 2}\n"
      "  - {name: loss, type: SoftmaxWithLoss, bottom: [fc, label], top: loss}\n",
      "tiny.yaml");
  auto backend = make_backend("cpu");
  Net net(spec, *backend, 2, 1);
  try {
    net.reshape(int64_t{1} << 40);  // 2^40 samples of 16 + 1 + 2 + 1 values each
    ADD_FAILURE() << "reshape accepted 2^40 samples";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 2^40 values"), std::string::npos) << e.what();
  }
  EXPECT_EQ(net.batch(), 2);
  net.reshape(3);
  EXPECT_EQ(net.batch(), 3);
}

// 150,000 channels of 28x28 are 1.18e8 activation values per sample: one sample trains, but
// Fashion-MNIST's 10,000 test samples at once would be 1.18e12 values, past the 2^40 bound.
TEST(TestBatch, ATestBatchTheNetworkCannotHoldIsRefusedBeforeTraining) {
  testing::TempDir dir;
  const std::string net = dir.file("wide.yaml");
  std::ofstream(net)
      << "name: wide\n"
         "input: {shape: [1, 28, 28], classes: 10}\n"
         "layers:\n"
         "  - {name: conv1, type: Convolution, bottom: data, top: conv1, num_output: 150000, kernel: 1}\n"
         "  - {name: pool1, type: Pooling, bottom: conv1, top: pool1, pool: max, global_pooling: true}\n"
         "  - {name: ip1, type: InnerProduct, bottom: pool1, top: ip1, num_output: 10}\n"
         "  - {name: loss, type: SoftmaxWithLoss, bottom: [ip1, label], top: loss}\n";
  const std::string results = dir.file("results");
  const testing::CliResult r = testing::run_cnnscale(
      {"train", "--net", net, "--data", "fashion-mnist", "--train-samples", "2", "--batch", "1", "--iterations", "1",
       "--test-batch", "20000", "--results", results, "--experiment", "e", "--min-window", "0"});
  if (fashion_mnist_missing(r)) GTEST_SKIP() << "Fashion-MNIST is not installed here: " << r.err;
  EXPECT_EQ(r.exit_code, 2) << r.err;
  const auto errors = r.error_lines();
  ASSERT_EQ(errors.size(), 1u) << r.err;
  EXPECT_NE(errors[0].find("--test-batch 20000: batch 10000: wide"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("more than 2^40 values"), std::string::npos) << errors[0];
  // Refused before training: no iteration ran, no run folder was left.
  EXPECT_EQ(r.err.find("iteration"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(results) / "e") &&
               !std::filesystem::is_empty(std::filesystem::path(results) / "e"))
      << r.err;
}

}  // namespace
}  // namespace cnnscale
