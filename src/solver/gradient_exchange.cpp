// GradientExchange: the gradient buckets as the step's callback, and the update per bucket.
#include "solver/gradient_exchange.hpp"

#include <vector>

namespace cnnscale {

GradientExchange::GradientExchange(const Net& net, Communicator& comm, const GradientPlan& plan, bool host_timed)
    : buckets_(net, comm, plan), host_timed_(host_timed) {
  after_layer_ = [this](size_t layer) { timed([&] { buckets_.layer_done(layer); }); };
}

// The update bucket by bucket, each part checking the gradients it reads, as a single process's
// update does (GradientPlan::update_per_bucket says where it can).
void GradientExchange::update_per_bucket(SgdSolver& solver, const GradCheck& check) {
  std::vector<int64_t> ends;
  for (const GradientBucket& b : buckets_.buckets()) ends.push_back(b.end);
  solver.plan_parts(ends);
  buckets_.set_on_reduced([&solver, check](size_t bucket) { solver.apply_part(bucket, check); });
}

void GradientExchange::on_backward_begin() {
  timed([&] { buckets_.begin_backward(); });
}

// Issues whatever is not issued yet (everything, without overlap).
void GradientExchange::on_backward_end() {
  timed([&] { buckets_.end_backward(); });
}

// After wait() the compute stream may go on with the update: it sees the job's gradients.
void GradientExchange::on_gradients_ready() {
  timed([&] { buckets_.wait(); });
}

}  // namespace cnnscale
