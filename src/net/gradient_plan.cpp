// GradientPlan::check: which combinations of the gradient buffers' uses are legal, and why.
#include "net/gradient_plan.hpp"

#include "core/error.hpp"

namespace cnnscale {

void GradientPlan::check() const {
  // Without an exchange nothing is summed, gathered or handed over a bucket at a time.
  CNNSCALE_CHECK(exchange || (!sum_compute_grads && !gather_gradients && !update_per_bucket),
                 "gradient plan: summing in place, gathering or an update per bucket without an exchange");
  CNNSCALE_CHECK(exchange_dtype == DType::F32 || exchange_dtype == DType::BF16 || exchange_dtype == DType::F16,
                 "gradient plan: exchange in {}: only f32, bf16 and f16", dtype_name(exchange_dtype));
  // Summed in place, the compute gradients are what the update reads: bf16 ones (fp16's loss
  // scaling checks and unscales f32 gradients first), of the exchange's own dtype.
  CNNSCALE_CHECK(!sum_compute_grads || (exchange_dtype == DType::BF16 && !loss_scaling && update_reads_mirror_grads),
                 "gradient plan: the compute gradients summed in place need a bf16 exchange, no loss scaling and the "
                 "update reading them");
  CNNSCALE_CHECK(!gather_gradients || gather_rows >= 1, "gradient plan: gathering {} rows", gather_rows);
  // Loss scaling decides a step's skip from every (unscaled) f32 gradient, before any update.
  CNNSCALE_CHECK(!loss_scaling || (!update_per_bucket && !update_checks_gradients && !update_reads_mirror_grads),
                 "gradient plan: loss scaling with an update that reads, checks or applies gradients before the skip "
                 "is decided");
  // An exchange of the f32 gradients reads them after backward: the update is not their first
  // reader then, and the mirrored gradients must be widened for the exchange.
  CNNSCALE_CHECK(!exchange || sum_compute_grads || (!update_checks_gradients && !update_reads_mirror_grads),
                 "gradient plan: an exchange of the f32 gradients with an update that reads them first");
}

}  // namespace cnnscale
