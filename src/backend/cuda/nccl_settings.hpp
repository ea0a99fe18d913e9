// The NCCL settings a communicator is made with that NCCL reads from its environment (the
// allreduce algorithm, the most CTAs) and the CTA policy its config can take (nccl_settings.cpp).
#pragma once

#include "backend/communicator.hpp"

namespace cnnscale::cuda {

// NCCL_ALGO for `algo` (unset for Auto), unless the user exported their own.
void apply_algo(AllreduceAlgo algo);
// NCCL_MAX_CTAS for `max_ctas` (unset for 0); the cap to put in the communicator's config as well.
int apply_max_ctas(int max_ctas);
// Throws where this NCCL cannot take a non-default `policy`.
void check_cta_policy_supported(CtaPolicy policy);

}  // namespace cnnscale::cuda
