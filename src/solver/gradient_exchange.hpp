// GradientExchange: the data-parallel gradient exchange attached to the training step as a
// StepCallback. It sums the net's gradients across ranks in buckets as backward produces them
// (parallel/gradient_buckets.hpp), as the gradient plan says, and where the plan updates per bucket
// it queues each bucket's part of the update (SgdSolver::apply_part) as that bucket's sum ends.
// It also keeps the host time spent in its calls, which is the communication's busy time where the
// communicator does not time its own stream (MPI).
#pragma once
#include <chrono>
#include <functional>

#include "backend/backend.hpp"
#include "backend/communicator.hpp"
#include "net/net.hpp"
#include "parallel/gradient_buckets.hpp"
#include "solver/sgd_solver.hpp"
#include "solver/step_callback.hpp"

namespace cnnscale {

class GradientExchange final : public StepCallback {
 public:
  // `plan`: the net's gradient plan (with an exchange). `host_timed`: keep the host time of every
  // call (take_host_seconds).
  GradientExchange(const Net& net, Communicator& comm, const GradientPlan& plan, bool host_timed);
  // The plan's update_per_bucket: each bucket's part of `solver`'s update is queued as its sum
  // ends, checking the gradients it reads with `check`.
  void update_per_bucket(SgdSolver& solver, const GradCheck& check);

  void on_backward_begin() override;
  const std::function<void(size_t layer)>& after_layer() const override { return after_layer_; }
  void on_backward_end() override;
  void on_gradients_ready() override;
  bool queues_update() const override { return buckets_.per_bucket_work(); }

  const GradientBuckets& buckets() const { return buckets_; }
  // The host seconds spent in this exchange's calls since the last take (0 unless host_timed).
  double take_host_seconds() { return std::exchange(host_seconds_, 0.0); }

 private:
  template <class Call>
  void timed(Call&& call) {
    if (!host_timed_) return call();
    const auto t0 = std::chrono::steady_clock::now();
    call();
    host_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  GradientBuckets buckets_;
  bool host_timed_;
  double host_seconds_ = 0;
  std::function<void(size_t)> after_layer_;
};

}  // namespace cnnscale
