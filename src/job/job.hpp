// Job: what every measuring command (train, infer, calibrate, time, each bench) runs as. This
// process's rank in its launch (MpiEnv), its device and backend, the check that no two ranks drive
// one GPU, the watchdog that ends a job whose peer died or hangs, the communicator (MPI on CPU
// ranks, NCCL on GPU ranks), the rank's energy monitor, and every rank's figures gathered in rank
// order. The commands in src/app/ say what they want of it; the order of its collectives is the
// order they call them in, the same on every rank.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/communicator.hpp"
#include "core/precision.hpp"
#include "core/watchdog.hpp"
#include "measure/energy_monitor.hpp"
#include "parallel/device_binding.hpp"
#include "parallel/mpi_env.hpp"

namespace cnnscale {

class ProgressBoard;
class RankExchange;

// How the ranks of an NCCL job exchange (Job::connect); CPU ranks use MPI, which chooses alone.
struct CommunicatorChoice {
  AllreduceAlgo algo = AllreduceAlgo::Ring;
  NcclTuning tuning;
  double timeout_seconds = 300.0;  // bounds every host wait of the NCCL communicator
};

class Job {
 public:
  // `together`: the ranks of this MPI launch work as one job (their devices are checked, their
  // figures gathered, a watchdog guards their collectives); ConfigError-free, but a RuntimeError
  // when asked of a process no MPI launcher started. Otherwise the process is a job of one rank,
  // whatever launched it (a one-rank train, every rank of a kernel bench).
  explicit Job(bool together);
  // Together when launched with peers (2 or more ranks): infer's and the benches' rule.
  static Job of_launch();
  ~Job();
  Job(Job&&) = delete;
  Job& operator=(Job&&) = delete;

  bool together() const { return together_; }
  // The launch's MPI, or null without one (a plain process, the tests).
  const MpiEnv* mpi() const { return mpi_; }
  int rank() const { return rank_; }
  int size() const { return size_; }               // 1 unless together
  int local_rank() const { return local_rank_; }   // among this node's ranks
  int local_size() const { return local_size_; }
  const std::string& host() const { return host_; }

  // ---- devices. Two rules, each its command's (behaviour kept as users know it):
  // train's: --gpus picks each node-local rank's GPU (and implies --device gpu; an explicit
  // `device_given` other than gpu is a ConfigError); --device gpu (or cuda) binds a rank of a
  // together job to its node-local rank's GPU; a job of one rank with --gpus takes its first entry.
  std::string device_for_train(const std::string& device, bool device_given, const std::vector<int>& gpus) const;
  // infer's: a GPU --device binds each rank of a together job to its node-local rank's GPU (or its
  // --gpus entry); --gpus without peers is a ConfigError.
  std::string device_for_ranks(const std::string& device, const std::vector<int>& gpus) const;

  // This rank's backend (make_backend), owned by the job: it outlives the communicator and the
  // energy monitor. The precision is recorded: what the backend was made for.
  Backend& open_backend(const std::string& device, int sm_count = 0, Precision precision = Precision::FP32,
                        AlgorithmChoice algorithms = {});
  bool has_backend() const { return backend_ != nullptr; }
  Backend& backend() const;        // after open_backend
  Precision precision() const;     // the precision open_backend made the backend for
  // A second backend on the job's device in `precision`, owned by the caller (calibrate executes
  // its int8 table beside the fp32 pass that measured it).
  std::unique_ptr<Backend> another_backend(Precision precision) const;

  // Every rank's host, device and GPU UUID, in rank order (collective when together); ConfigError
  // when two ranks share a GPU or the ranks mix CPU and GPU devices. After open_backend.
  const std::vector<RankDevice>& bind_devices();
  const std::vector<RankDevice>& devices() const { return devices_; }
  std::vector<std::string> hosts() const;  // every bound rank's host, in rank order

  // From here until the job ends a rank blocked in one operation longer than `timeout_seconds`
  // ends the job with exit 3: the communicator is aborted, then MPI (or the process). Together,
  // a board of every rank's collectives lets the line name the ranks that did not arrive.
  void start_watchdog(double timeout_seconds);
  bool watching() const { return watchdog_ != nullptr; }

  // The ranks' communicator, collective: MPI for CPU ranks, NCCL (bootstrapped over MPI) for GPU
  // ranks. After bind_devices. A job of one rank has one on a GPU only (NCCL of one rank, as `bench
  // allreduce` run as one process times it); MPI's needs a together job.
  Communicator& connect(const CommunicatorChoice& choice);
  Communicator* communicator() const { return comm_.get(); }
  RankExchange* exchange() const;  // the layers' view of the communicator (sync batch norm); null before

  // This rank's energy monitor, owned by the job: NVML for its GPU (by UUID; a warning and null
  // energy without NVML or a GPU), RAPL when it is its host's first rank (a warning when unreadable;
  // CNNSCALE_RAPL_ROOT names another powercap tree). After open_backend.
  measure::EnergyMonitor& open_energy_monitor(double power_hz);
  measure::EnergyMonitor* energy() const { return energy_.get(); }

  // Every rank's value in rank order (collective when together; a job of one rank gets its own).
  std::vector<double> gather(double value) const;
  std::vector<std::string> gather(const std::string& value) const;
  // Returns once every rank has arrived (together; at once otherwise): the ranks' windows start together.
  void start_together() const;

  // With CNNSCALE_PID_DIR set, writes <dir>/rank-<R>.pid (fault tests and operators pick a rank).
  void write_pid_file() const;

 private:
  bool together_ = false;
  const MpiEnv* mpi_ = nullptr;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string host_;
  std::string device_;  // as open_backend was given it
  Precision precision_ = Precision::FP32;
  std::vector<RankDevice> devices_;
  // Destroyed in reverse: the energy monitor and the watchdog stop before the communicator goes,
  // which goes before the backend whose stream it uses.
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<RankExchange> exchange_;
  std::atomic<Communicator*> abort_target_{nullptr};
  std::unique_ptr<Watchdog> watchdog_;
  // Released by ~Job after the watchdog's report of it is withdrawn, while it still watches.
  std::unique_ptr<ProgressBoard> progress_;
  std::unique_ptr<measure::EnergyMonitor> energy_;
};

}  // namespace cnnscale
