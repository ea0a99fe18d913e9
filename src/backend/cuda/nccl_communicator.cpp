// NcclCommunicator: non-blocking NCCL communicator on a communication stream of the greatest priority
// (or, asked, the least). Every host wait polls (cudaEventQuery + ncclCommGetAsyncError) against a
// deadline and, past it or on an asynchronous error, aborts the communicator so that no kernel of
// this rank is left spinning.
#include "backend/cuda/nccl_communicator.hpp"

#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_timing_event.hpp"
#include "backend/cuda/nccl_settings.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace cnnscale {
using cuda::apply_algo;
using cuda::apply_max_ctas;
using cuda::check_cta_policy_supported;

namespace {

std::string nccl_error_text(ncclResult_t status, ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  return fmt::format("{} ({}){}{}", ncclGetErrorString(status), static_cast<int>(status), last && *last ? ": " : "",
                     last ? last : "");
}

// Polling cadence: an enqueue or a collective usually settles within microseconds of the first
// look, so the first 64 looks only yield the core (a sleep_for of 20 us took 60-80 us on Linux,
// timer slack included: docs/measurements/2026-11-26-training-step-choices.md;
// as a first wait it would cap back-to-back enqueues at ~12k per second);
// the next 200 are 20 us apart (low latency at step ends); a long wait then costs a look every 2 ms.
void backoff(int attempt) {
  if (attempt < 64) {
    std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(attempt < 264 ? std::chrono::microseconds(20) : std::chrono::microseconds(2000));
}

}  // namespace

NcclCommunicator::NcclCommunicator(CudaBackend& backend, int rank, int size, const ncclUniqueId& id, AllreduceAlgo algo,
                                   double timeout_seconds, const NcclTuning& tuning)
    : backend_(backend),
      rank_(rank),
      size_(size),
      device_(backend.device_index()),
      ctx_(backend.context()),
      timeout_(timeout_seconds) {
  if (size < 1 || rank < 0 || rank >= size) throw_runtime("nccl communicator: rank {} of {} is not valid", rank, size);
  if (!(timeout_seconds > 0)) throw_runtime("nccl communicator: timeout must be positive, got {} s", timeout_seconds);
  if (tuning.max_ctas < 0)
    throw_runtime("nccl communicator: max CTAs must be >= 0 (0: NCCL's choice), got {}", tuning.max_ctas);
  check_cta_policy_supported(tuning.cta_policy);
  activate();
  try {
    // Greatest priority by default: gradient buckets are reduced while backward kernels fill the GPU,
    // and the scheduler should start the collective's blocks as soon as SMs free up rather than after
    // every queued backward kernel. The least (tuning.low_priority) turns that round: backward's
    // pending blocks start first, trading the exchange's latency for compute.
    int least = 0, greatest = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    // In the backend's partition, if it has one.
    comm_stream_ = ctx_->create_stream(tuning.low_priority ? least : greatest);
    CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
    lane_stream_ = ctx_->create_stream(least);
    CUDA_CHECK(cudaEventCreateWithFlags(&lane_ready_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&lane_done_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&lane_compute_, cudaEventDisableTiming));
    apply_algo(algo);
    const int ctas = apply_max_ctas(tuning.max_ctas);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // NCCL never blocks the host; settle() polls against the deadline
    // Per communicator as well: NCCL reads NCCL_MAX_CTAS once per process, the config each time.
    if (ctas > 0) config.maxCTAs = ctas;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    // Why a run would set it: EFFICIENCY asks NCCL for the fewest CTAs that still reach decent
    // bandwidth (rather than as many as help the collective alone), which leaves an overlapped
    // backward more SMs; ZERO asks for collectives that occupy none where NCCL has such a path.
    // Otherwise the field stays NCCL_CONFIG_UNDEF_INT, NCCL's own default.
    if (tuning.cta_policy == CtaPolicy::Efficiency) config.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY;
    if (tuning.cta_policy == CtaPolicy::Zero) config.CTAPolicy = NCCL_CTA_POLICY_ZERO;
#endif
    last_op_ = "initialisation (ncclCommInitRankConfig)";
    // With the backend's context current: NCCL takes the device (and its context) from the caller.
    ncclResult_t status = ncclCommInitRankConfig(&comm_, size, id, rank, &config);
    settle(status, status == ncclSuccess || status == ncclInProgress ? "" : nccl_error_text(status, comm_), last_op_);
    ctx_->reclaim();
  } catch (...) {
    if (comm_) ncclCommAbort(comm_);  // settle() aborts (and nulls comm_) itself on its failures
    comm_ = nullptr;
    ctx_->make_current_noexcept();
    release_cuda_objects();
    throw;
  }
  const char* env_algo = std::getenv("NCCL_ALGO");
  log::debug(
      "nccl communicator: rank {} of {} on gpu:{}, NCCL {}, NCCL_ALGO={}, CTA policy {}, {} priority, timeout {} s",
      rank_, size_, device_, nccl_version_string(), env_algo ? env_algo : "(NCCL's choice)",
      to_string(tuning.cta_policy), tuning.low_priority ? "low" : "high", timeout_seconds);
}

NcclCommunicator::~NcclCommunicator() {
  ctx_->make_current_noexcept();  // destructors cannot throw; at process exit the runtime may be unloading
  log::debug("nccl communicator {}: {} NCCL call(s) returned ncclInProgress and were polled; {} allreduce(s) issued",
             where(), enqueues_in_progress_, ops_issued_);
  // Unwinding from an error: peers may never match our outstanding collectives, so a flush could
  // only run into the deadline; abort at once. Otherwise flush (bounded), then free. The lock is
  // taken per call so that the watchdog's abort() can still cut a hanging flush short.
  ncclResult_t status = ncclInternalError;
  if (std::uncaught_exceptions() == 0) {
    {
      std::lock_guard lock(mutex_);
      if (comm_) status = ncclCommFinalize(comm_);
    }
    const auto deadline = Clock::now() + timeout_;
    for (int attempt = 0; status == ncclInProgress && Clock::now() < deadline; ++attempt) {
      backoff(attempt);
      std::lock_guard lock(mutex_);
      if (!comm_ || ncclCommGetAsyncError(comm_, &status) != ncclSuccess) break;
    }
  }
  {
    std::lock_guard lock(mutex_);
    if (comm_) {
      if (status == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        if (std::uncaught_exceptions() == 0)
          log::warn("nccl communicator {}: flush at destruction failed ({}); aborting it", where(),
                    status == ncclInProgress ? std::string("timed out") : nccl_error_text(status, comm_));
        ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
  }
  ctx_->make_current_noexcept();  // NCCL's teardown may have made the primary context current
  release_cuda_objects();
}

void NcclCommunicator::release_cuda_objects() noexcept {
  timestamps_.release();
  busy_events_.release();
  if (compute_ready_) cudaEventDestroy(compute_ready_);
  if (comm_done_) cudaEventDestroy(comm_done_);
  // Does not wait: an aborted collective's kernels exit on their own and the stream's resources
  // are freed when its work is done.
  if (comm_stream_) cudaStreamDestroy(comm_stream_);
  if (lane_ready_) cudaEventDestroy(lane_ready_);
  if (lane_done_) cudaEventDestroy(lane_done_);
  if (lane_compute_) cudaEventDestroy(lane_compute_);
  if (lane_stream_) cudaStreamDestroy(lane_stream_);
  compute_ready_ = comm_done_ = lane_ready_ = lane_done_ = lane_compute_ = nullptr;
  comm_stream_ = lane_stream_ = nullptr;
}

void NcclCommunicator::EventPool::release() noexcept {
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  events.clear();
  used = 0;
}

cudaEvent_t NcclCommunicator::EventPool::next() {
  if (used == static_cast<int>(events.size())) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));  // with timing
    events.push_back(e);
  }
  return events[used++];
}

void NcclCommunicator::activate() const { ctx_->make_current(); }

std::string NcclCommunicator::where() const {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '?';
  return fmt::format("rank {} of {} (gpu:{} on host {})", rank_, size_, device_, host);
}

void NcclCommunicator::require_live(const std::string& op) const {
  if (aborted_.load())
    throw PeerError(
        fmt::format("nccl {} on {}: the communicator was aborted (after a failure here or by the "
                    "watchdog)",
                    op, where()));
}

// May run on the watchdog thread while the owner polls: the lock keeps the owner from using the
// communicator that ncclCommAbort frees, and the owner's next look sees aborted_.
void NcclCommunicator::abort() {
  std::lock_guard lock(mutex_);
  if (comm_) {
    ncclResult_t status = ncclCommAbort(comm_);
    if (status != ncclSuccess)
      log::warn("nccl communicator {}: ncclCommAbort returned {}", where(), ncclGetErrorString(status));
  }
  comm_ = nullptr;
  aborted_ = true;
}

ncclResult_t NcclCommunicator::async_state(const std::string& op, std::string& error_text) {
  std::lock_guard lock(mutex_);
  require_live(op);
  ncclResult_t async = ncclSuccess;
  ncclResult_t query = ncclCommGetAsyncError(comm_, &async);
  if (query != ncclSuccess) {
    error_text = "ncclCommGetAsyncError: " + nccl_error_text(query, comm_);
    return query;
  }
  if (async != ncclSuccess && async != ncclInProgress) error_text = nccl_error_text(async, comm_);
  return async;
}

void NcclCommunicator::fail_peer(const std::string& op, const std::string& cause) {
  abort();
  throw PeerError(fmt::format("nccl {} failed on {}: {}; communicator aborted", op, where(), cause));
}

std::string NcclCommunicator::timeout_cause() const {
  return fmt::format("not complete after {:g} s (a peer rank died, hung or never joined)", timeout_.count());
}

void NcclCommunicator::settle(ncclResult_t status, const std::string& call_error, const std::string& op) {
  if (status != ncclSuccess && status != ncclInProgress) {
    // Refused at the call: usually this rank's own mistake (bad argument, CUDA failure). Peers
    // would wait for this collective forever, so the communicator is aborted all the same.
    if (status == ncclRemoteError) fail_peer(op, call_error);
    abort();
    throw RuntimeError(fmt::format("nccl {} failed on {}: {}; communicator aborted", op, where(), call_error));
  }
  const auto deadline = Clock::now() + timeout_;
  std::string text;
  if (status == ncclInProgress) ++enqueues_in_progress_;
  for (int attempt = 0; status == ncclInProgress; ++attempt) {
    if (Clock::now() > deadline) fail_peer(op, timeout_cause());
    backoff(attempt);
    status = async_state(op, text);
  }
  if (status != ncclSuccess) fail_peer(op, text);
}

void NcclCommunicator::poll_event(cudaEvent_t event, const std::string& op) {
  const auto deadline = Clock::now() + timeout_;
  for (int attempt = 0;; ++attempt) {
    cudaError_t done = cudaEventQuery(event);
    std::string text;
    // An error NCCL reports while (or after) the work ran voids its result, even if it completed.
    ncclResult_t async = async_state(op, text);
    if (async != ncclSuccess && async != ncclInProgress) fail_peer(op, text);
    if (done == cudaSuccess) return;
    if (done != cudaErrorNotReady) {
      // A CUDA fault (this rank's or an illegal address in a kernel): not a peer's failure.
      abort();
      cuda::fail(done, "cudaEventQuery on the communication stream", __FILE__, __LINE__);
    }
    if (Clock::now() > deadline) fail_peer(op, timeout_cause());
    backoff(attempt);
  }
}

void NcclCommunicator::allreduce_sum_async(const Tensor& t) {
  require_live("allreduce");
  ncclDataType_t type = ncclFloat;
  switch (t.dtype()) {
    case DType::F32: type = ncclFloat; break;
    case DType::BF16: type = ncclBfloat16; break;
    case DType::F16: type = ncclFloat16; break;
    default:
      throw_runtime("nccl allreduce on {}: tensor is {}, the sum is over f32, bf16 or f16", where(),
                    dtype_name(t.dtype()));
  }
  if (t.device() != Device{Device::Kind::CUDA, device_})
    throw_runtime("nccl allreduce on {}: tensor lives on {}, not on gpu:{}", where(), t.device().to_string(), device_);
  if (t.numel() == 0) return;  // every rank holds the same shapes, so every rank skips it
  enqueue(fmt::format("allreduce #{} ({} {} values)", ops_issued_ + 1, t.numel(), dtype_name(t.dtype())), [&] {
    return ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), type, ncclSum, comm_, comm_stream_);
  });
}

void NcclCommunicator::allgather_async(const Tensor& mine, const Tensor& all) {
  require_live("allgather");
  for (const Tensor* t : {&mine, &all})
    if (t->device() != Device{Device::Kind::CUDA, device_})
      throw_runtime("nccl allgather on {}: tensor lives on {}, not on gpu:{}", where(), t->device().to_string(),
                    device_);
  if (all.dtype() != mine.dtype() || all.numel() != mine.numel() * size_)
    throw_runtime("nccl allgather on {}: {} {} values gathered into {} {}, not {} ranks' worth", where(), mine.numel(),
                  dtype_name(mine.dtype()), all.numel(), dtype_name(all.dtype()), size_);
  if (mine.numel() == 0) return;
  // A copy, no arithmetic: bytes whatever the dtype.
  enqueue(fmt::format("allgather #{} ({} {} values)", ops_issued_ + 1, mine.numel(), dtype_name(mine.dtype())),
          [&] { return ncclAllGather(mine.raw(), all.raw(), mine.bytes(), ncclUint8, comm_, comm_stream_); });
}

void NcclCommunicator::enqueue(std::string op, const std::function<ncclResult_t()>& call) {
  activate();
  ++ops_issued_;
  last_op_ = std::move(op);
  // The collective reads its input as the compute stream leaves it (the ordering contract).
  CUDA_CHECK(cudaEventRecord(compute_ready_, backend_.stream()));
  CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, compute_ready_, 0));
  // Inside a capture (a graphed step) the bracket is two timing points of the capture, which each
  // replay records into events of its own (add_busy_bracket); events recorded here would be
  // recorded once, at capture, and never again.
  const bool captured = busy_tag_ >= 0 && backend_.capturing();
  size_t captured_start = 0;
  cudaEvent_t busy_start = nullptr;
  if (captured) {
    captured_start = backend_.capture_timing_point(comm_stream_);
  } else if (busy_tag_ >= 0) {
    busy_start = busy_events_.next();
    CUDA_CHECK(cudaEventRecord(busy_start, comm_stream_));
  }
  ncclResult_t status = ncclSuccess;
  std::string call_error;
  {
    std::lock_guard lock(mutex_);
    require_live(last_op_);
    status = call();
    if (status != ncclSuccess && status != ncclInProgress) call_error = nccl_error_text(status, comm_);
  }
  settle(status, call_error, last_op_);
  ctx_->reclaim();
  if (captured) {
    captured_brackets_.emplace_back(captured_start, backend_.capture_timing_point(comm_stream_));
  } else if (busy_start) {
    cudaEvent_t busy_end = busy_events_.next();
    CUDA_CHECK(cudaEventRecord(busy_end, comm_stream_));
    busy_brackets_.push_back({busy_tag_, busy_start, busy_end, nullptr, nullptr});
  }
}

void NcclCommunicator::add_busy_bracket(std::int64_t tag, std::shared_ptr<TimingEvent> start,
                                        std::shared_ptr<TimingEvent> end) {
  CNNSCALE_CHECK(start && end, "nccl: a busy bracket without its events");
  // take_busy_ms(up_to) takes a prefix: tags must arrive in order, or events would stay held.
  CNNSCALE_CHECK(busy_brackets_.empty() || busy_brackets_.back().tag <= tag, "nccl: busy bracket of tag {} after {}",
                 tag, busy_brackets_.back().tag);
  const cudaEvent_t a = cuda::as_cuda_event(*start).event, b = cuda::as_cuda_event(*end).event;
  busy_brackets_.push_back({tag, a, b, std::move(start), std::move(end)});
}

void NcclCommunicator::wait() {
  wait_collectives();
  // Inside a capture this also joins the lane back into the captured stream, as it must be.
  if (std::exchange(lane_pending_, false)) {
    CUDA_CHECK(cudaEventRecord(lane_done_, lane_stream_));
    CUDA_CHECK(cudaStreamWaitEvent(backend_.stream(), lane_done_, 0));
  }
}

void NcclCommunicator::wait_collectives() {
  require_live("wait");
  activate();
  // cudaStreamWaitEvent captures the event's state now, so re-recording comm_done_ later is safe.
  CUDA_CHECK(cudaEventRecord(comm_done_, comm_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(backend_.stream(), comm_done_, 0));
}

void NcclCommunicator::after_collectives(const std::function<void()>& work) {
  require_live("after_collectives");
  activate();
  // Inside a capture the waits make the lane part of it (forked from the communication stream).
  // Behind the compute stream too: gradients no collective carried (gathered ones) were formed there.
  CUDA_CHECK(cudaEventRecord(lane_ready_, comm_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(lane_stream_, lane_ready_, 0));
  CUDA_CHECK(cudaEventRecord(lane_compute_, backend_.stream()));
  CUDA_CHECK(cudaStreamWaitEvent(lane_stream_, lane_compute_, 0));
  lane_pending_ = true;
  CudaBackend::LaneScope lane(backend_, lane_stream_);
  work();
}

void NcclCommunicator::synchronize_host() {
  require_live("synchronize_host");
  activate();
  CUDA_CHECK(cudaEventRecord(comm_done_, comm_stream_));
  poll_event(comm_done_, last_op_);
  CUDA_CHECK(cudaEventRecord(lane_done_, lane_stream_));
  poll_event(lane_done_, last_op_);
}

int NcclCommunicator::record_timestamp() {
  require_live("record_timestamp");
  activate();
  cudaEvent_t e = timestamps_.next();
  CUDA_CHECK(cudaEventRecord(e, comm_stream_));
  return timestamps_.used - 1;
}

double NcclCommunicator::elapsed_ms(int from, int to) {
  require_live("elapsed_ms");
  CNNSCALE_CHECK(from >= 0 && to >= 0 && from < timestamps_.used && to < timestamps_.used,
                 "timestamps {} and {} of {} recorded", from, to, timestamps_.used);
  activate();
  poll_event(timestamps_.events[from], last_op_);
  poll_event(timestamps_.events[to], last_op_);
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, timestamps_.events[from], timestamps_.events[to]));
  return ms;
}

void NcclCommunicator::clear_timestamps() {
  timestamps_.used = 0;
  busy_events_.used = 0;
  busy_brackets_.clear();
}

std::vector<std::pair<std::int64_t, double>> NcclCommunicator::take_busy_ms(std::int64_t up_to) {
  require_live("take_busy_ms");
  activate();
  std::vector<std::pair<std::int64_t, double>> per_tag;
  // Brackets arrive in issue order, tags never decreasing, so one tag's brackets are contiguous and
  // those of tags <= up_to come first.
  size_t taken = 0;
  for (; taken < busy_brackets_.size() && busy_brackets_[taken].tag <= up_to; ++taken) {
    const BusyBracket& b = busy_brackets_[taken];
    poll_event(b.end, last_op_);
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, b.start, b.end));
    if (per_tag.empty() || per_tag.back().first != b.tag) per_tag.emplace_back(b.tag, 0.0);
    per_tag.back().second += ms;
  }
  busy_brackets_.erase(busy_brackets_.begin(), busy_brackets_.begin() + static_cast<std::ptrdiff_t>(taken));
  // Pool events are handed out in order and reused only once no bracket refers to any of them.
  if (busy_brackets_.empty()) busy_events_.used = 0;
  return per_tag;
}

}  // namespace cnnscale
