// GradientBuckets implementation: the plan is computed once from the parameter views' offsets in
// the flat buffer; each step then costs one comparison per finished layer.
#include "parallel/gradient_buckets.hpp"

#include <algorithm>
#include <climits>

#include "core/error.hpp"

namespace cnnscale {

namespace {
constexpr int64_t kAlignment = 64;  // elements; net.cpp aligns every parameter to this
}

std::vector<GradientBucket> GradientBuckets::plan(const std::vector<std::pair<int64_t, int64_t>>& param_ranges,
                                                  int64_t total, int64_t bucket_elements) {
  const int64_t cap = std::max<int64_t>(kAlignment, bucket_elements / kAlignment * kAlignment);
  std::vector<int64_t> cuts;  // bucket starts after the first
  int64_t begin = 0;
  for (const auto& [start, end] : param_ranges) {
    if (end - begin > cap && start > begin) {
      cuts.push_back(start);
      begin = start;
    }
    while (end - begin > cap) {
      begin += cap;
      cuts.push_back(begin);
    }
  }
  std::vector<GradientBucket> out;
  int64_t from = 0;
  for (int64_t c : cuts) {
    out.push_back({from, c});
    from = c;
  }
  if (total > from) out.push_back({from, total});
  return out;
}

std::vector<GradientBucket> GradientBuckets::plan(const std::vector<std::pair<int64_t, int64_t>>& param_ranges,
                                                  const std::vector<bool>& local, int64_t total,
                                                  int64_t bucket_elements) {
  CNNSCALE_CHECK(local.size() == param_ranges.size(), "{} local flags for {} parameters", local.size(),
                 param_ranges.size());
  std::vector<GradientBucket> out;
  size_t i = 0;
  while (i < param_ranges.size()) {
    size_t j = i;
    while (j < param_ranges.size() && local[j] == local[i]) ++j;
    // This run spans from its first parameter's start (0 for the first run, so the buckets cover
    // the buffer) to the next run's first start (the buffer's end for the last).
    const int64_t begin = out.empty() ? 0 : param_ranges[i].first;
    const int64_t end = j < param_ranges.size() ? param_ranges[j].first : total;
    if (local[i]) {
      out.push_back({begin, end, true});
    } else {
      std::vector<std::pair<int64_t, int64_t>> run;
      for (size_t k = i; k < j; ++k) run.emplace_back(param_ranges[k].first - begin, param_ranges[k].second - begin);
      for (GradientBucket b : plan(run, end - begin, bucket_elements)) out.push_back({b.begin + begin, b.end + begin});
    }
    i = j;
  }
  if (out.empty() && total > 0) out.push_back({0, total});
  return out;
}

GradientBuckets::GradientBuckets(const Net& net, Communicator& comm, const GradientPlan& plan)
    : net_(net), comm_(comm), flat_grads_(net.flat_grads()), in_place_(plan.sum_compute_grads), overlap_(plan.overlap) {
  plan.check();
  CNNSCALE_CHECK(plan.exchange, "gradient buckets for a plan without an exchange");
  const int64_t bucket_bytes = plan.bucket_bytes;
  const DType exchange = plan.exchange_dtype;
  if (bucket_bytes < 1) throw_config("--bucket-mb must be > 0");
  CNNSCALE_CHECK(exchange == DType::F32 || exchange == DType::BF16 || exchange == DType::F16,
                 "gradient exchange in {}: only f32, bf16 and f16", dtype_name(exchange));
  if (in_place_) {
    CNNSCALE_CHECK(net.copies_at_master_offsets() && exchange == net.compute_dtype() && exchange != DType::F32 &&
                       net.flat_mirror_grads().numel() == flat_grads_.numel(),
                   "gradient exchange of the compute gradients: the net must keep {} copies at its masters' offsets",
                   dtype_name(exchange));
    exchange_ = net.flat_mirror_grads();
  } else if (exchange != DType::F32 && flat_grads_.defined()) {
    exchange_ = net.backend().alloc(flat_grads_.shape(), exchange);
  }
  const std::vector<Layer*> layers = net.layers();
  const auto element = static_cast<int64_t>(dtype_size(flat_grads_.defined() ? flat_grads_.dtype() : DType::F32));
  const int64_t base = flat_grads_.defined() ? static_cast<int64_t>(flat_grads_.offset_bytes()) / element : 0;
  const int64_t total = flat_grads_.defined() ? flat_grads_.numel() : 0;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // every parameter's [begin, end), flat order
  std::vector<bool> local;                          // whether its layer gathers (Net::layer_gathers)
  std::vector<std::pair<int64_t, int64_t>> unmirrored;  // the unmirrored ones', flat order
  std::vector<int64_t> first_begin(layers.size(), -1);
  int64_t prefix = 0;
  for (size_t l = layers.size(); l-- > 0;) {
    for (const Param& p : layers[l]->params()) {
      CNNSCALE_CHECK(p.master_diff.storage() == flat_grads_.storage(), "gradient of {}/{} is not in the flat buffer",
                     layers[l]->name(), p.spec.name);
      const int64_t begin = static_cast<int64_t>(p.master_diff.offset_bytes()) / element - base;
      const int64_t end = begin + p.master_diff.numel();
      // The bucket hook relies on net.cpp's layout: later layers first, so the gradients final
      // after layers l..L-1 are exactly a prefix of the buffer.
      CNNSCALE_CHECK(begin >= prefix && end <= total, "gradient of {}/{} at [{}, {}) breaks the backward-order layout",
                     layers[l]->name(), p.spec.name, begin, end);
      ranges.emplace_back(begin, end);
      local.push_back(net.layer_gathers(l));
      if (!p.spec.mirrored()) unmirrored.emplace_back(begin, end);
      if (first_begin[l] < 0) first_begin[l] = begin;
      prefix = end;
    }
  }
  // After layers l..L-1, everything before the first gradient of an earlier layer is final,
  // alignment gaps included (they stay zero).
  ready_end_.assign(layers.size(), total);
  int64_t next_start = total;
  for (size_t l = 0; l < layers.size(); ++l) {
    ready_end_[l] = next_start;
    if (first_begin[l] >= 0) next_start = first_begin[l];
  }
  buckets_ = GradientBuckets::plan(ranges, local, total, bucket_bytes / element);
  any_local_ = std::any_of(buckets_.begin(), buckets_.end(), [](const GradientBucket& b) { return b.local; });
  if (in_place_ && !unmirrored.empty()) plan_unmirrored(unmirrored);
}

std::vector<std::vector<int32_t>> GradientBuckets::plan_rounding(
    const std::vector<GradientBucket>& buckets, const std::vector<std::pair<int64_t, int64_t>>& unmirrored) {
  std::vector<std::vector<int32_t>> tables(buckets.size());
  size_t next = 0;  // first range not wholly in an earlier bucket
  for (size_t k = 0; k < buckets.size(); ++k) {
    const GradientBucket& b = buckets[k];
    // A parameter larger than a bucket is cut into pieces: each bucket rounds its own piece.
    for (size_t i = next; i < unmirrored.size() && unmirrored[i].first < b.end; ++i) {
      const int64_t begin = std::max(unmirrored[i].first, b.begin), end = std::min(unmirrored[i].second, b.end);
      if (end > begin) {
        CNNSCALE_CHECK(end - b.begin <= INT32_MAX, "gradient bucket of {} elements: over i32", b.end - b.begin);
        tables[k].insert(tables[k].end(), {static_cast<int32_t>(begin - b.begin), static_cast<int32_t>(end - b.begin)});
      }
      if (unmirrored[i].second <= b.end) next = i + 1;
    }
  }
  return tables;
}

void GradientBuckets::plan_unmirrored(const std::vector<std::pair<int64_t, int64_t>>& unmirrored) {
  Backend& backend = net_.backend();
  const std::vector<std::vector<int32_t>> tables = plan_rounding(buckets_, unmirrored);
  unmirrored_.resize(buckets_.size());
  for (size_t k = 0; k < buckets_.size(); ++k) {
    if (tables[k].empty()) continue;
    unmirrored_[k] = backend.alloc(Shape{static_cast<int64_t>(tables[k].size())}, DType::I32);
    backend.upload(tables[k].data(), unmirrored_[k]);
  }
  backend.synchronize();  // the uploads may read `tables` until the stream passes them
}

void GradientBuckets::round_unmirrored(size_t k) const {
  if (unmirrored_.empty() || !unmirrored_[k].defined()) return;
  const GradientBucket& b = buckets_[k];
  const Shape n{b.end - b.begin};
  net_.backend().convert_segments(flat_grads_.view(b.begin, n), exchange_.view(b.begin, n), unmirrored_[k]);
}

void GradientBuckets::issue(int64_t begin, int64_t end) {
  const Shape n{end - begin};
  if (!exchange_.defined()) return comm_.allreduce_sum_async(flat_grads_.view(begin, n));
  // In place: backward wrote the mirrored gradients there, round_unmirrored the others just before.
  if (in_place_) return comm_.allreduce_sum_async(exchange_.view(begin, n));
  // Rounded on the compute stream behind the backward that produced the bucket; the allreduce is
  // ordered after it by the communicator's contract.
  net_.apply_grad_scale(flat_grads_.view(begin, n), exchange_.view(begin, n), /*inverse=*/false);
  comm_.allreduce_sum_async(exchange_.view(begin, n));
}

void GradientBuckets::after_reduced(size_t first, size_t last) {
  if (!on_reduced_) return;
  comm_.after_collectives([this, first, last] {
    for (size_t k = first; k <= last; ++k) {
      widen(buckets_[k]);
      on_reduced_(k);
    }
  });
}

void GradientBuckets::widen(const GradientBucket& b) const {
  // A local bucket's gradients were never rounded into exchange_; in place, the sums are where the
  // update reads them (the unmirrored ones rounded there before the exchange), nothing to widen.
  if (!exchange_.defined() || in_place_ || b.local) return;
  const Shape n{b.end - b.begin};
  net_.apply_grad_scale(exchange_.view(b.begin, n), flat_grads_.view(b.begin, n), /*inverse=*/true);
}

void GradientBuckets::issue_until(int64_t ready_end) {
  while (next_ < buckets_.size() && buckets_[next_].end <= ready_end) {
    round_unmirrored(next_);
    const GradientBucket& b = buckets_[next_++];
    if (!b.local) issue(b.begin, b.end);
    after_reduced(next_ - 1, next_ - 1);
  }
}

void GradientBuckets::layer_done(size_t layer_index) {
  if (overlap_) issue_until(ready_end_.at(layer_index));
}

void GradientBuckets::end_backward() {
  if (!flat_grads_.defined()) return;
  if (overlap_) {
    issue_until(flat_grads_.numel());
  } else if (next_ == 0 && !buckets_.empty()) {
    for (size_t k = 0; k < buckets_.size(); ++k) round_unmirrored(k);
    // One allreduce of the whole buffer, or, where some gradients were gathered, of each run of
    // the others (the gathered ones are the job's already: summing them would multiply them).
    if (!any_local_) {
      issue(0, flat_grads_.numel());
    } else {
      for (const GradientBucket& b : buckets_)
        if (!b.local) issue(b.begin, b.end);
    }
    next_ = buckets_.size();
    after_reduced(0, buckets_.size() - 1);
  }
}

void GradientBuckets::wait() {
  comm_.wait();
  // Every bucket is issued by end_backward(), and together they cover the buffer (alignment gaps
  // included, zero on every rank): one conversion brings all the sums back.
  if (!exchange_.defined() || in_place_ || buckets_.empty() || on_reduced_) return;
  // The widening below reads every bucket's sum: one not yet issued would come back un-summed.
  CNNSCALE_CHECK(next_ == buckets_.size(), "gradient exchange: wait() after {} of {} buckets were issued", next_,
                 buckets_.size());
  if (!any_local_) return net_.apply_grad_scale(exchange_, flat_grads_, /*inverse=*/true);  // one pass over it all
  for (const GradientBucket& b : buckets_) widen(b);
}

}  // namespace cnnscale
