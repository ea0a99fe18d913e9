// Inputs too big to be real are refused before anything is allocated or run: the checked size
// arithmetic itself, an experiment matrix past its run limit (naming the axes and the product), and
// configuration paths that are no regular file or are too large (/dev/zero, a FIFO, a directory, a
// 1 GiB file), each with one error line naming the path and exit 2.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "common/temp_dir.hpp"
#include "core/checked_math.hpp"
#include "core/text_file.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/experiment_test_util.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

using testing::run_cnnscale;
using testing::TempDir;

TEST(CheckedMath, ProductsAndSumsReportOverflow) {
  EXPECT_EQ(checked_mul(int64_t{1} << 31, int64_t{1} << 31), int64_t{1} << 62);
  EXPECT_FALSE(checked_mul(int64_t{1} << 32, int64_t{1} << 31));
  EXPECT_FALSE(checked_add(INT64_MAX, 1));
  EXPECT_EQ(bounded_product(std::vector<int64_t>{1024, 1024, 1024}), int64_t{1} << 30);
  EXPECT_FALSE(bounded_product(std::vector<int64_t>{1024, 1024, 1024}, (int64_t{1} << 30) - 1));
  // A wrapped product of positive factors may come out small or negative: it is refused instead.
  EXPECT_FALSE(bounded_product(std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 40}));
  EXPECT_EQ(bounded_product(std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 40, 0}), 0);
  EXPECT_EQ(tensor_size_problem(Shape{64, 3, 224, 224}), "");
  EXPECT_EQ(tensor_size_problem(Shape{1, 20, 4294967314, 24}),
            "(1, 20, 4294967314, 24): an extent of 4294967314, more than 2147483647 (32 bits)");
  EXPECT_EQ(tensor_size_problem(Shape{64, 4096, 4096, 4096}), "(64, 4096, 4096, 4096): more than 2^40 elements");
  EXPECT_EQ(tensor_size_problem(Shape{1 << 20, 1 << 20}), "");  // exactly 2^40
}

std::string axis(int n) {
  std::string s = "[";
  for (int i = 1; i <= n; ++i) s += (i > 1 ? ", " : "") + std::to_string(i);
  return s + "]";
}

TEST(MatrixSize, MatrixPastTheRunLimitNamesItsAxesAndProduct) {
  const std::string head = "name: t\ndataset: synthetic\niterations: 4\nmatrix:\n  network: [lenet]\n";
  // 100 x 100 x 100 = 10^6 runs: each axis' values are not even read (none of these batches or rank
  // counts would be checked one by one against each other).
  testing::expect_error(head + "  batch: " + axis(100) + "\n  gpus: " + axis(100) + "\n  repeats: 100\n",
                        {"t.yaml:5:3: matrix: ", "repeats 100 x batch and batch_per_gpu 100 x gpus, gpu_mix and "
                                                 "cpu_mix 100 = 1000000 combinations, more than the 10000 runs"});
  // The default 3 repeats count too; 3 x 3334 is just past the limit, 3 x 3333 within it.
  testing::expect_error(head + "  batch: " + axis(3334) + "\n", {"repeats 3 x batch and batch_per_gpu 3334 = 10002"});
  EXPECT_EQ(testing::parse(head + "  batch: " + axis(3333) + "\n").batches.size(), 3333u);
}

// One error line naming `path` and `what`, exit 2, nothing on stdout.
void expect_refused(const std::vector<std::string>& args, const std::string& path, const std::string& what) {
  const auto r = run_cnnscale(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  ASSERT_EQ(r.err_lines().size(), 1u) << r.err;
  EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(what), std::string::npos) << r.err << "\nlacks: " << what;
  EXPECT_EQ(r.out, "");
}

TEST(ConfigFiles, NonRegularOrHugeFilesAreRefusedBeforeReading) {
  TempDir dir;
  const std::string fifo = dir.file("net;$(touch x)`y`'q'.yaml");  // a hostile name, passed as it is
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string big = dir.file("big.yaml");
  // 1 GiB without writing it: a sparse file; its size alone refuses it.
  std::ofstream(big).close();
  fs::resize_file(big, std::uintmax_t{1} << 30);
  const std::string link = dir.file("zero.yaml");
  fs::create_symlink("/dev/zero", link);

  // Reading /dev/zero or a FIFO would not end (the FIFO's open would block first).
  expect_refused({"netinfo", "/dev/zero"}, "/dev/zero", "network file is a character device, not a regular file");
  expect_refused({"netinfo", link}, link, "network file is a character device");
  expect_refused({"netinfo", fifo}, "touch x", "network file is a FIFO, not a regular file");
  expect_refused({"netinfo", dir.str()}, dir.str(), "network file is a directory");
  expect_refused({"netinfo", big}, big, "network file is 1073741824 bytes, more than the 16777216");
  expect_refused({"sweep", "/dev/zero"}, "/dev/zero", "experiment file is a character device");
  expect_refused({"sweep", fifo}, "touch x", "experiment file is a FIFO");
  expect_refused({"sweep", big}, big, "experiment file is 1073741824 bytes");
  expect_refused({"train", "--net", "/dev/zero", "--data", "synthetic", "--iterations", "1", "--results", dir.str()},
                 "/dev/zero", "network file is a character device");
  // Nothing was made beside the test's own files (no results folder of the refused train).
  EXPECT_EQ(dir.entries().size(), 3u);

}

TEST(ConfigFiles, TheLimitIsInclusive) {
  TempDir dir;
  const std::string file = dir.file("n.yaml");
  std::ofstream(file) << std::string(100, '#');
  EXPECT_EQ(read_config_text(file, "network file", 100), std::string(100, '#'));
  try {
    read_config_text(file, "network file", 99);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), file + ": network file is 100 bytes, more than the 99 a configuration file may have");
  }
}

}  // namespace
}  // namespace cnnscale
