// The job library (job/job.hpp) under a real launch: `mpirun -np 2` of a probe built from the
// library alone (tests/mpi/probe/job_probe.cpp), on CPU ranks: binding, the communicator, every
// rank's figures gathered in rank order, and the watchdog that ends a job whose peer never arrives.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "mpi/mpi_runner.hpp"

namespace cnnscale::testing {
namespace {

MpiResult run_probe(int ranks, const std::string& mode) {
  MpiJob job(MpiJob::Command{{"mpirun", "--oversubscribe", "--bind-to", "none", "-np", std::to_string(ranks),
                              CNNSCALE_JOB_PROBE, mode}});
  return job.wait(std::chrono::seconds(120));
}

TEST(JobMpi, TwoRanksBindConnectAndGatherOnEveryRankInRankOrder) {
  const MpiResult r = run_probe(2, "bind");
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);  // rank 0's line only
  EXPECT_EQ(j["size"], 2);
  EXPECT_EQ(j["together"], true);
  ASSERT_EQ(j["devices"].size(), 2u);
  for (const nlohmann::json& d : j["devices"]) EXPECT_EQ(d["device"], "cpu");
  EXPECT_EQ(j["communicator"], "mpi");
  EXPECT_EQ(j["sum"], 3.0) << "1 + 2 over the job's communicator";
  EXPECT_EQ(j["figures"], nlohmann::json({0.5, 1.5}));
  EXPECT_EQ(j["words"], nlohmann::json({"rank 0", "rank 1"}));
  EXPECT_EQ(j["watching"], true);
  EXPECT_EQ(j["watchdog_after_job"], false) << "the watchdog stops with the job";
}

TEST(JobMpi, WatchdogEndsTheJobWhenAPeerNeverArrives) {
  const MpiResult r = run_probe(2, "stall");
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("rank 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did not complete within 1 s; a peer rank failed or hung"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1 did not arrive"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 50) << "ended by the watchdog, not by the stalled rank waking";
}

}  // namespace
}  // namespace cnnscale::testing
