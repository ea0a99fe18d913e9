// `mpirun -np 2 cnnscale infer` on CPU ranks: every rank streams its own batches; rank 0 alone prints,
// with each rank's images/s and the job's as their sum.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "mpi/mpi_runner.hpp"

namespace cnnscale::testing {
namespace {

TEST(InferMpi, EachRankStreamsItsOwnBatchesAndTheJobAddsThemUp) {
  MpiResult r = run_mpi(2, {"infer", "--net", "lenet", "--batch", "2,4", "--seconds", "0.2", "--latency-seconds",
                            "0.05", "--warmup", "1", "--json"});
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;  // rank 0 only
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["world_size"], 2);
  ASSERT_EQ(j["batches"].size(), 2u);
  for (const nlohmann::json& b : j["batches"]) {
    SCOPED_TRACE(b.dump());
    ASSERT_EQ(b["ranks"].size(), 2u);
    double sum = 0;
    for (const nlohmann::json& rank : b["ranks"]) {
      EXPECT_GT(rank["images_per_s"].get<double>(), 0);
      sum += rank["images_per_s"].get<double>();
    }
    EXPECT_DOUBLE_EQ(b["job_images_per_s"].get<double>(), sum);
    EXPECT_DOUBLE_EQ(b["ranks"][0]["images_per_s"].get<double>(), b["images_per_s"].get<double>());
  }
}

// A search for one process's highest rate has no job-wide meaning: refused under mpirun.
TEST(InferMpi, ServerSearchIsRefusedUnderMpirun) {
  MpiResult r = run_mpi(2, {"infer", "--net", "lenet", "--scenario", "server-search", "--max-batch", "2"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("server-search"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cnnscale::testing
