// The job every measuring command runs as (job/job.hpp), as a one-rank job in this process: its
// device rules, its backend and the precision it was made for, the binding list, gathering,
// watchdog, energy monitor and pid file; and the Trainer's side of the job (the global batch
// derived from the job's split, one precision for the backend and the run).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "common/error_of.hpp"
#include "core/error.hpp"
#include "core/watchdog.hpp"
#include "data/synthetic_dataset.hpp"
#include "job/job.hpp"
#include "net/net.hpp"
#include "solver/trainer.hpp"

namespace cnnscale {
namespace {

// The shared reader of a refusal's line (tests/common/error_of.hpp).
using testing::config_error_of;

TEST(Job, OfOneRankIsRankZeroOfOneAndGathersItsOwnFigures) {
  Job job(false);
  EXPECT_FALSE(job.together());
  EXPECT_EQ(job.rank(), 0);
  EXPECT_EQ(job.size(), 1);
  EXPECT_EQ(job.gather(2.5), std::vector<double>{2.5});
  EXPECT_EQ(job.gather(std::string("figures")), std::vector<std::string>{"figures"});
  job.start_together();  // nobody to wait for
}

TEST(Job, TogetherNeedsAnMpiLaunch) {
  if (MpiEnv::current() && MpiEnv::current()->initialized()) GTEST_SKIP() << "launched by MPI";
  EXPECT_THROW(Job(true), RuntimeError);
}

// train's rule: --gpus picks the GPU (a job of one rank takes its first entry) and implies --device
// gpu; an explicit other --device is refused. infer's: --gpus binds the ranks of an mpirun job only.
TEST(Job, DeviceRulesOfTrainAndInferForOneRank) {
  Job job(false);
  EXPECT_EQ(job.device_for_train("cpu", false, {}), "cpu");
  EXPECT_EQ(job.device_for_train("gpu:1", true, {}), "gpu:1");
  EXPECT_EQ(job.device_for_train("gpu", false, {}), "gpu") << "one rank without --gpus: the backend's default GPU";
  EXPECT_EQ(job.device_for_train("cpu", false, {3, 1}), "gpu:3") << "--gpus alone implies --device gpu";
  EXPECT_EQ(job.device_for_train("gpu", true, {2}), "gpu:2");
  EXPECT_NE(config_error_of([&] { job.device_for_train("cpu", true, {0}); })
                .find("--gpus picks each rank's GPU: use it with --device gpu (or alone), not --device cpu"),
            std::string::npos);
  EXPECT_EQ(job.device_for_ranks("cpu", {}), "cpu");
  EXPECT_EQ(job.device_for_ranks("gpu:2", {}), "gpu:2");
  EXPECT_EQ(config_error_of([&] { job.device_for_ranks("gpu", {1}); }),
            "--gpus binds the ranks of an mpirun job; for one process use --device gpu:N");
}

TEST(Job, OwnsItsBackendAndKnowsItsPrecisionAndDevice) {
  Job job(false);
  EXPECT_FALSE(job.has_backend());
  EXPECT_THROW(job.backend(), RuntimeError);
  EXPECT_THROW(job.bind_devices(), RuntimeError) << "nothing to bind before the backend";
  Backend& backend = job.open_backend("cpu");
  EXPECT_TRUE(backend.device().is_cpu());
  EXPECT_EQ(&job.backend(), &backend);
  EXPECT_EQ(job.precision(), Precision::FP32);
  EXPECT_THROW(job.open_backend("cpu"), RuntimeError) << "one backend per job";
  EXPECT_TRUE(job.another_backend(Precision::FP32)->device().is_cpu());

  const std::vector<RankDevice>& devices = job.bind_devices();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].device, "cpu");
  EXPECT_EQ(devices[0].uuid, "") << "a CPU rank has no GPU to check";
  EXPECT_EQ(job.hosts(), std::vector<std::string>{devices[0].host});

  Job tf32(false);
  EXPECT_NE(config_error_of([&] { tf32.open_backend("cpu", 0, Precision::TF32); }).find("runs on a GPU only"),
            std::string::npos);
}

TEST(Job, WatchdogRunsWhileTheJobLives) {
  ASSERT_EQ(Watchdog::active(), nullptr);
  {
    Job job(false);
    EXPECT_FALSE(job.watching());
    job.start_watchdog(60);
    EXPECT_TRUE(job.watching());
    ASSERT_NE(Watchdog::active(), nullptr);
    EXPECT_EQ(Watchdog::active()->timeout_seconds(), 60);
    EXPECT_THROW(job.start_watchdog(60), RuntimeError) << "one watchdog per job";
  }
  EXPECT_EQ(Watchdog::active(), nullptr) << "stopped with the job";
}

TEST(Job, EnergyMonitorOfACpuRankReadsNoGpu) {
  const std::filesystem::path root = std::filesystem::temp_directory_path() / "cnnscale_job_no_rapl";
  std::filesystem::remove_all(root);
  ::setenv("CNNSCALE_RAPL_ROOT", root.c_str(), 1);
  Job job(false);
  job.open_backend("cpu");
  EXPECT_EQ(job.energy(), nullptr);
  measure::EnergyMonitor& energy = job.open_energy_monitor(0);
  EXPECT_EQ(job.energy(), &energy);
  EXPECT_THROW(job.open_energy_monitor(0), RuntimeError) << "one monitor per job";
  ::unsetenv("CNNSCALE_RAPL_ROOT");
}

TEST(Job, WritesItsRanksPidFileWhereCnnscalePidDirSays) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "cnnscale_job_pid";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Job job(false);
  job.write_pid_file();
  EXPECT_FALSE(std::filesystem::exists(dir / "rank-0.pid")) << "not without CNNSCALE_PID_DIR";
  ::setenv("CNNSCALE_PID_DIR", dir.c_str(), 1);
  job.write_pid_file();
  ::unsetenv("CNNSCALE_PID_DIR");
  std::ifstream in(dir / "rank-0.pid");
  long pid = 0;
  in >> pid;
  EXPECT_EQ(pid, static_cast<long>(::getpid()));
  std::filesystem::remove_all(dir);
}

struct TrainerOnAJob {
  Job job{false};
  NetSpec spec = NetSpec::load(std::string(CNNSCALE_TEST_DATA) + "/dist_convnet.yaml");
  std::shared_ptr<const Dataset> data =
      std::make_shared<SyntheticDataset>(Shape{1, 28, 28}, 10, 32, SyntheticFill::Gaussian, 3);
  TrainerOnAJob() { job.open_backend("cpu"); }
};

// The job's split is the one statement of the global batch: the Trainer derives it from the split
// instead of checking a second copy (TrainOptions::batch, here deliberately stale).
TEST(TrainerOnJob, DerivesTheGlobalBatchFromTheJobsSplit) {
  TrainerOnAJob t;
  TrainOptions o;
  o.batch = 999;
  o.iterations = 1;
  TrainJob job;
  job.parallel.rank_batches = {16};
  job.backend_precision = t.job.precision();
  Trainer trainer(t.spec, t.job.backend(), t.data, nullptr, SolverConfig{}, o, job);
  EXPECT_EQ(trainer.local_batch(), 16);
  EXPECT_EQ(trainer.iterations_per_epoch(), 2) << "32 samples in global batches of 16";
  job.parallel.rank_batches = {0};
  EXPECT_NE(config_error_of([&] { Trainer(t.spec, t.job.backend(), t.data, nullptr, SolverConfig{}, o, job); })
                .find("rank 0 was given 0 samples per batch"),
            std::string::npos);
}

TEST(TrainerOnJob, RefusesAPrecisionOtherThanTheBackendsOwn) {
  TrainerOnAJob t;
  TrainOptions o;
  o.batch = 16;
  o.iterations = 1;
  o.precision = Precision::TF32;
  TrainJob job;
  job.backend_precision = t.job.precision();  // fp32: the CPU's only one
  try {
    Trainer trainer(t.spec, t.job.backend(), t.data, nullptr, SolverConfig{}, o, job);
    FAIL() << "trained in tf32 on a backend made for fp32";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("the backend was made for fp32 but the run trains in tf32"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cnnscale
