// The gradient plan's decisions, each with its reason.
#include "solver/gradient_planning.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "solver/sgd_solver.hpp"

namespace cnnscale {

GradientPlan plan_gradients(const GradientRequest& r, const Backend& backend) {
  const DataParallel& dp = r.parallel;
  GradientPlan plan;
  plan.loss_scaling = needs_loss_scaling(r.precision);
  plan.exchange = dp.comm != nullptr;
  if (!plan.exchange) return plan;
  plan.overlap = dp.overlap;
  plan.bucket_bytes = dp.bucket_bytes;
  plan.exchange_dtype = dp.exchange_dtype;
  // The compute gradients summed in place: bf16 (fp16's loss scaling checks and unscales f32
  // gradients), on a backend whose update reads them (Backend::sgd_reads_mirror_grads).
  const DType compute = compute_dtype(r.precision);
  plan.sum_compute_grads = dp.exchange_compute_grads && compute == DType::BF16 && dp.exchange_dtype == compute &&
                           !plan.loss_scaling && backend.sgd_reads_mirror_grads();
  // Gathering rows pays only between ranks; every rank gathers as many rows as the largest share.
  plan.gather_gradients = dp.gather_gradients && dp.size() > 1;
  if (plan.gather_gradients) plan.gather_rows = *std::max_element(dp.rank_batches.begin(), dp.rank_batches.end());
  return plan;
}

void plan_update(GradientPlan& plan, const GradientRequest& r, const Net& net) {
  const SgdSolver::Abilities can = SgdSolver::abilities(net);
  // A gradient exchange of the f32 gradients reads them after backward, loss scaling checks them
  // before the update: otherwise (a single process, or an exchange of the compute gradients in
  // place) the update is the first reader after backward and the exchange, and its one pass can
  // check them and read the mirrored ones where backward wrote them (a bf16 CaffeNet step saves a
  // read and write of 61 M gradients in f32 and a read of them for the check; with the exchange, a
  // rounding and a widening of them as well).
  plan.update_checks_gradients = (!plan.exchange || plan.sum_compute_grads) && !plan.loss_scaling;
  if (plan.sum_compute_grads) {
    CNNSCALE_CHECK(can.reads_mirror_grads, "the exchange sums compute gradients the update cannot read");
    plan.update_reads_mirror_grads = true;
  } else {
    plan.update_reads_mirror_grads = plan.update_checks_gradients && can.reads_mirror_grads;
  }
  // The update bucket by bucket, each part checking the gradients it reads, as a single process's
  // update does. Not with fp16 (its skip is decided from every gradient), an update of one launch
  // per parameter, a net without gradients (no bucket), or fault injection (which poisons the
  // gradients after the exchange).
  const bool has_gradients = net.flat_grads().defined() && net.flat_grads().numel() > 0;
  plan.update_per_bucket = plan.exchange && r.parallel.update_per_bucket && !plan.loss_scaling && can.one_launch &&
                           has_gradients && !r.fault_injection;
  plan.check();
}

}  // namespace cnnscale
