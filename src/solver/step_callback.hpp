// StepCallback: what attaches to the training step without the step knowing what it is, as Caffe's
// Solver::Callback lets NCCL attach to its solver. The data-parallel gradient exchange is one
// (solver/gradient_exchange.hpp); a single process has none. The step reads
//   feed -> forward -> backward -> update
// and calls, in an exchanged step: on_backward_begin, after_layer() as each layer's gradients are
// final, on_backward_end, then on_gradients_ready before the update. Every call only queues work
// (no host synchronisation), so a step with a callback is captured as a CUDA graph like one
// without. The calls are per step, and the per-layer hook is made once: a step costs no virtual
// call per layer.
#pragma once
#include <cstddef>
#include <functional>

namespace cnnscale {

class StepCallback {
 public:
  virtual ~StepCallback() = default;
  virtual void on_backward_begin() = 0;
  // Net::backward's hook in a BackwardPass::Exchanged pass: layer l has queued its gradients.
  virtual const std::function<void(size_t layer)>& after_layer() const = 0;
  virtual void on_backward_end() = 0;
  // The update queued after this sees the job's gradients.
  virtual void on_gradients_ready() = 0;
  // Whether the callback queues the update itself, part by part as the gradients become ready
  // (SgdSolver::apply_part); the step then only closes it (SgdSolver::parts_applied).
  virtual bool queues_update() const = 0;
};

}  // namespace cnnscale
