// The timed trials that decide a convolution direction's form at its first call (channel-padded,
// channels-first, lowered, width-lowered against cuDNN on the operands as given): the transient
// staging a trial runs in (TrialStaging) and the member templates that time and choose. Included by
// cuda_conv.cpp only, whose ops instantiate them.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/conv_form_choice.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_conv_timing.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_op_checks.hpp"
#include "backend/width_lowering.hpp"
#include "core/log.hpp"

namespace cnnscale {
using cuda::EventPair;
using cuda::median_run_ms;
using cuda::SearchBuffer;

// Transient staging slots and workspace for a timed trial of a convolution form, uncounted as
// cuDNN's search workspace is: what a losing form used is freed and counts in no peak. A trial
// inside another (the channels-first choice made within the width-lowered or lowered form's trial
// of the same plan) uses the enclosing one's buffers, of the same sizes, for the slots it installed.
struct cuda::ConvEngine::TrialStaging {
  TrialStaging(CudaBackend& backend, DType dtype, const StagingSlots& slots) : b(backend) {
    ++b.trial_.depth;
    try {
      install(dtype, slots);
    } catch (...) {  // the destructor will not run: undo here
      release();
      throw;
    }
  }
  ~TrialStaging() { release(); }
  TrialStaging(const TrialStaging&) = delete;
  TrialStaging& operator=(const TrialStaging&) = delete;
  bool room() const { return has_room; }

  // The slots of the forms nested in a trial of `plan`: the channels-first form's x, w and y
  // (5..7) and the width-lowered input and filter (8, 9), where the plan has those forms.
  static StagingSlots inner_form_slots(const ConvPlan& plan, bool channels_first, bool width) {
    StagingSlots slots;
    if (channels_first && plan.channels_first)
      slots.insert(slots.end(), {{5, plan.x_shape.numel()}, {6, plan.w_shape.numel()}, {7, plan.y_shape.numel()}});
    if (width && plan.width_lowered)
      slots.insert(slots.end(), {{8, plan.width_lowered->x_shape.numel()}, {9, plan.width_lowered->w_shape.numel()}});
    return slots;
  }

  CudaBackend& b;
  bool has_room = true;
  std::vector<size_t> owned;
  std::vector<std::unique_ptr<SearchBuffer>> buffers;

 private:
  void install(DType dtype, const StagingSlots& slots) {
    const size_t size = dtype_size(dtype);
    for (const auto& [slot, numel] : slots) {
      if (b.trial_.staging[slot].defined()) continue;  // an enclosing trial's
      const size_t bytes = static_cast<size_t>(numel) * size;
      buffers.push_back(std::make_unique<SearchBuffer>(std::max(bytes, size_t{1} << 20), b.stream()));
      if (buffers.back()->bytes() < bytes) {  // SearchBuffer got less (or nothing): no trial
        buffers.pop_back();
        has_room = false;
        return;
      }
      b.trial_.staging[slot] =
          Tensor(std::make_shared<Storage>(buffers.back()->ptr(), buffers.back()->bytes(), b.device(), nullptr), 0,
                 Shape{numel}, dtype);
      owned.push_back(slot);
    }
  }
  // The views go before the buffers they point into (the buffers are members, destroyed after).
  void release() {
    for (size_t slot : owned) b.trial_.staging[slot] = Tensor();
    owned.clear();
    if (--b.trial_.depth == 0) b.trial_.workspace = Tensor();
  }
};

template <typename RunA, typename RunB>
bool cuda::ConvEngine::second_measures_faster(const char* op, const ConvPlan& plan, const char* a_name, RunA&& run_a,
                                              const char* b_name, RunB&& run_b) {
  // This trial's notes, taken before the untimed calls below run any nested trial.
  ConvFormState::TrialNotes* notes = std::exchange(forms_.trial_notes, nullptr);
  EventPair ev;
  // One untimed call of each first (kernels loaded, staging grown, nested choices made), then the
  // medians.
  auto timed = [&](auto&& run) {
    run();
    return median_run_ms(ev, b_.stream(), [&] {
      run();
      return true;
    });
  };
  const float a_ms = timed(run_a), b_ms = timed(run_b);
  log::debug("{} x {} w {}: {} {:.3f} ms, {} {:.3f} ms; {} runs", op, plan.x_shape.to_string(),
             plan.w_shape.to_string(), a_name, a_ms, b_name, b_ms, b_ms < a_ms ? b_name : a_name);
  if (notes && notes->record) {
    notes->record->other_ms = a_ms;
    notes->record->form_ms = b_ms;
    notes->recorded = true;
  }
  if (notes && notes->forward && notes->lower) {
    const float copy_ms = timed(notes->lower);
    const FormSwitch w = weigh_forward_switch({notes->forward->other_ms, notes->forward->form_ms, a_ms, b_ms, copy_ms});
    notes->flip = w.switches();
    notes->form_alone = b_ms < a_ms;
    log::debug("{} x {} w {}: with the forward, {:.3f} ms as it runs, {:.3f} ms with both {} (the copy {:.3f} ms "
               "once); {}",
               op, plan.x_shape.to_string(), plan.w_shape.to_string(), w.as_is, w.switched, b_name, copy_ms,
               notes->flip ? "the forward switches to it" : "the forward stays");
    if (notes->flip) return true;
  }
  return b_ms < a_ms;
}

template <typename Decide, typename RunA, typename RunB>
void cuda::ConvEngine::run_chosen(ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision, Decide&& b_wins, RunA&& run_a,
                                  RunB&& run_b) {
  if (plan.*decision == ConvPlan::Choice::Unsearched)
    plan.*decision = b_wins() ? ConvPlan::Choice::Yes : ConvPlan::Choice::No;
  if (plan.*decision == ConvPlan::Choice::Yes)
    run_b();
  else
    run_a();
}

template <typename RunOther, typename RunForm>
bool cuda::ConvEngine::form_measures_faster(const char* op, const ConvPlan& plan, const StagingSlots& slots,
                                            const char* other_name, RunOther&& run_other, const char* form_name,
                                            RunForm&& run_form, log::Level failure) {
  const TrialStaging trial(b_, plan.dtype, slots);
  if (!trial.room()) {
    log::debug("{} x {} w {}: the {} form is not tried: no memory for its copies", op, plan.x_shape.to_string(),
               plan.w_shape.to_string(), form_name);
    return false;
  }
  try {
    return second_measures_faster(op, plan, other_name, run_other, form_name, run_form);
  } catch (const RuntimeError& e) {
    log::write(failure, fmt::format("{} x {} w {}: the {} form failed ({}) and does not run", op,
                                    plan.x_shape.to_string(), plan.w_shape.to_string(), form_name, e.what()));
    return false;
  }
}

template <typename RunGiven, typename RunFirst>
void cuda::ConvEngine::run_faster_order(const char* op, ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision,
                                        RunGiven&& run_given, RunFirst&& run_first) {
  run_chosen(
      plan, decision,
      [&] {
        // A failure here is expected of some shapes (no usable NCHW algorithm): said at debug level.
        return plan.channels_first &&
               (b_.options_.channels_first == ConvChannelsFirst::Always ||
                form_measures_faster(op, plan, TrialStaging::inner_form_slots(plan, true, false), "channels-last",
                                     run_given, "channels-first (reordered copies)", run_first, log::Level::Debug));
      },
      run_given, run_first);
}

// The search times kernels only: the padding copies (a few percent of the time of the convolutions
// that need them) are left out, so a near tie goes to whichever cuDNN timed faster.
template <typename FindPlain, typename FindPadded>
bool cuda::ConvEngine::runs_padded(const char* op, ConvPlan& plan, ConvAlgoChoice ConvPlan::*algo,
                                   bool ConvPlan::*on_padded, FindPlain&& find_plain, FindPadded&& find_padded) {
  const ConvAlgoChoice& plain = plan.*algo;
  if (plain.algo >= 0 || plan.*on_padded) return plan.*on_padded;  // decided by an earlier call
  // Deterministic runs do not time: a measured choice could differ in a resumed process.
  const bool always = b_.options_.channel_padding == ConvChannelPadding::Always ||
                      (b_.options_.deterministic && b_.options_.channel_padding == ConvChannelPadding::Measured);
  if (!plan.padded || !always) find_plain();
  if (!plan.padded) return false;
  const ConvAlgoChoice& padded = (*plan.padded).*algo;
  if (padded.algo < 0) find_padded();  // the padded plan may be shared with another shape
  const bool choice = always || plain.algo < 0 || (padded.algo >= 0 && padded.measured_ms < plain.measured_ms);
  log::debug("{}: channel padding {} (algo {} {:.3f} ms unpadded, algo {} {:.3f} ms padded)", op,
             choice ? "on" : "off", plain.algo, plain.measured_ms, padded.algo, padded.measured_ms);
  plan.*on_padded = choice;
  return choice;
}

// ---- lowered convolutions: the trial ----------------------------------------------------------

template <typename RunCudnn, typename RunLowered>
bool cuda::ConvEngine::lowered_measures_faster(const char* op, const ConvPlan& plan, RunCudnn&& run_cudnn,
                                               RunLowered&& run_lowered) {
  // The search's lowered input lives in a transient buffer, as cuDNN's search workspace does: a
  // form that loses leaves no memory held behind it, nor in the run's peak.
  const Shape col_shape = lowered_shape(plan);
  const size_t col_bytes = static_cast<size_t>(col_shape.numel()) * dtype_size(plan.dtype);
  // SearchBuffer halves its request on failure down to 1 MiB: ask for at least that.
  SearchBuffer col(std::max(col_bytes, size_t{1} << 20), b_.stream());
  if (col.bytes() < col_bytes) {
    log::debug("{} x {} w {}: no memory for the lowered input ({} bytes): cuDNN runs", op, plan.x_shape.to_string(),
               plan.w_shape.to_string(), col_bytes);
    return false;
  }
  // The cuDNN side may run the width-lowered or channels-first form, decided within this trial:
  // their copies stay transient too, whichever form wins here.
  std::optional<TrialStaging> inner_copies;
  if (plan.channels_first || plan.width_lowered)
    inner_copies.emplace(b_, plan.dtype, TrialStaging::inner_form_slots(plan, true, true));
  // Short of memory for them, none is held here: each inner trial then asks for its own, or skips
  // its form.
  if (inner_copies && !inner_copies->room()) inner_copies.reset();
  // A lowered trial of another plan nested in this one (the width-lowered form's own convolution)
  // has its own buffer; this one's is back when it ends.
  struct Restore {
    ConvEngine& b;
    Tensor input = b.forms_.lowered_search_input;
    const ConvPlan* plan = b.forms_.lowered_search_plan;
    ~Restore() {
      b.forms_.lowered_search_input = input;
      b.forms_.lowered_search_plan = plan;
    }
  } restore{*this};
  forms_.lowered_search_input =
      Tensor(std::make_shared<Storage>(col.ptr(), col.bytes(), b_.device(), nullptr), 0, col_shape, plan.dtype);
  forms_.lowered_search_plan = &plan;
  return second_measures_faster(op, plan, "cuDNN", run_cudnn, "lowered (im2col + GEMM)", run_lowered);
}

// Runs trial() (a form's measured trial for `decision` of `plan`) with its notes: for a forward,
// the times go to plan.*forward_trial; for the filter gradient (`lower` given) the forward's
// decision there may switch to the form. Returns whether the form runs.
// `lower` is nullptr for a forward; a callable is copied into the notes only where a trial runs,
// so the steady step builds no std::function.
template <typename Lower, typename Trial>
bool cuda::ConvEngine::noted_trial(ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision,
                                   ConvPlan::FormTrial ConvPlan::*forward_trial, Lower&& lower, Trial&& trial) {
  constexpr bool filter_gradient = !std::is_null_pointer_v<std::decay_t<Lower>>;
  ConvPlan::FormTrial& forward = plan.*forward_trial;
  // The lowered form, decided first, runs the forward where it won: the width-lowered one then
  // never does, whatever its decision says.
  const bool outranked =
      (forward.decision == &ConvPlan::fwd_width_lowered && plan.fwd_lowered == ConvPlan::Choice::Yes) ||
      (forward.decision == &ConvPlan::fwd_bias_relu_width_lowered &&
       plan.fwd_bias_relu_lowered == ConvPlan::Choice::Yes);
  // The switch counts on the forward's lowering being there at the filter gradient: one layer on
  // the plan, and no other write to the slot between its forward and this call (in backward order,
  // a later layer's switched forward has run ahead by then: prime_switched_forward).
  const KeptForm kept =
      forward_trial == &ConvPlan::fwd_width_trial ? ConvFormState::kWidthForm : ConvFormState::kLoweredForm;
  const bool lowering_survives = plan.sole_user && forms_.kept[kept].writes == plan.slot_writes_at_forward[kept];
  // A width-lowered trial nested in this plan's lowered one (in its untimed first call) does not
  // switch the forward: the lowered trial may yet choose its own form, whose forward comes first.
  const bool nested_in_lowered = kept == ConvFormState::kWidthForm && forms_.lowered_search_plan == &plan;
  ConvFormState::TrialNotes notes;
  if constexpr (!filter_gradient) {
    notes.record = &forward;
  } else if (forward.decision && plan.*forward.decision == ConvPlan::Choice::No && !outranked &&
             lowering_survives && !nested_in_lowered) {
    notes.forward = &forward;
    notes.lower = lower;
  }
  forms_.trial_notes = &notes;
  struct Clear {
    ConvEngine& b;
    ~Clear() { b.forms_.trial_notes = nullptr; }  // a trial that ended before timing took none
  } clear{*this};
  const bool form = trial();
  if (notes.recorded) forward.decision = decision;
  if (notes.flip) {
    plan.*forward.decision = ConvPlan::Choice::Yes;
    forms_.switched_forward = {&plan, forward.decision, decision, notes.form_alone};
  }
  return form;
}

template <typename RunCudnn, typename RunLowered, typename Lower>
void cuda::ConvEngine::run_faster_form(const char* op, ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision,
                                       RunCudnn&& run_cudnn, RunLowered&& run_lowered, Lower&& lower) {
  run_chosen(
      plan, decision,
      [&] {
        return lowerable(plan) && (b_.options_.conv_lowering == ConvLowering::Always ||
                                   noted_trial(plan, decision, &ConvPlan::fwd_lowered_trial, lower, [&] {
                                     return lowered_measures_faster(op, plan, run_cudnn, run_lowered);
                                   }));
      },
      run_cudnn, run_lowered);
}

// ---- width-lowered convolutions: the trial ----------------------------------------------------

template <typename RunOther, typename RunWidth, typename Lower>
void cuda::ConvEngine::run_faster_width(const char* op, ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision,
                                        RunOther&& run_other, RunWidth&& run_width, Lower&& lower) {
  run_chosen(
      plan, decision,
      [&] {
        // Both forms' copies are transient while timed: the width-lowered input and filter, and the
        // channels-first copies the other side may choose within this trial. A failure is a
        // warning: one of another kind than a shape cuDNN does not serve would otherwise hide.
        return plan.width_lowered &&
               (b_.options_.width_lowering == ConvWidthLowering::Always ||
                noted_trial(plan, decision, &ConvPlan::fwd_width_trial, lower, [&] {
                  return form_measures_faster(op, plan, TrialStaging::inner_form_slots(plan, true, true),
                                              "as otherwise", run_other, "width-lowered (R x 1 over S*C channels)",
                                              run_width, log::Level::Warn);
                }));
      },
      run_other, run_width);
}

}  // namespace cnnscale
