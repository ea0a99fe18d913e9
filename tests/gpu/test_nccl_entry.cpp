// The CUDA library's entry points for src/parallel (GPU UUID, NCCL version, NCCL communicator on one
// rank) and `bench allreduce` on GPUs, one process and two ranks under mpirun (two ranks on one
// GPU: test_dist_gpu_binding.cpp). Skip when the GPUs they need are missing.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>

#include "backend/backend.hpp"
#include "cpu/cli_runner.hpp"
#include "mpi/mpi_runner.hpp"
#include "parallel/allreduce_bench.hpp"

#if CNNSCALE_HAVE_CUDA
#include "backend/cuda/cuda_entry.hpp"
#endif

namespace cnnscale::testing {
namespace {

#if CNNSCALE_HAVE_CUDA

// UUIDs nvidia-smi reports, or an empty set when it cannot be run.
std::set<std::string> nvidia_smi_uuids() {
  std::set<std::string> uuids;
  FILE* p = popen("nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null", "r");
  if (!p) return uuids;
  char line[256];
  while (std::fgets(line, sizeof(line), p)) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    if (!s.empty()) uuids.insert(s);
  }
  pclose(p);
  return uuids;
}

TEST(CudaDeviceUuid, FormattedLikeNvidiaSmiAndDistinct) {
  const int n = cuda_device_count();
  if (n == 0) GTEST_SKIP() << "no usable GPU";
  const std::regex form("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
  const std::set<std::string> smi = nvidia_smi_uuids();
  std::set<std::string> seen;
  for (int d = 0; d < n; ++d) {
    const std::string uuid = cuda_device_uuid(d);
    EXPECT_TRUE(std::regex_match(uuid, form)) << uuid;
    EXPECT_TRUE(seen.insert(uuid).second) << "gpu:" << d << " repeats " << uuid;
    // CUDA's device order may differ from nvidia-smi's (PCI bus order), so compare as sets.
    if (!smi.empty()) {
      EXPECT_TRUE(smi.count(uuid)) << uuid << " is not among nvidia-smi's GPUs";
    }
  }
}

TEST(CudaDeviceUuid, MissingDeviceIsARuntimeError) {
  const int n = cuda_device_count();
  EXPECT_THROW(cuda_device_uuid(n), RuntimeError);
  EXPECT_THROW(cuda_device_uuid(-1), RuntimeError);
}

TEST(NcclEntry, VersionIsMajorMinorPatch) {
  EXPECT_TRUE(std::regex_match(nccl_version_string(), std::regex("2\\.[0-9]+\\.[0-9]+"))) << nccl_version_string();
}

TEST(NcclEntry, CommunicatorNeedsTheCudaBackendAndAWholeId) {
  auto cpu = make_backend("cpu");
  EXPECT_THROW(make_nccl_communicator(*cpu, 0, 1, std::vector<char>(128), AllreduceAlgo::Ring), RuntimeError);
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto gpu = make_backend("gpu:0");
  EXPECT_THROW(make_nccl_communicator(*gpu, 0, 1, std::vector<char>(12), AllreduceAlgo::Ring), RuntimeError);
  EXPECT_THROW(make_nccl_communicator(*gpu, 1, 1, nccl_unique_id(), AllreduceAlgo::Ring), RuntimeError);
}

// The allreduce of a single rank's `host` values is those values, bit for bit, and the
// communicator then settles.
void expect_sum_of_one_rank_is_itself(Backend& gpu, DeviceCommunicator& comm, const std::vector<float>& host) {
  Tensor t = gpu.alloc(Shape{static_cast<int64_t>(host.size())});
  gpu.upload(host.data(), t);
  comm.allreduce_sum(t);
  std::vector<float> got(host.size());
  gpu.download(t, got.data());
  EXPECT_EQ(got, host);
  comm.synchronize_host();
}

// One rank: the sum is the tensor itself, and the whole Communicator surface works.
TEST(NcclEntry, SingleRankCommunicatorLeavesTheTensorUnchanged) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto gpu = make_backend("gpu:0");
  auto comm = make_nccl_communicator(*gpu, 0, 1, nccl_unique_id(), AllreduceAlgo::Auto, 30.0);
  EXPECT_EQ(comm->size(), 1);
  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) - 300.5f;
  expect_sum_of_one_rank_is_itself(*gpu, *comm, host);
}

// NCCL's efficiency CTA policy and a communication stream of the least priority change where and
// when the collective runs, never its result.
TEST(NcclEntry, TunedCommunicatorStillSums) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto gpu = make_backend("gpu:0");
  NcclTuning tuning;
  tuning.cta_policy = CtaPolicy::Efficiency;
  tuning.low_priority = true;
  auto comm = make_nccl_communicator(*gpu, 0, 1, nccl_unique_id(), AllreduceAlgo::Auto, 30.0, tuning);
  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.25f;
  expect_sum_of_one_rank_is_itself(*gpu, *comm, host);
}

// after_collectives(): the work runs on the communicator's side stream behind the sum, and wait()
// puts the compute stream behind it (the widened copy is read there). Only conversions and the SGD
// update may queue there: any other op inside is an error, after which the backend works as before.
TEST(NcclEntry, WorkAfterCollectivesRunsBehindThemOnASideStream) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no usable GPU";
  auto gpu = make_backend("gpu:0");
  auto comm = make_nccl_communicator(*gpu, 0, 1, nccl_unique_id(), AllreduceAlgo::Auto, 30.0);
  const int64_t n = 1 << 20;
  std::vector<float> host(static_cast<size_t>(n));
  // k / 2 for |k| <= 128: at most 8 significant bits, exact in bf16, so the round trip keeps them.
  for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = static_cast<float>(i % 256) * 0.5f - 64.0f;
  Tensor t = gpu->alloc(Shape{n}), narrow = gpu->alloc(Shape{n}, DType::BF16), wide = gpu->alloc(Shape{n});
  gpu->upload(host.data(), t);
  comm->allreduce_sum_async(t);
  comm->after_collectives([&] {
    gpu->convert(t, narrow);
    gpu->convert(narrow, wide);
  });
  comm->wait();
  std::vector<float> got(static_cast<size_t>(n));
  gpu->download(wide, got.data());
  EXPECT_EQ(got, host);
  try {
    comm->after_collectives([&] { gpu->fill(t, 1.0f); });
    ADD_FAILURE() << "a fill on the side stream was let through";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inside a LaneScope"), std::string::npos) << e.what();
  }
  comm->wait();
  gpu->fill(t, 2.0f);
  float first = 0;
  gpu->download(t.view(0, Shape{1}), &first);
  EXPECT_EQ(first, 2.0f);
  comm->synchronize_host();
}

TEST(BenchAllreduceGpu, TwoRanksCheckedWithNccl) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  MpiResult r =
      run_mpi(2, {"bench", "allreduce", "-b", "8", "-e", "64M", "-f", "8", "-w", "2", "-n", "5", "--check", "--json",
                  "--energy-window", "0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["device"], "gpu");
  EXPECT_EQ(j["issue"], "graph");  // the default: replayed from a CUDA graph, as a graphed training step
  const std::string library = j["library"];
  EXPECT_NE(library.find("NCCL 2."), std::string::npos) << library;
  if (!std::getenv("NCCL_ALGO")) {  // else the user's NCCL_ALGO wins
    EXPECT_NE(library.find("NCCL_ALGO=Ring"), std::string::npos) << library;
  }
  ASSERT_EQ(j["rank_devices"].size(), 2u);
  EXPECT_NE(j["rank_devices"][0], j["rank_devices"][1]);
  ASSERT_EQ(j["rows"].size(), 8u);  // 8 B, 64 B, ..., 16 MiB; the next step (128 MiB) passes -e 64M
  // Energy from both GPUs' NVML counters: a GPU draws tens to hundreds of watts (an H100 SXM's
  // limit is 700 W), so each window's mean power per device lies in (0, 1000) W.
  ASSERT_TRUE(j["idle_watts_per_device"].is_number()) << j.dump();
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["wrong"], 0) << row.dump();
    EXPECT_GT(row["busbw_gbs"].get<double>(), 0.0) << row.dump();
    ASSERT_TRUE(row["watts_per_device"].is_number()) << row.dump();
    EXPECT_GT(row["watts_per_device"].get<double>(), 0.0) << row.dump();
    EXPECT_LT(row["watts_per_device"].get<double>(), 1000.0) << row.dump();
    EXPECT_GT(row["nj_per_byte"].get<double>(), 0.0) << row.dump();
    // The window between counter updates: the run lasts settle + 0.5 s + margin at least, so the
    // window holds 0.5 s + margin less two of NVML's ~0.1 s refreshes.
    EXPECT_GE(row["energy_seconds"].get<double>(), 0.4) << row.dump();
    // At least one batch of the count that fills settle (0.5 s by default), window and margin at the
    // timed median; time_us * 1e-6 may differ from the bench's seconds in the last bit, moving a ceil by one.
    EXPECT_GE(static_cast<double>(row["energy_iters"].get<int64_t>()),
              static_cast<double>(allreduce_energy_iters(0.5 + 0.5 + kAllreduceEnergyMarginSeconds,
                                                         row["time_us"].get<double>() * 1e-6)) -
                  1.0)
        << row.dump();
  }
  std::printf("[bench] 2 GPUs, 16 MiB: busbw %.1f GB/s, %.3f nJ/B, %.0f W per GPU (idle %.0f W) (%s)\n",
              j["rows"].back()["busbw_gbs"].get<double>(), j["rows"].back()["nj_per_byte"].get<double>(),
              j["rows"].back()["watts_per_device"].get<double>(), j["idle_watts_per_device"].get<double>(),
              library.c_str());

  // The same sizes issued from the host: checked alike, and recorded as such.
  MpiResult h = run_mpi(2, {"bench", "allreduce", "-b", "8", "-e", "1M", "-f", "8", "-w", "2", "-n", "5", "--check",
                            "--json", "--energy-window", "0", "--issue", "host"});
  ASSERT_EQ(h.exit_code, 0) << h.out << h.err;
  const nlohmann::json hj = nlohmann::json::parse(h.out);
  EXPECT_EQ(hj["issue"], "host");
  for (const auto& row : hj["rows"]) EXPECT_EQ(row["wrong"], 0) << row.dump();
  ASSERT_EQ(hj["rows"].size(), 6u);  // 8 B ... 256 KiB
  ASSERT_EQ(hj["rows"][5]["bytes"], j["rows"][5]["bytes"]);
  std::printf("[bench] 2 GPUs, 256 KiB: %.1f us replayed from a graph, %.1f us issued from the host\n",
              j["rows"][5]["time_us"].get<double>(), hj["rows"][5]["time_us"].get<double>());
}

TEST(BenchAllreduceGpu, OneProcessRunsOnOneGpu) {
  if (cuda_device_count() < 1) GTEST_SKIP() << "no usable GPU";
  CliResult r = run_cnnscale({"bench", "allreduce", "-b", "1K", "-e", "1M", "-f", "32", "--check", "--energy-window",
                              "0.3"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("1 rank(s), device gpu, NCCL"), std::string::npos) << r.out;
  // One rank moves nothing and would replay an empty graph: it is host-issued, and says so.
  EXPECT_NE(r.out.find("timed allreduces per size, each issued from the host"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# energy: NVML total energy counter"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nJ/B"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# check: passed"), std::string::npos) << r.out;
}

#endif  // CNNSCALE_HAVE_CUDA

}  // namespace
}  // namespace cnnscale::testing
