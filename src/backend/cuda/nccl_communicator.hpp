// NcclCommunicator: the Communicator for device tensors. Collectives run on a dedicated
// communication stream ordered after the compute stream by events; the host only ever polls (CUDA
// event + NCCL async error) against a deadline, so a dead or hung peer ends in PeerError, not a
// hang. One owning thread; only abort() may also be called from another (the watchdog).
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_entry.hpp"
#include "backend/cuda/device_context.hpp"

namespace cnnscale {

class CudaBackend;

class NcclCommunicator final : public DeviceCommunicator {
 public:
  // Collective: every rank of the job must call it with the same id and size. Initialisation is
  // non-blocking and polled, so a peer that never arrives ends in PeerError after the timeout.
  // `tuning`: as make_nccl_communicator (cuda_entry.hpp) describes it.
  NcclCommunicator(CudaBackend& backend, int rank, int size, const ncclUniqueId& id, AllreduceAlgo algo,
                   double timeout_seconds, const NcclTuning& tuning = {});
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  std::string name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void allreduce_sum_async(const Tensor& t) override;
  void allgather_async(const Tensor& mine, const Tensor& all) override;
  // wait() also joins the side stream of after_collectives().
  void wait() override;
  // `work` queues on a side stream (CudaBackend::LaneScope: conversions and segmented SGD updates
  // only) that waits for the collectives and the compute work issued so far: a bucket's update runs
  // beside the rest of backward and the exchange of the next buckets, which neither waits for it.
  void after_collectives(const std::function<void()>& work) override;
  void wait_collectives() override;
  void synchronize_host() override;
  void abort() override;

  int record_timestamp() override;
  double elapsed_ms(int from, int to) override;
  void clear_timestamps() override;
  void set_busy_tag(std::int64_t tag) override { busy_tag_ = tag; }
  using DeviceCommunicator::take_busy_ms;
  std::vector<std::pair<std::int64_t, double>> take_busy_ms(std::int64_t up_to) override;
  void begin_captured_brackets() override { captured_brackets_.clear(); }
  std::vector<std::pair<size_t, size_t>> captured_brackets() const override { return captured_brackets_; }
  void add_busy_bracket(std::int64_t tag, std::shared_ptr<TimingEvent> start, std::shared_ptr<TimingEvent> end) override;

  cudaStream_t comm_stream() const { return comm_stream_; }
  double timeout_seconds() const { return timeout_.count(); }

 private:
  using Clock = std::chrono::steady_clock;

  // Timing events, created on first use and reused after a reset (used = 0).
  struct EventPool {
    std::vector<cudaEvent_t> events;
    int used = 0;
    cudaEvent_t next();
    void release() noexcept;
  };

  void activate() const;
  void require_live(const std::string& op) const;  // PeerError once aborted
  // ncclCommGetAsyncError under the lock: ncclSuccess, ncclInProgress or an error (described in
  // `error_text`); PeerError if the communicator has been aborted meanwhile.
  ncclResult_t async_state(const std::string& op, std::string& error_text);
  // After an NCCL call (`status`, `call_error` describing a refusal) on a non-blocking
  // communicator: polls until it has been issued (ncclInProgress -> ncclSuccess); aborts and
  // throws on an error or past the deadline.
  void settle(ncclResult_t status, const std::string& call_error, const std::string& op);
  // Polls until `event` has completed, watching NCCL's async error and the deadline.
  void poll_event(cudaEvent_t event, const std::string& op);
  // Aborts the communicator and throws PeerError naming the operation, this rank and the cause.
  [[noreturn]] void fail_peer(const std::string& op, const std::string& cause);
  std::string timeout_cause() const;
  std::string where() const;
  void release_cuda_objects() noexcept;
  // Issues `call` (an NCCL collective on comm_stream_) in order after the queued compute, named
  // `op` in errors, bracketed for the busy time while a tag is set.
  void enqueue(std::string op, const std::function<ncclResult_t()>& call);

  CudaBackend& backend_;
  int rank_ = 0, size_ = 1, device_ = 0;
  // The backend's context (with a partition: its green context), current for every call here, so
  // that the communication stream and NCCL's kernels stay in the backend's SMs.
  std::shared_ptr<const cuda::DeviceContext> ctx_;
  std::chrono::duration<double> timeout_;
  // abort() may come from the watchdog thread: comm_ is used and freed only under mutex_.
  std::mutex mutex_;
  ncclComm_t comm_ = nullptr;
  std::atomic<bool> aborted_{false};
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t compute_ready_ = nullptr;  // recorded on the compute stream, waited on by comm_stream_
  cudaEvent_t comm_done_ = nullptr;      // recorded on comm_stream_, waited on by compute / host
  // after_collectives()' side stream, of the least priority (backward's kernels go first); its
  // events: lane_ready_ on comm_stream_ and lane_compute_ on the compute stream (the lane waits for
  // both), lane_done_ on the lane.
  cudaStream_t lane_stream_ = nullptr;
  cudaEvent_t lane_ready_ = nullptr, lane_done_ = nullptr;
  cudaEvent_t lane_compute_ = nullptr;
  bool lane_pending_ = false;  // work queued on the lane since the last wait()
  uint64_t ops_issued_ = 0;
  uint64_t enqueues_in_progress_ = 0;  // calls that returned ncclInProgress (settle() polled them)
  std::string last_op_ = "none";

  EventPool timestamps_;
  EventPool busy_events_;
  std::int64_t busy_tag_ = -1;  // < 0: no brackets
  struct BusyBracket {
    std::int64_t tag;
    cudaEvent_t start, end;
    // A replay's events (add_busy_bracket): held until read, which lets the replay's copy go.
    std::shared_ptr<TimingEvent> held_start, held_end;
  };
  std::vector<BusyBracket> busy_brackets_;  // one per allreduce while a tag is set, in issue order
  std::vector<std::pair<size_t, size_t>> captured_brackets_;  // timing points of the capture in progress
};

}  // namespace cnnscale
