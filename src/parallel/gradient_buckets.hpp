// GradientBuckets: the net's flat gradient buffer cut into contiguous buckets of at most
// `bucket_bytes`, in flat order, which is backward's production order (net.hpp: parameters are
// laid out last layer first). Net::backward reports each finished layer; as soon as every gradient
// of a bucket is final, the bucket's allreduce is issued, overlapping the rest of backward. Without
// overlap one allreduce of the whole buffer is issued after backward (the study's comparison).
// With a 16-bit exchange dtype each bucket is rounded into a buffer of that dtype just before its
// allreduce, and wait() widens the whole buffer back into the f32 gradients once every sum is in;
// or, where the net's compute gradients are in that dtype at the masters' offsets, they are summed
// in place and neither happens (only the unmirrored f32 gradients of a bucket are rounded into their
// slots, in one op, just before it is summed, or, for a local bucket, handed to the update). The parameters of layers
// that gathered every rank's rows (Net::layer_gathers) hold the job's gradients already: they form local buckets, never
// sent.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "backend/communicator.hpp"
#include "net/net.hpp"

namespace cnnscale {

struct GradientBucket {
  int64_t begin = 0, end = 0;  // elements of the flat gradient buffer, [begin, end)
  // The gradients of layers that gathered every rank's rows (Net::layer_gathers): already the
  // job's, so nothing is sent; the bucket only marks when they are final (for the update per bucket).
  bool local = false;
};

class GradientBuckets {
 public:
  // As `plan` says (the net's own, Net::gradient_plan, in a training step; its exchange fields,
  // which must be on): buckets of at most
  // bucket_bytes, overlapped with backward or not, summed in exchange_dtype: F32, or BF16/F16 (the
  // sums are formed in that format). A 16-bit exchange of a net with loss scaling (fp16) carries
  // the gradients times the net's gradient scale (on the host or on the device), the values
  // backward formed, so that small ones keep fp16's normal range on the wire as they did in
  // backward. sum_compute_grads: the net's compute gradients are summed in place instead (the net
  // built with copies_at_master_offsets, the update reading them there): nothing is rounded before
  // the exchange or widened after it.
  GradientBuckets(const Net& net, Communicator& comm, const GradientPlan& plan);

  // Cuts [0, total) at parameter starts so no bucket exceeds `bucket_elements` (rounded down to
  // the 64-element parameter alignment); a parameter larger than that is split into pieces.
  // `param_ranges` are [begin, end) in flat order. The buckets cover [0, total) without gaps.
  static std::vector<GradientBucket> plan(const std::vector<std::pair<int64_t, int64_t>>& param_ranges, int64_t total,
                                          int64_t bucket_elements);
  // The same where `local[i]` marks parameters whose gradients are gathered: each run of them is one
  // local bucket of its own (cut at its first parameter's start and the next one's), the others are
  // planned as above between them.
  static std::vector<GradientBucket> plan(const std::vector<std::pair<int64_t, int64_t>>& param_ranges,
                                          const std::vector<bool>& local, int64_t total, int64_t bucket_elements);

  // Per bucket, the [begin, end) of `unmirrored` (parameters' ranges in flat order, disjoint) that lie
  // in it, relative to its start, as i32 pairs: what it rounds into its slots before it is summed
  // (rounds_unmirrored). A range over several buckets is cut at their bounds.
  static std::vector<std::vector<int32_t>> plan_rounding(const std::vector<GradientBucket>& buckets,
                                                         const std::vector<std::pair<int64_t, int64_t>>& unmirrored);

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  bool overlap() const { return overlap_; }

  // `on_reduced(k)` queues work on bucket k's sums (the solver's part of the update for it) through
  // comm.after_collectives(), behind the bucket's allreduce and, for a 16-bit exchange, the bucket's
  // widening into the f32 gradients, which wait() then no longer does. Null: nothing per bucket.
  void set_on_reduced(std::function<void(size_t bucket)> on_reduced) { on_reduced_ = std::move(on_reduced); }
  bool per_bucket_work() const { return static_cast<bool>(on_reduced_); }

  // Summing the compute gradients in place, the unmirrored ones (f32 in backward: batch norm's)
  // are rounded into their slots here, one op per bucket just before it is summed (or handed to the
  // update, for a local one), instead of one per parameter in backward (which the net leaves to
  // the exchange in its BackwardPass::Exchanged passes).
  bool rounds_unmirrored() const { return !unmirrored_.empty(); }

  void begin_backward() { next_ = 0; }
  // Net::backward's hook: layer `layer_index` (network order) has produced its gradients.
  void layer_done(size_t layer_index);
  // Issues whatever is not issued yet (everything, without overlap). The caller then calls
  // comm.wait() before the solver update.
  void end_backward();
  // comm.wait(), then (16-bit exchange) the sums widened into the f32 gradients, on the compute
  // stream: the solver update queued after it sees the job's gradients.
  void wait();
  DType exchange_dtype() const { return exchange_.defined() ? exchange_.dtype() : DType::F32; }

 private:
  void issue_until(int64_t ready_end);
  void issue(int64_t begin, int64_t end);
  // What follows the allreduce of buckets [first, last]: their widening and on_reduced_.
  void after_reduced(size_t first, size_t last);
  // A 16-bit exchange's sums of `b` widened into the f32 gradients (nothing for a local bucket).
  void widen(const GradientBucket& b) const;
  // rounds_unmirrored(): bucket k's unmirrored gradients rounded into their slots of exchange_.
  void round_unmirrored(size_t k) const;
  void plan_unmirrored(const std::vector<std::pair<int64_t, int64_t>>& unmirrored);

  const Net& net_;
  Communicator& comm_;
  Tensor flat_grads_;  // (P)
  Tensor exchange_;    // (P) in the 16-bit exchange dtype; undefined for an f32 exchange
  bool in_place_ = false;  // exchange_ is the net's compute gradients (see the constructor)
  bool any_local_ = false;  // some bucket is local: no exchange or widening of the whole buffer at once
  bool overlap_;
  std::vector<GradientBucket> buckets_;
  // ready_end_[l]: after layers l..L-1 ran backward, flat_grads_[0, ready_end_[l]) is final.
  std::vector<int64_t> ready_end_;
  size_t next_ = 0;  // first bucket not issued in this step
  std::function<void(size_t)> on_reduced_;
  // Per bucket, in place only: the unmirrored parameters' [begin, end) relative to the bucket's
  // start, i32 (2S) on the device (Backend::convert_segments); undefined where the bucket has none.
  // Empty where no bucket has any.
  std::vector<Tensor> unmirrored_;
};

}  // namespace cnnscale
