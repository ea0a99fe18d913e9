// Convolution plans (descriptors per shape, parameters, dtype and memory order) and the forms a
// channels-last convolution may run in besides cuDNN on its operands as given: channel-padded,
// channels-first, lowered (im2col + GEMM) and width-lowered ((R x 1) over S*C channels). Each
// direction's form is decided at its first call by timed trials (their copies in transient
// buffers); the searches of cuDNN's algorithms are in cuda_conv_search.cpp, the lowered forms'
// copies and GEMMs in cuda_conv_lowered.cpp.
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

namespace {

// Channels-last tensor-core convolutions want whole 16-byte pixels: 8 channels of 2 bytes, or 4 of
// 4 bytes (TF32).
constexpr int64_t kPixelQuantumBytes = 16;
int64_t channel_quantum(DType dtype) { return kPixelQuantumBytes / static_cast<int64_t>(dtype_size(dtype)); }

}  // namespace

// Plans are per shape, parameters, dtype and memory order.
CudaBackend::ConvKey CudaBackend::conv_key(const ConvParams& p, const Shape& x, const Shape& w, DType dtype,
                                           Layout layout) {
  return {x[0],       x[1],       x[2],    x[3],    w[0],         w[1],         w[2],         w[3],
          p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w, p.groups,
          static_cast<int64_t>(dtype) * 2 + (layout == Layout::NHWC ? 1 : 0)};
}

// The memory order one convolution call runs in: channels-last if any operand is. An operand of one
// pixel (a 1x1 filter, a 1x1 output) is the same bytes in both orders, so it may carry either tag.
static Layout conv_layout(const char* op, const Tensor& a, const Tensor& b, const Tensor& c) {
  const Layout l = conv_call_layout(a, b, c);
  for (const Tensor* t : {&a, &b, &c})
    if (t->layout() != l && t->shape().rank() == 4 && t->shape().h() * t->shape().w() > 1)
      throw_runtime("{} on cuda: operands {} {}, {} {} and {} {} mix memory orders", op, a.shape().to_string(),
                    layout_name(a.layout()), b.shape().to_string(), layout_name(b.layout()), c.shape().to_string(),
                    layout_name(c.layout()));
  return l;
}

ConvPlan& CudaBackend::conv_plan(const char* op, const ConvParams& p, const Shape& x, const Shape& w, DType dtype,
                                 Layout layout) {
  if (x.rank() != 4 || w.rank() != 4)
    throw_runtime("{} on cuda: x {} and w {} must be 4-d (N, C, H, W) / (K, C/groups, R, S)", op, x.to_string(),
                  w.to_string());
  if (p.groups < 1 || x.c() != w.c() * p.groups || w.n() % p.groups != 0 || w.h() != p.kernel_h ||
      w.w() != p.kernel_w || p.stride_h < 1 || p.stride_w < 1 || p.dilation_h < 1 || p.dilation_w < 1 || p.pad_h < 0 ||
      p.pad_w < 0)
    throw_runtime("{} on cuda: inconsistent x {} w {} kernel {}x{} stride {}x{} pad {}x{} dilation {}x{} groups {}", op,
                  x.to_string(), w.to_string(), p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w,
                  p.dilation_h, p.dilation_w, p.groups);
  const ConvKey key = conv_key(p, x, w, dtype, layout);
  auto it = conv_plans_.find(key);
  if (it != conv_plans_.end()) return *it->second;

  auto plan = std::make_unique<ConvPlan>();
  plan->dtype = dtype;
  plan->layout = layout;
  plan->channels = x.c();
  plan->x_shape = x;
  plan->w_shape = w;
  plan->params = p;
  cuda::set_nchw(plan->x, x, op, dtype, layout);
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan->w, cuda::cudnn_type(dtype), cuda::cudnn_format(layout),
                                         cuda::to_int_dim(w[0], op),
                                         cuda::to_int_dim(w[1], op), cuda::to_int_dim(w[2], op),
                                         cuda::to_int_dim(w[3], op)));
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(plan->conv, p.pad_h, p.pad_w, p.stride_h, p.stride_w, p.dilation_h,
                                              p.dilation_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionGroupCount(plan->conv, p.groups));
  CUDNN_CHECK(cudnnSetConvolutionMathType(plan->conv, conv_math(dtype)));
  int n = 0, k = 0, oh = 0, ow = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(plan->conv, plan->x, plan->w, &n, &k, &oh, &ow));
  // The shape rule every backend and the layers share; cuDNN must agree with it.
  Shape expected{x[0], w[0], conv_output_dim(x[2], p.kernel_h, p.stride_h, p.pad_h, p.dilation_h),
                 conv_output_dim(x[3], p.kernel_w, p.stride_w, p.pad_w, p.dilation_w)};
  plan->y_shape = Shape{n, k, oh, ow};
  if (plan->y_shape != expected || oh < 1 || ow < 1)
    throw_runtime("{} on cuda: cuDNN output {} differs from cnnscale's {} for x {} w {}", op, plan->y_shape.to_string(),
                  expected.to_string(), x.to_string(), w.to_string());
  cuda::set_nchw(plan->y, plan->y_shape, op, dtype, layout);
  ConvPlan& made = *conv_plans_.emplace(key, std::move(plan)).first->second;
  const int64_t quantum = channel_quantum(dtype);
  if (layout == Layout::NHWC && p.groups == 1 && x.c() % quantum != 0 &&
      options_.channel_padding != ConvChannelPadding::Never) {
    Shape xp = x, wp = w;
    xp[1] = wp[1] = (x.c() + quantum - 1) / quantum * quantum;
    made.padded = &conv_plan(op, p, xp, wp, dtype, layout);  // map nodes stay put: `made` is still valid
  }
  // Measured needs timing: deterministic runs choose without it, so they stay channels-last.
  const bool first_form = options_.channels_first == ConvChannelsFirst::Always ||
                          (options_.channels_first == ConvChannelsFirst::Measured && !options_.deterministic);
  if (layout == Layout::NHWC && p.groups == 1 && x.c() % quantum != 0 && first_form)
    made.channels_first = &conv_plan(op, p, x, w, dtype, Layout::NCHW);
  // Width lowering: for the same first convolutions, where tensor cores compute (strict fp32 stays
  // on cuDNN's own forms, as with lowering) and where the copy is not out of proportion.
  const bool width_form = (options_.width_lowering == ConvWidthLowering::Always ||
                           (options_.width_lowering == ConvWidthLowering::Measured && !options_.deterministic)) &&
                          layout == Layout::NHWC && x.c() % quantum != 0 &&
                          (dtype != DType::F32 || options_.allow_tf32);
  const std::optional<WidthLowering> l = width_form ? width_lowering(p, x, w, quantum) : std::nullopt;
  if (l && width_lowering_fits(l->x, x, dtype)) {
    made.width_lowered = &conv_plan(op, l->params, l->x, l->w, dtype, layout);
    made.width_lowered->serves_width_lowering = true;
    made.width_field = l->field;
  }
  return made;
}

Tensor CudaBackend::reordered(size_t slot, const Tensor& t, Layout to) {
  Tensor out = staging(slot, t.shape(), t.dtype()).as_layout(to);
  reorder(t, out);
  return out;
}

void CudaBackend::reorder(const Tensor& src, const Tensor& dst) {
  cuda::set_desc(desc_a_, src, "reorder");
  cuda::set_desc(desc_b_, dst, "reorder");
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnTransformTensor(cudnn_, &one, desc_a_, src.raw(), &zero, desc_b_, dst.raw()));
}

// Transient staging slots and workspace for a timed trial of a convolution form, uncounted as
// cuDNN's search workspace is: what a losing form used is freed and counts in no peak. A trial
// inside another (the channels-first choice made within the width-lowered or lowered form's trial
// of the same plan) uses the enclosing one's buffers, of the same sizes, for the slots it installed.
struct CudaBackend::TrialStaging {
  TrialStaging(CudaBackend& backend, DType dtype, const StagingSlots& slots) : b(backend) {
    ++b.trial_depth_;
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
      if (b.trial_staging_[slot].defined()) continue;  // an enclosing trial's
      const size_t bytes = static_cast<size_t>(numel) * size;
      buffers.push_back(std::make_unique<SearchBuffer>(std::max(bytes, size_t{1} << 20), b.stream()));
      if (buffers.back()->bytes() < bytes) {  // SearchBuffer got less (or nothing): no trial
        buffers.pop_back();
        has_room = false;
        return;
      }
      b.trial_staging_[slot] =
          Tensor(std::make_shared<Storage>(buffers.back()->ptr(), buffers.back()->bytes(), b.device(), nullptr), 0,
                 Shape{numel}, dtype);
      owned.push_back(slot);
    }
  }
  // The views go before the buffers they point into (the buffers are members, destroyed after).
  void release() {
    for (size_t slot : owned) b.trial_staging_[slot] = Tensor();
    owned.clear();
    if (--b.trial_depth_ == 0) b.trial_workspace_ = Tensor();
  }
};

void CudaBackend::run_channels_first(ConvPlan& plan, ConvAlgoChoice ConvPlan::*algo, ConvCall find, ConvCall run,
                                     const ChannelsFirstOperand& a, const ChannelsFirstOperand& b,
                                     const ChannelsFirstOperand& out) {
  ConvPlan& first = *plan.channels_first;
  const Tensor at = reordered(a.slot, a.t, Layout::NCHW), bt = reordered(b.slot, b.t, Layout::NCHW);
  const Tensor outt = staging(out.slot, out.t.shape(), out.t.dtype()).as_layout(Layout::NCHW);
  if ((first.*algo).algo < 0) (this->*find)(first, at, bt, outt);
  (this->*run)(first, at, bt, outt);
  reorder(outt, out.t);
}

template <typename RunA, typename RunB>
bool CudaBackend::second_measures_faster(const char* op, const ConvPlan& plan, const char* a_name, RunA&& run_a,
                                         const char* b_name, RunB&& run_b) {
  // This trial's notes, taken before the untimed calls below run any nested trial.
  TrialNotes* notes = std::exchange(trial_notes_, nullptr);
  EventPair ev;
  // One untimed call of each first (kernels loaded, staging grown, nested choices made), then the
  // medians.
  auto timed = [&](auto&& run) {
    run();
    return median_run_ms(ev, stream(), [&] {
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
void CudaBackend::run_chosen(ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision, Decide&& b_wins, RunA&& run_a,
                             RunB&& run_b) {
  if (plan.*decision == ConvPlan::Choice::Unsearched)
    plan.*decision = b_wins() ? ConvPlan::Choice::Yes : ConvPlan::Choice::No;
  if (plan.*decision == ConvPlan::Choice::Yes)
    run_b();
  else
    run_a();
}

template <typename RunOther, typename RunForm>
bool CudaBackend::form_measures_faster(const char* op, const ConvPlan& plan, const StagingSlots& slots,
                                       const char* other_name, RunOther&& run_other, const char* form_name,
                                       RunForm&& run_form, log::Level failure) {
  const TrialStaging trial(*this, plan.dtype, slots);
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
void CudaBackend::run_faster_order(const char* op, ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision,
                                   RunGiven&& run_given, RunFirst&& run_first) {
  run_chosen(
      plan, decision,
      [&] {
        // A failure here is expected of some shapes (no usable NCHW algorithm): said at debug level.
        return plan.channels_first &&
               (options_.channels_first == ConvChannelsFirst::Always ||
                form_measures_faster(op, plan, TrialStaging::inner_form_slots(plan, true, false), "channels-last",
                                     run_given, "channels-first (reordered copies)", run_first, log::Level::Debug));
      },
      run_given, run_first);
}

Tensor CudaBackend::channels_staging(size_t slot, const Tensor& t, int64_t channels) {
  Shape s = t.shape();
  s[1] = channels;
  return staging(slot, s, t.dtype()).as_layout(Layout::NHWC);
}

Tensor CudaBackend::with_channels(size_t slot, const Tensor& t, int64_t channels) {
  Tensor out = channels_staging(slot, t, channels);
  const int64_t pixels = t.numel() / t.shape().c();
  cuda::launch_copy_rows(t.dtype(), pixels, t.raw(), t.shape().c(), out.raw(), channels, stream());
  return out;
}

void CudaBackend::unpad_channels(const Tensor& padded, const Tensor& dst) {
  const int64_t pixels = dst.numel() / dst.shape().c();
  cuda::launch_copy_rows(dst.dtype(), pixels, padded.raw(), padded.shape().c(), dst.raw(), dst.shape().c(), stream());
}

// The search times kernels only: the padding copies (a few percent of the time of the convolutions
// that need them) are left out, so a near tie goes to whichever cuDNN timed faster.
template <typename FindPlain, typename FindPadded>
bool CudaBackend::runs_padded(const char* op, ConvPlan& plan, ConvAlgoChoice ConvPlan::*algo,
                              bool ConvPlan::*on_padded, FindPlain&& find_plain, FindPadded&& find_padded) {
  const ConvAlgoChoice& plain = plan.*algo;
  if (plain.algo >= 0 || plan.*on_padded) return plan.*on_padded;  // decided by an earlier call
  // Deterministic runs do not time: a measured choice could differ in a resumed process.
  const bool always = options_.channel_padding == ConvChannelPadding::Always ||
                      (options_.deterministic && options_.channel_padding == ConvChannelPadding::Measured);
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

const ConvPlan* CudaBackend::find_conv_plan(const ConvParams& p, const Shape& x, const Shape& w, DType dtype,
                                            Layout layout) const {
  if (x.rank() != 4 || w.rank() != 4) return nullptr;
  const ConvKey key = conv_key(p, x, w, dtype, layout);
  auto it = conv_plans_.find(key);
  return it == conv_plans_.end() ? nullptr : it->second.get();
}

// The forms nest, each decided at its first call: lowered, or else width-lowered, or else
// channels-first, or else cuDNN on the operands as given (channel-padded where that pays).
void CudaBackend::conv_forward(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& y) {
  const ForwardOperands f =
      forward_operands(p, x, w, y, &ConvPlan::fwd_lowered, &ConvPlan::fwd_channels_first, &ConvPlan::fwd_width_lowered);
  auto cudnn = [&] {
    run_faster_order(
        "conv_forward", *f.given, &ConvPlan::fwd_channels_first, [&] { run_conv_forward(*f.plan, f.x, f.w, y); },
        [&] {
          run_channels_first(*f.given, &ConvPlan::fwd, &CudaBackend::find_conv_forward, &CudaBackend::run_conv_forward,
                             {x, 5}, {w, 6}, {y, 7});
        });
  };
  auto width_or_cudnn = [&] {
    run_faster_width("conv_forward", *f.given, &ConvPlan::fwd_width_lowered, cudnn,
                     [&] { run_width_lowered_forward(*f.given, x, w, nullptr, y); });
  };
  run_faster_form("conv_forward", *f.given, &ConvPlan::fwd_lowered, width_or_cudnn,
                  [&] { run_lowered_forward(*f.given, x, w, Tensor(), false, y); });
}

// ---- lowered convolutions: the trial ----------------------------------------------------------

template <typename RunCudnn, typename RunLowered>
bool CudaBackend::lowered_measures_faster(const char* op, const ConvPlan& plan, RunCudnn&& run_cudnn,
                                          RunLowered&& run_lowered) {
  // The search's lowered input lives in a transient buffer, as cuDNN's search workspace does: a
  // form that loses leaves no memory held behind it, nor in the run's peak.
  const Shape col_shape = lowered_shape(plan);
  const size_t col_bytes = static_cast<size_t>(col_shape.numel()) * dtype_size(plan.dtype);
  // SearchBuffer halves its request on failure down to 1 MiB: ask for at least that.
  SearchBuffer col(std::max(col_bytes, size_t{1} << 20), stream());
  if (col.bytes() < col_bytes) {
    log::debug("{} x {} w {}: no memory for the lowered input ({} bytes): cuDNN runs", op, plan.x_shape.to_string(),
               plan.w_shape.to_string(), col_bytes);
    return false;
  }
  // The cuDNN side may run the width-lowered or channels-first form, decided within this trial:
  // their copies stay transient too, whichever form wins here.
  std::optional<TrialStaging> inner_copies;
  if (plan.channels_first || plan.width_lowered)
    inner_copies.emplace(*this, plan.dtype, TrialStaging::inner_form_slots(plan, true, true));
  // Short of memory for them, none is held here: each inner trial then asks for its own, or skips
  // its form.
  if (inner_copies && !inner_copies->room()) inner_copies.reset();
  // A lowered trial of another plan nested in this one (the width-lowered form's own convolution)
  // has its own buffer; this one's is back when it ends.
  struct Restore {
    CudaBackend& b;
    Tensor input = b.lowered_search_input_;
    const ConvPlan* plan = b.lowered_search_plan_;
    ~Restore() {
      b.lowered_search_input_ = input;
      b.lowered_search_plan_ = plan;
    }
  } restore{*this};
  lowered_search_input_ =
      Tensor(std::make_shared<Storage>(col.ptr(), col.bytes(), device(), nullptr), 0, col_shape, plan.dtype);
  lowered_search_plan_ = &plan;
  return second_measures_faster(op, plan, "cuDNN", run_cudnn, "lowered (im2col + GEMM)", run_lowered);
}

template <typename Lower, typename Trial>
bool CudaBackend::noted_trial(ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision,
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
  const KeptForm kept = forward_trial == &ConvPlan::fwd_width_trial ? kWidthForm : kLoweredForm;
  const bool lowering_survives = plan.sole_user && kept_[kept].writes == plan.slot_writes_at_forward[kept];
  // A width-lowered trial nested in this plan's lowered one (in its untimed first call) does not
  // switch the forward: the lowered trial may yet choose its own form, whose forward comes first.
  const bool nested_in_lowered = kept == kWidthForm && lowered_search_plan_ == &plan;
  TrialNotes notes;
  if constexpr (!filter_gradient) {
    notes.record = &forward;
  } else if (forward.decision && plan.*forward.decision == ConvPlan::Choice::No && !outranked &&
             lowering_survives && !nested_in_lowered) {
    notes.forward = &forward;
    notes.lower = lower;
  }
  trial_notes_ = &notes;
  struct Clear {
    CudaBackend& b;
    ~Clear() { b.trial_notes_ = nullptr; }  // a trial that ended before timing took none
  } clear{*this};
  const bool form = trial();
  if (notes.recorded) forward.decision = decision;
  if (notes.flip) {
    plan.*forward.decision = ConvPlan::Choice::Yes;
    switched_forward_ = {&plan, forward.decision, decision, notes.form_alone};
  }
  return form;
}

void CudaBackend::prime_switched_forward(const Tensor& x) {
  const SwitchedForward f = std::exchange(switched_forward_, {});
  ConvPlan& plan = *f.plan;
  const bool bias_relu =
      f.decision == &ConvPlan::fwd_bias_relu_lowered || f.decision == &ConvPlan::fwd_bias_relu_width_lowered;
  const size_t size = dtype_size(plan.dtype);
  const int64_t k = plan.y_shape.c();
  // SearchBuffer asks for at least 1 MiB and may get less than asked: then the next forward makes
  // what the form keeps, as any first call does.
  auto bytes = [&](int64_t n) { return std::max(static_cast<size_t>(n) * size, size_t{1} << 20); };
  SearchBuffer wb(bytes(plan.w_shape.numel()), stream()), yb(bytes(plan.y_shape.numel()), stream()),
      bb(bytes(k), stream());
  auto undo = [&](const std::string& why) {
    log::debug("x {} w {}: the forward keeps its form ({})", plan.x_shape.to_string(), plan.w_shape.to_string(), why);
    plan.*f.decision = ConvPlan::Choice::No;
    plan.*f.filter_decision = f.filter_alone ? ConvPlan::Choice::Yes : ConvPlan::Choice::No;
  };
  if (wb.bytes() < bytes(plan.w_shape.numel()) || yb.bytes() < bytes(plan.y_shape.numel()) || bb.bytes() < bytes(k))
    return undo("no scratch memory to run it ahead");
  auto scratch = [&](const SearchBuffer& b, const Shape& shape) {
    CUDA_CHECK(cudaMemsetAsync(b.ptr(), 0, b.bytes(), stream()));
    return Tensor(std::make_shared<Storage>(b.ptr(), b.bytes(), device(), nullptr), 0, shape, plan.dtype);
  };
  try {
    const Tensor w = scratch(wb, plan.w_shape).as_layout(plan.layout);
    const Tensor y = scratch(yb, plan.y_shape).as_layout(plan.layout);
    if (bias_relu)
      conv_forward_bias_relu(plan.params, x, w, scratch(bb, Shape{k}), y);
    else
      conv_forward(plan.params, x, w, y);
    --plan.forwards_since_filter_gradient;  // not a layer's forward
  } catch (const RuntimeError& e) {
    undo(e.what());
  }
}

template <typename RunCudnn, typename RunLowered, typename Lower>
void CudaBackend::run_faster_form(const char* op, ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision,
                                  RunCudnn&& run_cudnn, RunLowered&& run_lowered, Lower&& lower) {
  run_chosen(
      plan, decision,
      [&] {
        return lowerable(plan) &&
               (options_.conv_lowering == ConvLowering::Always ||
                noted_trial(plan, decision, &ConvPlan::fwd_lowered_trial, lower,
                            [&] { return lowered_measures_faster(op, plan, run_cudnn, run_lowered); }));
      },
      run_cudnn, run_lowered);
}

// ---- width-lowered convolutions: the trial ----------------------------------------------------

template <typename RunOther, typename RunWidth, typename Lower>
void CudaBackend::run_faster_width(const char* op, ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision,
                                   RunOther&& run_other, RunWidth&& run_width, Lower&& lower) {
  run_chosen(
      plan, decision,
      [&] {
        // Both forms' copies are transient while timed: the width-lowered input and filter, and the
        // channels-first copies the other side may choose within this trial. A failure is a
        // warning: one of another kind than a shape cuDNN does not serve would otherwise hide.
        return plan.width_lowered &&
               (options_.width_lowering == ConvWidthLowering::Always ||
                noted_trial(plan, decision, &ConvPlan::fwd_width_trial, lower, [&] {
                  return form_measures_faster(op, plan, TrialStaging::inner_form_slots(plan, true, true),
                                              "as otherwise", run_other, "width-lowered (R x 1 over S*C channels)",
                                              run_width, log::Level::Warn);
                }));
      },
      run_other, run_width);
}

CudaBackend::ForwardOperands CudaBackend::forward_operands(const ConvParams& p, const Tensor& x, const Tensor& w,
                                                           const Tensor& y, ConvPlan::Choice ConvPlan::*lowered,
                                                           ConvPlan::Choice ConvPlan::*first,
                                                           ConvPlan::Choice ConvPlan::*width) {
  cuda::expect_float("conv_forward", "x", x, device_);
  cuda::expect_float("conv_forward", "w", w, device_);
  cuda::expect_float("conv_forward", "y", y, device_);
  cuda::expect_dtype("conv_forward", "w", w, x.dtype());
  cuda::expect_dtype("conv_forward", "y", y, x.dtype());
  activate();
  ConvPlan& plan = conv_plan("conv_forward", p, x.shape(), w.shape(), x.dtype(), conv_layout("conv_forward", x, w, y));
  cuda::expect_shape("conv_forward", "y", y, plan.y_shape);
  forward_begins(plan);  // this forward may not lower x again
  // Running lowered, channels-first or width-lowered: those forms read x and w as given, so no
  // padded copies are made.
  if (plan.*lowered == ConvPlan::Choice::Yes || plan.*first == ConvPlan::Choice::Yes ||
      plan.*width == ConvPlan::Choice::Yes)
    return {&plan, x, w, &plan};
  const int64_t c = plan.padded ? plan.padded->channels : 0;
  Tensor xp, wp;
  auto pad = [&] {
    if (xp.defined()) return;
    xp = with_channels(0, x, c);
    wp = with_channels(1, w, c);
  };
  if (!runs_padded(
          "conv_forward", plan, &ConvPlan::fwd, &ConvPlan::fwd_padded, [&] { find_conv_forward(plan, x, w, y); },
          [&] {
            pad();
            find_conv_forward(*plan.padded, xp, wp, y);
          }))
    return {&plan, x, w, &plan};
  pad();
  return {plan.padded, xp, wp, &plan};
}

// The fused plan runs where cuDNN's graph API has one for the shape and it measured faster than
// the convolution's own choice followed by the bias and ReLU kernels; otherwise those three run, as
// on every backend. Strict fp32 (no tensor-core engines) and deterministic runs (no timing) keep
// the three ops.
void CudaBackend::conv_forward_bias_relu(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                                         const Tensor& y) {
  cuda::expect_float("conv_forward_bias_relu", "bias", bias, device_);
  cuda::expect_dtype("conv_forward_bias_relu", "bias", bias, x.dtype());
  cuda::expect_numel("conv_forward_bias_relu", "bias", bias, y.shape().c());
  const ForwardOperands f =
      forward_operands(p, x, w, y, &ConvPlan::fwd_bias_relu_lowered, &ConvPlan::fwd_bias_relu_channels_first,
                       &ConvPlan::fwd_bias_relu_width_lowered);
  ConvPlan& plan = *f.plan;
  if (!plan.fwd_bias_relu_searched && f.given->fwd_bias_relu_lowered != ConvPlan::Choice::Yes &&
      f.given->fwd_bias_relu_channels_first != ConvPlan::Choice::Yes &&
      f.given->fwd_bias_relu_width_lowered != ConvPlan::Choice::Yes)
    search_bias_relu(plan, f.x, f.w, bias, y);
  auto cudnn = [&] {
    if (plan.fwd_bias_relu) {
      void* ws = workspace(plan.fwd_bias_relu->workspace_bytes());
      const cudnnStatus_t st = plan.fwd_bias_relu->execute(cudnn_, f.x.raw(), f.w.raw(), y.raw(), ws, bias.raw());
      if (st == CUDNN_STATUS_SUCCESS) return;
      // Misaligned views: the three ops below. Anything else is an error.
      if (st != CUDNN_STATUS_BAD_PARAM) cuda::fail(st, "cudnnBackendExecute (fused convolution)", __FILE__, __LINE__);
    }
    run_conv_forward(plan, f.x, f.w, y);
    bias_add(bias, y);
    relu_forward(y, y);
  };
  auto cudnn_in_faster_order = [&] {
    run_faster_order("conv_forward_bias_relu", *f.given, &ConvPlan::fwd_bias_relu_channels_first, cudnn,
                     [&] {
                       run_channels_first(*f.given, &ConvPlan::fwd, &CudaBackend::find_conv_forward,
                                          &CudaBackend::run_conv_forward, {x, 5}, {w, 6}, {y, 7});
                       bias_add(bias, y);
                       relu_forward(y, y);
                     });
  };
  auto width_or_cudnn = [&] {
    run_faster_width("conv_forward_bias_relu", *f.given, &ConvPlan::fwd_bias_relu_width_lowered, cudnn_in_faster_order,
                     [&] { run_width_lowered_forward(*f.given, x, w, &bias, y); });
  };
  run_faster_form("conv_forward_bias_relu", *f.given, &ConvPlan::fwd_bias_relu_lowered, width_or_cudnn,
                  [&] { run_lowered_forward(*f.given, x, w, bias, true, y); });
}

// The operands of a fused forward (conv_forward_bias, conv_forward_residual) checked, and its plan.
ConvPlan& CudaBackend::fused_forward_plan(const char* op, const ConvParams& p, const Tensor& x, const Tensor& w,
                                          const Tensor& bias, const Tensor* addend, const Tensor& y) {
  cuda::expect_float(op, "x", x, device_);
  cuda::expect_float(op, "bias", bias, device_);
  cuda::expect_dtype(op, "bias", bias, x.dtype());
  cuda::expect_numel(op, "bias", bias, y.shape().c());
  if (addend) {
    cuda::expect_float(op, "addend", *addend, device_);
    cuda::expect_dtype(op, "addend", *addend, y.dtype());
    cuda::expect_shape(op, "addend", *addend, y.shape());
    if (addend->layout() != y.layout())
      throw_runtime("{}: the addend is {} but y is {}", op, layout_name(addend->layout()), layout_name(y.layout()));
  }
  activate();
  return conv_plan(op, p, x.shape(), w.shape(), x.dtype(), conv_layout("conv_forward", x, w, y));
}

// Runs `fused` where a search found one faster; false where the ops apart must run (none found, or
// misaligned views). Anything but BAD_PARAM from cuDNN is an error.
bool CudaBackend::run_fused_plan(const char* op, const std::shared_ptr<cuda::ConvGraphPlan>& fused, const Tensor& x,
                                 const Tensor& w, const Tensor& bias, const Tensor* addend, const Tensor& y) {
  if (!fused) return false;
  void* ws = workspace(fused->workspace_bytes());
  const cudnnStatus_t st =
      fused->execute(cudnn_, x.raw(), w.raw(), y.raw(), ws, bias.raw(), addend ? addend->raw() : nullptr);
  if (st == CUDNN_STATUS_SUCCESS) return true;
  if (st != CUDNN_STATUS_BAD_PARAM)
    cuda::fail(st, fmt::format("cudnnBackendExecute ({})", op).c_str(), __FILE__, __LINE__);
  return false;
}

void CudaBackend::conv_forward_residual(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                                        const Tensor& addend, const Tensor& y) {
  ConvPlan& plan = fused_forward_plan("conv_forward_residual", p, x, w, bias, &addend, y);
  if (!plan.fwd_residual_searched) search_residual(plan, p, x, w, bias, addend, y);
  if (run_fused_plan("conv_forward_residual", plan.fwd_residual, x, w, bias, &addend, y)) return;
  conv_forward(p, x, w, y);
  bias_add(bias, y);
  axpby(1.0f, addend, 1.0f, y);
  relu_forward(y, y);
}

void CudaBackend::conv_forward_bias(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                                    const Tensor& y) {
  ConvPlan& plan = fused_forward_plan("conv_forward_bias", p, x, w, bias, nullptr, y);
  if (!plan.fwd_bias_searched) search_bias(plan, p, x, w, bias, y);
  if (run_fused_plan("conv_forward_bias", plan.fwd_bias, x, w, bias, nullptr, y)) return;
  conv_forward(p, x, w, y);
  bias_add(bias, y);
}

void CudaBackend::conv_backward_data(const ConvParams& p, const Tensor& w, const Tensor& dy, const Tensor& dx) {
  cuda::expect_float("conv_backward_data", "w", w, device_);
  cuda::expect_float("conv_backward_data", "dy", dy, device_);
  cuda::expect_float("conv_backward_data", "dx", dx, device_);
  cuda::expect_dtype("conv_backward_data", "dy", dy, w.dtype());
  cuda::expect_dtype("conv_backward_data", "dx", dx, w.dtype());
  activate();
  ConvPlan& plan = conv_plan("conv_backward_data", p, dx.shape(), w.shape(), w.dtype(),
                             conv_layout("conv_backward_data", dx, w, dy));
  cuda::expect_shape("conv_backward_data", "dy", dy, plan.y_shape);
  const int64_t c = plan.padded ? plan.padded->channels : 0;
  Tensor wp, dxp;
  auto pad = [&] {
    if (wp.defined()) return;
    wp = with_channels(1, w, c);
    dxp = channels_staging(2, dx, c);
  };
  const bool padded = runs_padded(
      "conv_backward_data", plan, &ConvPlan::bwd_data, &ConvPlan::bwd_data_padded,
      [&] { find_conv_backward_data(plan, w, dy, dx); },
      [&] {
        pad();
        find_conv_backward_data(*plan.padded, wp, dy, dxp);
      });
  auto cudnn = [&] {
    if (!padded) return run_conv_backward_data(plan, w, dy, dx);
    pad();
    run_conv_backward_data(*plan.padded, wp, dy, dxp);
    unpad_channels(dxp, dx);
  };
  run_faster_order("conv_backward_data", plan, &ConvPlan::bwd_data_channels_first, cudnn,
                   [&] {
                     run_channels_first(plan, &ConvPlan::bwd_data, &CudaBackend::find_conv_backward_data,
                                        &CudaBackend::run_conv_backward_data, {w, 6}, {dy, 7}, {dx, 5});
                   });
}

void CudaBackend::conv_backward_filter(const ConvParams& p, const Tensor& x, const Tensor& dy, const Tensor& dw) {
  cuda::expect_float("conv_backward_filter", "x", x, device_);
  cuda::expect_float("conv_backward_filter", "dy", dy, device_);
  cuda::expect_float("conv_backward_filter", "dw", dw, device_);
  cuda::expect_dtype("conv_backward_filter", "dy", dy, x.dtype());
  cuda::expect_dtype("conv_backward_filter", "dw", dw, x.dtype());
  activate();
  ConvPlan& plan = conv_plan("conv_backward_filter", p, x.shape(), dw.shape(), x.dtype(),
                             conv_layout("conv_backward_filter", x, dw, dy));
  plan.sole_user = std::exchange(plan.forwards_since_filter_gradient, 0) <= 1;
  cuda::expect_shape("conv_backward_filter", "dy", dy, plan.y_shape);
  const int64_t c = plan.padded ? plan.padded->channels : 0;
  Tensor xp, dwp;
  auto pad = [&] {
    if (xp.defined()) return;
    xp = with_channels(0, x, c);
    dwp = channels_staging(2, dw, c);
  };
  const bool padded = runs_padded(
      "conv_backward_filter", plan, &ConvPlan::bwd_filter, &ConvPlan::bwd_filter_padded,
      [&] { find_conv_backward_filter(plan, x, dy, dw); },
      [&] {
        pad();
        find_conv_backward_filter(*plan.padded, xp, dy, dwp);
      });
  auto cudnn = [&] {
    if (!padded) return run_conv_backward_filter(plan, x, dy, dw);
    pad();
    run_conv_backward_filter(*plan.padded, xp, dy, dwp);
    unpad_channels(dwp, dw);
  };
  auto cudnn_in_faster_order = [&] {
    run_faster_order("conv_backward_filter", plan, &ConvPlan::bwd_filter_channels_first, cudnn,
                     [&] {
                       run_channels_first(plan, &ConvPlan::bwd_filter, &CudaBackend::find_conv_backward_filter,
                                          &CudaBackend::run_conv_backward_filter, {x, 5}, {dy, 7}, {dw, 6});
                     });
  };
  auto width_or_cudnn = [&] {
    run_faster_width(
        "conv_backward_filter", plan, &ConvPlan::bwd_filter_width_lowered, cudnn_in_faster_order,
        [&] { run_width_lowered_backward_filter(plan, x, dy, dw); },
        [&] { width_lowered_input(plan, x, /*forward=*/true); });
  };
  run_faster_form(
      "conv_backward_filter", plan, &ConvPlan::bwd_filter_lowered, width_or_cudnn,
      [&] { run_lowered_backward_filter(plan, x, dy, dw); }, [&] { lowered_input(plan, x, /*forward=*/true); });
  // Not in the nested call of a width-lowered plan: this call's own staging is done with here.
  if (switched_forward_.plan == &plan) prime_switched_forward(x);
}

// ---- what ran ------------------------------------------------------------------------------------

namespace {

// cuDNN's names of its legacy algorithms, by direction, in cudnn_ops.h's enum order.
const char* legacy_algorithm_name(cuda::ConvDirection direction, int algo) {
  static const char* const kForward[] = {"implicit GEMM", "implicit precomputed GEMM", "GEMM", "direct", "FFT",
                                         "FFT tiling", "Winograd", "Winograd nonfused"};
  static const char* const kData[] = {"algo 0", "algo 1", "FFT", "FFT tiling", "Winograd", "Winograd nonfused"};
  static const char* const kFilter[] = {"algo 0", "algo 1", "FFT", "algo 3", "Winograd", "Winograd nonfused",
                                        "FFT tiling"};
  auto pick = [&](const auto& names) -> const char* {
    return algo >= 0 && algo < static_cast<int>(std::size(names)) ? names[algo] : "?";
  };
  switch (direction) {
    case cuda::ConvDirection::Forward: return pick(kForward);
    case cuda::ConvDirection::BackwardData: return pick(kData);
    default: return pick(kFilter);
  }
}

// The cuDNN choice of one direction: its graph-API plan, or its legacy algorithm (with tensor
// cores where its math type says so); empty where the direction was not searched.
std::string cudnn_choice(const ConvAlgoChoice& c, cuda::ConvDirection direction) {
  if (c.graph) return "cuDNN graph " + c.graph->name();
  if (c.algo < 0) return {};
  return fmt::format("cuDNN {}{}", legacy_algorithm_name(direction, c.algo),
                     cuda::is_tensor_op(c.math) ? " (tensor cores)" : "");
}

// One direction of `plan` as it runs: the forms in the order they nest (run_faster_form,
// run_faster_width, run_faster_order), then channel padding, then cuDNN's choice on the plan that
// runs; empty where the direction was not run. bias_relu: the forward is conv_forward_bias_relu's.
std::string direction_implementation(const ConvPlan& plan, cuda::ConvDirection d, bool bias_relu, bool addend,
                                     bool bias_only = false) {
  using Choice = ConvPlan::Choice;
  using Dir = cuda::ConvDirection;
  const bool fwd = d == Dir::Forward, filter = d == Dir::BackwardFilter;
  const Choice lowered = fwd ? (bias_relu ? plan.fwd_bias_relu_lowered : plan.fwd_lowered)
                             : filter ? plan.bwd_filter_lowered : Choice::No;
  const Choice width = fwd ? (bias_relu ? plan.fwd_bias_relu_width_lowered : plan.fwd_width_lowered)
                           : filter ? plan.bwd_filter_width_lowered : Choice::No;
  const Choice first = fwd ? (bias_relu ? plan.fwd_bias_relu_channels_first : plan.fwd_channels_first)
                            : filter ? plan.bwd_filter_channels_first : plan.bwd_data_channels_first;
  const bool padded = (fwd ? plan.fwd_padded : filter ? plan.bwd_filter_padded : plan.bwd_data_padded) && plan.padded;
  ConvAlgoChoice ConvPlan::*algo = fwd ? &ConvPlan::fwd : filter ? &ConvPlan::bwd_filter : &ConvPlan::bwd_data;
  // The lowered forward has the bias and ReLU in its GEMM's epilogue; the other forms run them
  // after the convolution, unless cuDNN's fused plan runs.
  const std::string apart = fwd && bias_relu ? (addend ? " + bias, addend, ReLU" : " + bias, ReLU") : "";
  // A residual or bias-only forward runs its fused plan, or conv_forward's form followed by the ops.
  if (fwd && addend && plan.fwd_residual)
    return fmt::format("cuDNN graph {} (bias, addend, ReLU fused)", plan.fwd_residual->name());
  if (fwd && addend) return direction_implementation(plan, d, false, false) + apart;
  if (fwd && bias_only && plan.fwd_bias) return fmt::format("cuDNN graph {} (bias fused)", plan.fwd_bias->name());
  if (fwd && bias_only) return direction_implementation(plan, d, false, false) + " + bias";
  if (lowered == Choice::Yes) return "lowered: im2col + cuBLASLt GEMM";
  if (width == Choice::Yes && plan.width_lowered)
    return fmt::format("width-lowered ({}x1 over {} channels): {}", plan.width_lowered->params.kernel_h,
                       plan.width_lowered->channels,
                       direction_implementation(*plan.width_lowered, d, bias_relu, false));
  if (first == Choice::Yes && plan.channels_first)
    return "channels-first copies: " + cudnn_choice(plan.channels_first->*algo, d) + apart;
  const ConvPlan& runs = padded ? *plan.padded : plan;
  const std::string pad = padded ? fmt::format("padded to {} channels: ", plan.padded->channels) : std::string();
  if (fwd && bias_relu && runs.fwd_bias_relu)
    return fmt::format("{}cuDNN graph {} (bias, ReLU fused)", pad, runs.fwd_bias_relu->name());
  const std::string chosen = cudnn_choice(runs.*algo, d);
  return chosen.empty() ? chosen : pad + chosen + apart;
}

}  // namespace

std::string CudaBackend::conv_implementation(const ConvSignature& call) const {
  const ConvPlan* plan = find_conv_plan(call.p, call.x, call.w, call.dtype, call.layout);
  if (!plan) return {};
  std::string out;
  auto add = [&](const char* name, cuda::ConvDirection d) {
    const std::string how = direction_implementation(*plan, d, call.bias_relu, call.addend, call.bias_only);
    if (!how.empty()) out += fmt::format("{}{} {}", out.empty() ? "" : "; ", name, how);
  };
  add("fwd", cuda::ConvDirection::Forward);
  add("dgrad", cuda::ConvDirection::BackwardData);
  add("wgrad", cuda::ConvDirection::BackwardFilter);
  return out;
}

}  // namespace cnnscale
