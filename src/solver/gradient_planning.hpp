// The one place a training run's GradientPlan (net/gradient_plan.hpp) is decided: from the job's
// ranks and their exchange settings, the precision, and what the backend and the update can do.
// The Trainer asks once, at its start, and hands the plan to the net (which the exchange and the
// update read it from); nothing changes it afterwards.
#pragma once
#include "backend/backend.hpp"
#include "core/precision.hpp"
#include "net/gradient_plan.hpp"
#include "net/net.hpp"
#include "parallel/data_parallel.hpp"

namespace cnnscale {

struct GradientRequest {
  const DataParallel& parallel;  // the job's ranks (comm null: a single process) and exchange settings
  Precision precision = Precision::FP32;
  bool fault_injection = false;  // TrainFaults: a step's gradients are poisoned after the exchange
};

// In two steps, since the net is built between them with what the first decides. First the
// exchange and the net's layout (sum_compute_grads: its compute copies at the masters' offsets)...
GradientPlan plan_gradients(const GradientRequest& request, const Backend& backend);
// ...then, from the net built so (SgdSolver::abilities), how the update reads the gradients. The
// plan is whole and checked (GradientPlan::check) after this.
void plan_update(GradientPlan& plan, const GradientRequest& request, const Net& net);

}  // namespace cnnscale
