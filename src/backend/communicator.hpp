// Communicator: how ranks of one data-parallel job exchange gradients. Two implementations:
// MPI (CPU tensors; src/parallel/mpi_communicator.*) and NCCL (device tensors, bootstrapped over MPI;
// src/backend/cuda/nccl_communicator.*, built only with CUDA). The interface lives in the backend
// layer so that both implementations, one above the backend and one inside it, can see it.
//
// Ordering contract, the same for both: an *_async call acts on the tensor as it will be after all
// work already queued on the backend's compute stream (on CPU: immediately); wait() makes the
// compute stream (not the host) wait for every outstanding operation, so the solver update queued
// after it sees reduced gradients. The host blocks only in synchronize_host().
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "core/tensor.hpp"

namespace cnnscale {

enum class AllreduceAlgo { Ring, Tree, Auto };

// NCCL's CTA policy (ncclConfig_t.CTAPolicy, NCCL >= 2.27): Default leaves it to NCCL; Efficiency
// asks for the fewest CTAs that still reach decent bandwidth; Zero for collectives that occupy no
// CTAs where NCCL has such a path for them.
enum class CtaPolicy { Default, Efficiency, Zero };
// "default", "efficiency", "zero": the names of --allreduce-cta-policy, logs and results.
inline std::string to_string(CtaPolicy policy) {
  switch (policy) {
    case CtaPolicy::Default:
      return "default";
    case CtaPolicy::Efficiency:
      return "efficiency";
    case CtaPolicy::Zero:
      return "zero";
  }
  return "?";
}

// How a device communicator's exchange shares the GPU with the compute it overlaps (GPU ranks; MPI
// has none of these). Each default is what NCCL, and cnnscale before these existed, would do.
struct NcclTuning {
  int max_ctas = 0;  // > 0: the most CTAs a collective runs on (NCCL_MAX_CTAS); 0: NCCL's choice
  CtaPolicy cta_policy = CtaPolicy::Default;
  // The communication stream at the least priority instead of the greatest: the block scheduler then
  // starts backward's pending blocks before the collective's.
  bool low_priority = false;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;  // "mpi", "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In-place sum across ranks of `t` (f32, bf16 or f16), in stream order after the queued compute
  // work. A 16-bit sum rounds to its format after each addition, as NCCL's does.
  virtual void allreduce_sum_async(const Tensor& t) = 0;
  // `all` (ranks x mine.numel(), mine's dtype) receives every rank's `mine`, rank r's at r x
  // mine.numel(): a copy, bit for bit, in stream order after the queued compute work, like
  // allreduce_sum_async (wait() before reading `all` on the compute stream).
  virtual void allgather_async(const Tensor& mine, const Tensor& all) = 0;
  // Compute stream waits for every outstanding async operation (no host block on GPU), and for
  // the work handed to after_collectives().
  virtual void wait() = 0;
  // The compute stream waits for the collectives issued so far only, not for after_collectives()
  // work: a layer reading what it gathered in the middle of backward (by default wait()).
  virtual void wait_collectives() { wait(); }
  // Queues `work` (backend calls on tensors the collectives issued so far have summed: a bucket's
  // widening and its solver update) in order after those collectives and the compute work queued
  // so far, without holding up what the compute stream runs meanwhile: a device communicator
  // queues it on a side stream of its own, which wait() joins. `work` may only queue what such a
  // side stream may run (see the implementations); it must not issue collectives. This default
  // waits for the collectives and runs `work` at once, in compute-stream order, as any
  // communicator may.
  virtual void after_collectives(const std::function<void()>& work) {
    wait();
    work();
  }
  // Host blocks until every outstanding operation is complete; throws PeerError-kind errors when
  // a collective failed (NCCL async error) and honours the watchdog.
  virtual void synchronize_host() = 0;
  // Blocking in-place sum (used outside the step: metrics, sync batch norm statistics, tests).
  virtual void allreduce_sum(const Tensor& t) {
    allreduce_sum_async(t);
    wait();
  }
  // Abort outstanding collectives so that no rank is left hanging (fault path).
  virtual void abort() = 0;
};

// A communicator whose collectives run on a device stream of their own (NCCL), plus timestamps on
// that stream for `bench allreduce` and the comm_busy phase. Timestamps never block the host;
// reading them does (bounded, see below).
class DeviceCommunicator : public Communicator {
 public:
  // Enqueues a timestamp on the communication stream behind the work queued there so far and
  // returns its id (valid until clear_timestamps()).
  virtual int record_timestamp() = 0;
  // Milliseconds between two timestamps. Waits for the later one like synchronize_host() does
  // (polling, deadline, PeerError), so call it after the work is done to avoid a host stall.
  virtual double elapsed_ms(int from, int to) = 0;
  // Forgets every timestamp (and the busy-timing brackets) so that the event pool is reused.
  virtual void clear_timestamps() = 0;
  // With a tag >= 0 (the training iteration), each allreduce is bracketed by two timestamps and
  // attributed to that tag; a negative tag turns bracketing off. take_busy_ms() returns, per tag in
  // the order first seen, the milliseconds the communication stream spent in collectives since the
  // last call, and forgets them. Call it after a synchronisation (it waits for the brackets).
  virtual void set_busy_tag(std::int64_t tag) = 0;
  // With `up_to`: the tags <= up_to only, whose brackets the caller knows are complete (a step's
  // collectives end before its update, so before its last timing point); never waits for others.
  virtual std::vector<std::pair<std::int64_t, double>> take_busy_ms(std::int64_t up_to) = 0;
  std::vector<std::pair<std::int64_t, double>> take_busy_ms() {
    return take_busy_ms(std::numeric_limits<std::int64_t>::max());
  }

  // Captured steps (Backend::capture with CaptureOptions::Points::Nodes): while the backend
  // captures, an allreduce's busy bracket is two timing points of the capture instead of two
  // events. captured_brackets() lists their point indices, in issue order, since
  // begin_captured_brackets(); each replay hands its own events of those points to
  // add_busy_bracket, which attributes them to `tag` as if the bracket had been recorded then.
  virtual void begin_captured_brackets() = 0;
  virtual std::vector<std::pair<size_t, size_t>> captured_brackets() const = 0;
  virtual void add_busy_bracket(std::int64_t tag, std::shared_ptr<TimingEvent> start,
                                std::shared_ptr<TimingEvent> end) = 0;
};

}  // namespace cnnscale
