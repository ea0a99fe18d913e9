// What cuda::ConvEngine keeps for its convolution forms (the lowered, width-lowered and channels-first
// forms it times against cuDNN on the operands as given: cuda_conv.cpp, cuda_conv_lowered.cpp,
// cuda_conv_trials.hpp) between calls and during their timed trials: the lowered inputs a forward
// leaves for its filter gradient, the transient buffers of a trial in progress, and the notes and
// switch a trial leaves for the decisions after it. Data only: cuda::ConvEngine reads and writes
// it and owns one. Also the types the forms' calls take.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_conv_plan.hpp"
#include "core/tensor.hpp"

namespace cnnscale {

struct ConvFormState {
  // What the kept lowered-input staging slots hold, one record per form (KeptForm: slot 4 for the
  // lowered form, 8 for the width-lowered one): the lowered input that the last forward of `plan`
  // made there from the buffer at `x`, and the slot's writes so far (ConvPlan's stamps). The filter
  // gradient of that plan and x reads it instead of lowering x again (CaffeNet's conv1 at batch 256
  // lowers to 0.57 GB, the gait nets' conv1 width-lowered to 0.58 GB), as backprop keeps x unchanged
  // between a forward and its filter gradient (Backend::conv_backward_filter); so does the filter
  // gradient's timed trial, which then measures the form as training runs it. Any other write to
  // the slot, and any forward of the plan that does not lower, forgets it.
  enum KeptForm : size_t { kLoweredForm = 0, kWidthForm = 1 };
  struct KeptLowering {
    size_t slot;
    const ConvPlan* plan = nullptr;
    const void* x = nullptr;
    uint64_t writes = 0;
  };
  std::array<KeptLowering, 2> kept{KeptLowering{4}, KeptLowering{8}};
  int64_t input_lowerings = 0;  // im2col passes of either form: CudaBackend::input_lowerings()
  // While run_faster_form times the lowered form of lowered_search_plan: the transient buffer its
  // input is lowered into.
  Tensor lowered_search_input;
  const ConvPlan* lowered_search_plan = nullptr;
  // What the trial of a lowered or width-lowered form notes beside its answer. A forward's records its
  // times in `record`. A filter gradient's, where its forward's trial (`forward`) kept the other form,
  // also times `lower` (the input's lowering copy) alone and weighs the two directions together: the
  // forward as it runs with the faster filter gradient, against the forward switched to the form and
  // a filter gradient that reads its lowering instead of copying it (`kept`); `flip`
  // says the switch wins. Each direction decided alone would miss that: the gait ResNet's conv1
  // forward alone is faster padded to 56 channels than width-lowered, its filter gradient much
  // slower unless the forward's lowering is there to read.
  // `form_alone` says what the filter gradient's decision would be without the switch.
  struct TrialNotes {
    ConvPlan::FormTrial* record = nullptr;
    const ConvPlan::FormTrial* forward = nullptr;
    std::function<void()> lower;
    bool recorded = false, flip = false, form_alone = false;
  };
  TrialNotes* trial_notes = nullptr;  // taken by the next ConvEngine::second_measures_faster
  // A forward that a filter gradient's trial switched to its form: run once (ConvEngine::prime_switched_forward)
  // at the end of that filter gradient's call, outside every trial, on scratch buffers outside the
  // memory count, so that what the form keeps (staging, workspace) is made there and not in the
  // next step, which the trainer may capture as a CUDA graph.
  // Where that run fails or finds no scratch memory, the switch is undone: the forward keeps its
  // form and the filter gradient's decision is what its own times said (`filter_alone`).
  struct SwitchedForward {
    ConvPlan* plan = nullptr;
    ConvPlan::Choice ConvPlan::*decision = nullptr;
    ConvPlan::Choice ConvPlan::*filter_decision = nullptr;
    bool filter_alone = false;
  } switched_forward;
};

// Set during a timed trial of a convolution form (channels-first, width-lowered, and the lowered
// form's trial of a plan that has either): transient buffers that CudaBackend::staging() hands out
// for these slots instead, uncounted, as cuDNN's search workspace is. The backend holds them (its
// staging and workspace answer with them); the engine's trials install and clear them.
struct TrialBuffers {
  std::array<Tensor, 10> staging;
  // CudaBackend::workspace() of such a trial where it needs more than the kept workspace (transient likewise).
  Tensor workspace;
  int depth = 0;  // trials in progress, nested ones counted
};

// The plan conv_forward runs for these operands (the zero-padded one where padding pays, its
// directions searched on first use) and the operands it takes (x and w padded copies there):
// ConvEngine::forward_operands.
struct ForwardOperands {
  ConvPlan* plan;
  Tensor x, w;
  ConvPlan* given;  // the plan of the operands as given (== plan unless padded)
};
// A channels-last operand of the channels-first form and the staging slot of its NCHW copy:
// 5 for x and dx, 6 for w and dw, 7 for y and dy.
struct ChannelsFirstOperand {
  const Tensor& t;
  size_t slot;
};
// Staging slots and their sizes (elements of the plan's dtype) that a trial holds transient.
using StagingSlots = std::vector<std::pair<size_t, int64_t>>;

}  // namespace cnnscale
