// Job: rank, device binding, watchdog, communicator, energy monitor and gathering of one
// measuring command's job (job/job.hpp).
#include "job/job.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "backend/devices.hpp"
#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "measure/nvml.hpp"
#include "measure/rapl.hpp"
#include "core/log.hpp"
#include "parallel/counted_communicator.hpp"
#include "parallel/data_parallel.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/progress_board.hpp"

namespace cnnscale {

Job::Job(bool together) : together_(together), mpi_(MpiEnv::current()) {
  const bool launched = mpi_ && mpi_->initialized();
  CNNSCALE_CHECK(!together_ || launched, "a job of several ranks needs an MPI launch");
  if (launched) {
    rank_ = mpi_->rank();
    local_rank_ = mpi_->local_rank();
    local_size_ = mpi_->local_size();
    host_ = mpi_->host();
  } else {
    host_ = mpi_ ? mpi_->host() : std::string();
  }
  // A job of one rank is alone whatever launched it: rank 0 of 1 (its launch's rank, local rank and
  // host stay as they are, for the energy monitor's one-RAPL-reader-per-host rule).
  if (together_) size_ = mpi_->size();
  else rank_ = 0;
}

Job Job::of_launch() {
  const MpiEnv* mpi = MpiEnv::current();
  return Job(mpi && mpi->distributed());
}

Job::~Job() {
  // The watchdog's peer report reads the board: withdrawn first (set_peer_report waits for a report
  // in progress), so a mark that expires while the rest is torn down never reads a freed board.
  if (watchdog_) watchdog_->set_peer_report({});
  progress_.reset();
}

std::string Job::device_for_train(const std::string& device, bool device_given, const std::vector<int>& gpus) const {
  std::string out = device;
  if (!gpus.empty()) {
    if (device_given && out != "gpu")
      throw_config("--gpus picks each rank's GPU: use it with --device gpu (or alone), not --device {}", out);
    out = "gpu";
  }
  if (out == "gpu" || out == "cuda") {
    const int gpu = together_ ? gpu_for_local_rank(local_rank_, local_size_, gpus)
                              : gpus.empty() ? -1 : gpu_for_local_rank(0, 1, gpus);
    if (gpu >= 0) {
      // Before any rank opens a device: too many ranks for this node is a launch mistake, said as such.
      if (together_) check_gpu_visible(rank_, local_rank_, host_, gpu, cuda_device_count());
      out = fmt::format("gpu:{}", gpu);
    }
  }
  return out;
}

std::string Job::device_for_ranks(const std::string& device, const std::vector<int>& gpus) const {
  if (device != "cpu" && together_) {
    const int gpu = gpu_for_local_rank(local_rank_, local_size_, gpus);
    check_gpu_visible(rank_, local_rank_, host_, gpu, cuda_device_count());
    return "gpu:" + std::to_string(gpu);
  }
  if (!gpus.empty()) throw_config("--gpus binds the ranks of an mpirun job; for one process use --device gpu:N");
  return device;
}

Backend& Job::open_backend(const std::string& device, int sm_count, Precision precision, AlgorithmChoice algorithms) {
  CNNSCALE_CHECK(!backend_, "the job's backend is open already");
  backend_ = make_backend(device, sm_count, precision, algorithms);
  device_ = device;
  precision_ = precision;
  return *backend_;
}

std::unique_ptr<Backend> Job::another_backend(Precision precision) const {
  CNNSCALE_CHECK(backend_ != nullptr, "the job has no backend yet");
  return make_backend(device_, 0, precision);
}

Backend& Job::backend() const {
  CNNSCALE_CHECK(backend_ != nullptr, "the job has no backend yet");
  return *backend_;
}

Precision Job::precision() const {
  CNNSCALE_CHECK(backend_ != nullptr, "the job has no backend yet");
  return precision_;
}

const std::vector<RankDevice>& Job::bind_devices() {
  const Backend& b = backend();
  RankDevice mine{host_, b.device().to_string(), ""};
  if (!b.device().is_cpu()) mine.uuid = gpu_uuid(b.device().index);
  devices_.clear();
  for (const std::string& text : gather(encode_rank_device(mine))) devices_.push_back(decode_rank_device(text));
  check_distinct_devices(devices_);
  for (const RankDevice& d : devices_)
    if ((d.device.rfind("cpu", 0) == 0) != b.device().is_cpu())
      throw_config("ranks mix CPU and GPU devices ({} and {}): use one kind for the whole job", mine.device, d.device);
  return devices_;
}

std::vector<std::string> Job::hosts() const {
  std::vector<std::string> out;
  for (const RankDevice& d : devices_) out.push_back(d.host);
  return out;
}

void Job::start_watchdog(double timeout_seconds) {
  CNNSCALE_CHECK(!watchdog_, "the job's watchdog runs already");
  // From here on a dead or stuck peer must not leave this rank waiting forever.
  watchdog_ = std::make_unique<Watchdog>(timeout_seconds, rank_, host_, [this] {
    if (Communicator* c = abort_target_.load()) c->abort();
    // MPI_Abort from this (non-main) thread needs MPI_THREAD_MULTIPLE; otherwise exiting without
    // MPI_Finalize makes mpirun end the job.
    if (together_ && mpi_->thread_multiple()) mpi_->abort_job(3);
    std::_Exit(3);
  });
  if (!together_) return;
  // Each rank's collectives started, where the others can read them: a waiting rank's watchdog line
  // then names the ranks that did not arrive.
  progress_ = std::make_unique<ProgressBoard>();
  watchdog_->set_peer_report([board = progress_.get()](int64_t mine) { return board->behind(mine); });
}

Communicator& Job::connect(const CommunicatorChoice& choice) {
  CNNSCALE_CHECK(!comm_, "the job's communicator is connected already");
  Backend& b = backend();
  if (b.device().is_cpu()) {
    CNNSCALE_CHECK(together_, "an MPI communicator joins the ranks of a together job");
    comm_ = std::make_unique<MpiCommunicator>();
  } else {
    std::vector<char> id;
    if (rank_ == 0) id = device_communicator_id();
    if (together_) mpi_->broadcast(id, 0);
    BlockingOp mark("NCCL communicator initialisation");
    // Counted above the NCCL code, as MpiCommunicator counts its own: the peers' watchdogs compare.
    comm_ = std::make_unique<CountedDeviceCommunicator>(
        make_device_communicator(b, rank_, size_, id, choice.algo, choice.timeout_seconds, choice.tuning));
  }
  exchange_ = std::make_unique<CommunicatorExchange>(*comm_);
  abort_target_.store(comm_.get());
  return *comm_;
}

RankExchange* Job::exchange() const { return exchange_.get(); }

measure::EnergyMonitor& Job::open_energy_monitor(double power_hz) {
  CNNSCALE_CHECK(!energy_, "the job's energy monitor is open already");
  const Device device = backend().device();
  std::unique_ptr<measure::GpuPowerReader> gpu;
  if (device.is_cpu()) {
    gpu = std::make_unique<measure::UnavailableGpuReader>("CPU run");
  } else {
    gpu = measure::open_gpu_power_reader(gpu_uuid(device.index), static_cast<unsigned>(device.index));
  }
  // RAPL counts the whole host: one rank per host reads it, so the job's sum counts each once.
  std::unique_ptr<measure::RaplReader> rapl;
  if (local_rank_ == 0) {
    // CNNSCALE_RAPL_ROOT: another powercap tree (tests use a fake one).
    const char* root = std::getenv("CNNSCALE_RAPL_ROOT");
    rapl = std::make_unique<measure::RaplReader>(root && *root ? root : "/sys/class/powercap");
    if (!rapl->available())
      log::warn("energy: no readable RAPL counter under /sys/class/powercap: CPU energy fields are null");
  }
  energy_ = std::make_unique<measure::EnergyMonitor>(std::move(gpu), std::move(rapl), power_hz);
  return *energy_;
}

std::vector<double> Job::gather(double value) const {
  return together_ ? mpi_->allgather(value) : std::vector<double>{value};
}

std::vector<std::string> Job::gather(const std::string& value) const {
  return together_ ? mpi_->allgather(value) : std::vector<std::string>{value};
}

void Job::start_together() const {
  if (together_) mpi_->allgather(0.0);
}

void Job::write_pid_file() const {
  const char* dir = std::getenv("CNNSCALE_PID_DIR");
  if (!dir || !*dir) return;
  const std::filesystem::path path = std::filesystem::path(dir) / fmt::format("rank-{}.pid", rank_);
  write_file_atomically(path.string(), fmt::format("{}\n", ::getpid()));  // readers never see a half-written pid
}

}  // namespace cnnscale
