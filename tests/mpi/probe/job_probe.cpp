// A job of every rank of its launch, built from the job library alone (no cnnscale command around
// it), for tests/mpi/test_job_mpi.cpp: `mpirun -np N job_probe MODE`.
//   bind:  backend, watchdog, device binding, MPI communicator, a sum over it and every rank's
//          figures gathered; rank 0 prints one JSON line of what it saw.
//   stall: rank 0 waits in a gather that the last rank never joins: its watchdog must end the job
//          (exit 3) with a line naming the rank that did not arrive.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "core/watchdog.hpp"
#include "job/job.hpp"
#include "parallel/data_parallel.hpp"

int main(int argc, char** argv) {
  using namespace cnnscale;
  const std::string mode = argc > 1 ? argv[1] : "bind";
  MpiEnv mpi(&argc, &argv);
  try {
    nlohmann::json seen;
    {
      Job job(true);
      Backend& backend = job.open_backend(job.device_for_ranks("cpu", {}));
      job.start_watchdog(mode == "stall" ? 1.0 : 60.0);
      if (mode == "stall") {
        if (job.rank() == job.size() - 1) std::this_thread::sleep_for(std::chrono::seconds(60));
        job.gather(1.0);
        return 0;
      }
      nlohmann::json devices = nlohmann::json::array();
      for (const RankDevice& d : job.bind_devices()) devices.push_back({{"host", d.host}, {"device", d.device}});
      Communicator& comm = job.connect({});
      const std::vector<float> sum = allreduce_sum_host(comm, backend, {static_cast<float>(job.rank() + 1)});
      const std::vector<double> figures = job.gather(0.5 + job.rank());
      const std::vector<std::string> words = job.gather("rank " + std::to_string(job.rank()));
      job.start_together();
      seen = {{"size", job.size()},         {"together", job.together()}, {"devices", devices},
              {"communicator", comm.name()}, {"sum", sum[0]},            {"figures", figures},
              {"words", words},              {"watching", job.watching()}};
      if (job.rank() != 0) return 0;
    }
    seen["watchdog_after_job"] = Watchdog::active() != nullptr;
    std::printf("%s\n", seen.dump().c_str());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "job_probe: error: %s\n", e.what());
    mpi.abort_job(e.exit_code());
  }
}
