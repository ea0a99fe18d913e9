// The CUDA backend's convolutions: ConvEngine runs each direction in the form its timed trials chose
// (cuDNN on the operands as given or channel-padded, channels-first, lowered, width-lowered) and owns
// the per-shape plans and the forms' kept lowerings; ConvAlgorithms chooses and runs cuDNN's kernels
// for a plan (legacy-API algorithm searches, graph-API plans with fused epilogues and int8, the
// engine cache). Both work on their CudaBackend's stream, handles, workspace and staging; the
// backend owns one engine and forwards its convolution ops to it.
#pragma once
#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_conv_forms.hpp"
#include "backend/cuda/cuda_conv_plan.hpp"
#include "backend/cuda/cudnn_graph.hpp"
#include "core/log.hpp"

namespace cnnscale {

class CudaBackend;

namespace cuda {

struct Im2colShape;  // cuda_kernels.hpp
class ConvEngine;

// cuDNN's kernels for a convolution plan: each direction's algorithm searched on first use
// (cuda_conv_search.cpp), the fused graph plans timed against the ops apart
// (cuda_conv_fused_search.cpp), the int8 convolution's plans (cuda_int8.cpp).
class ConvAlgorithms {
 public:
  ConvAlgorithms(CudaBackend& backend, ConvEngine& engine) : b_(backend), engine_(engine) {}
  ConvAlgorithms(const ConvAlgorithms&) = delete;
  ConvAlgorithms& operator=(const ConvAlgorithms&) = delete;

  void find_conv_forward(ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor& y);
  // One direction on `plan` with its chosen algorithm (searched before).
  void run_conv_forward(ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor& y);
  // Times the fused bias+ReLU graph plans for `plan` against its forward, bias and ReLU apart.
  void search_bias_relu(ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y);
  // The same for the residual graph plans, against conv_forward (whatever form it runs) and the ops.
  void search_residual(ConvPlan& plan, const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                       const Tensor& addend, const Tensor& y);
  void search_bias(ConvPlan& plan, const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                   const Tensor& y);
  void run_conv_backward_data(ConvPlan& plan, const Tensor& w, const Tensor& dy, const Tensor& dx);
  // dx += the data gradient with the chosen algorithm (beta 1): the legacy algorithm, or the chosen
  // graph plan's engine built to add. False where that engine cannot add: nothing ran.
  bool run_conv_backward_data_add(ConvPlan& plan, const Tensor& w, const Tensor& dy, const Tensor& dx);
  void run_conv_backward_filter(ConvPlan& plan, const Tensor& x, const Tensor& dy, const Tensor& dw);
  void find_conv_backward_data(ConvPlan& plan, const Tensor& w, const Tensor& dy, const Tensor& dx);
  void find_conv_backward_filter(ConvPlan& plan, const Tensor& x, const Tensor& dy, const Tensor& dw);
  // 16-bit convolutions use tensor cores, which cuDNN's legacy API only offers them under
  // CUDNN_TENSOR_OP_MATH (under DEFAULT_MATH cudnnFind returned only FMA kernels, far slower:
  // docs/measurements/2026-11-25-convolution-choices.md); f32 ones use TF32 tensor cores only with
  // TF32 allowed.
  cudnnMathType_t conv_math(DType dtype) const;
  // int8 (cuda_int8.cpp): one cuDNN graph plan per convolution shape, the fastest offered.
  void conv_forward_int8(const ConvParams& p, const Tensor& xq, const Tensor& wq, const Tensor& scale,
                         const Tensor& bias, const Tensor& addend, const Tensor& addend_scale, bool relu,
                         const Tensor& y);

 private:
  // The EngineCache key of a search on this backend: `what` after what decides what was measured.
  std::string engine_cache_key(const std::string& what) const;
  // `op` and a convolution plan's dtype, layout, shapes and parameters: the part of its searches'
  // keys that names the problem.
  static std::string conv_cache_text(const char* op, const ConvPlan& plan);
  // A direction's search result read back from the engine cache; nullopt: search anew (the definition says when).
  std::optional<ConvAlgoChoice> cached_conv_choice(const std::string& text, const ConvPlan& plan,
                                                   cuda::ConvDirection direction, int count,
                                                   const std::array<void*, 3>& operands, size_t limit,
                                                   const std::function<cudnnStatus_t(int, size_t*)>& workspace_size,
                                                   bool (*amplifies)(int));
  // An EngineCache hit: only `engine` is compiled for `spec`, and kept where it runs once (`runs`,
  // on a workspace of its size); null where this GPU does not offer it or it fails here.
  std::unique_ptr<cuda::ConvGraphPlan> cached_graph_plan(
      const std::string& engine, const cuda::ConvGraphSpec& spec,
      const std::function<bool(const cuda::ConvGraphPlan&, void*)>& runs);
  // `key`: the plan map's key (shapes, parameters, y and epilogue), also the engine cache's.
  std::shared_ptr<cuda::ConvGraphPlan> search_int8_conv(const std::string& key, const ConvParams& p, const Tensor& xq,
                                                        const Tensor& wq, const Tensor& scale, const Tensor& bias,
                                                        const Tensor& addend, const Tensor& addend_scale, bool relu,
                                                        const Tensor& y);
  // The operands of a fused forward: the addend only for the residual one.
  struct FusedOperands {
    const Tensor &x, &w, &bias;
    const Tensor* addend;
    const Tensor& y;
  };
  // A fused forward's graph spec (conv_bias_relu_graph_spec and its siblings in cudnn_graph.hpp).
  using FusedSpec = ConvGraphSpec (*)(DType, Layout, const Shape& x, const Shape& w, const Shape& y, const ConvParams&,
                                      bool allow_tf32);
  // The fastest graph plan for `plan`'s `fused_spec` where it measures faster than `apart` (the ops
  // apart); else null.
  std::shared_ptr<ConvGraphPlan> faster_fused_plan(const char* op, const ConvPlan& plan, FusedSpec fused_spec,
                                                   const std::function<void()>& apart,
                                                   const FusedOperands& operands);
  // The search of one direction that the three find_conv_* share (cuda_conv_search.cpp says how).
  template <typename Perf, typename Heuristic, typename Find, typename WorkspaceSize>
  ConvAlgoChoice search_direction(const char* op, ConvPlan& plan, cuda::ConvDirection direction, int count,
                                  const std::array<void*, 3>& operands, const Shape& x, const Shape& w,
                                  Heuristic&& heuristic, Find&& find, WorkspaceSize&& workspace_size);
  // Makes the fastest graph-API plan of one direction `choice.graph` where it beats the legacy algorithm.
  void search_graph_plans(const char* op, const ConvPlan& plan, cuda::ConvDirection direction, ConvAlgoChoice& choice,
                          void* x, void* w, void* y, void* workspace, size_t workspace_bytes);
  // Runs a graph plan (a choice's); false when there is none or it cannot take these operands.
  bool run_graph_plan(const cuda::ConvGraphPlan* graph, void* x, void* w, void* y);
  // cuDNN's legacy backward data with the chosen algorithm: dx = dgrad + beta * dx.
  void run_legacy_backward_data(ConvPlan& plan, const Tensor& w, const Tensor& dy, const Tensor& dx, float beta);
  size_t search_workspace_limit() const;

  CudaBackend& b_;
  ConvEngine& engine_;  // conv_forward, for the ops apart that a fused plan is timed against
  std::map<std::string, std::shared_ptr<ConvGraphPlan>> int8_conv_plans_;  // by shapes, params, y, epilogue
};

// The convolution ops of the backend (cuda_conv.cpp), their plans (cuda_conv_plan.cpp), the lowered
// and width-lowered forms (cuda_conv_lowered.cpp) and the timed trials that choose a form
// (cuda_conv_trials.hpp).
class ConvEngine {
 public:
  explicit ConvEngine(CudaBackend& backend) : b_(backend) {}
  ConvEngine(const ConvEngine&) = delete;
  ConvEngine& operator=(const ConvEngine&) = delete;

  void conv_forward(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& y);
  void conv_forward_bias_relu(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                              const Tensor& y);
  void conv_forward_residual(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                             const Tensor& addend, const Tensor& y);
  void conv_forward_bias(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y);
  void conv_forward_int8(const ConvParams& p, const Tensor& xq, const Tensor& wq, const Tensor& scale,
                         const Tensor& bias, const Tensor& addend, const Tensor& addend_scale, bool relu,
                         const Tensor& y) {
    algos_.conv_forward_int8(p, xq, wq, scale, bias, addend, addend_scale, relu, y);
  }
  void conv_backward_data(const ConvParams& p, const Tensor& w, const Tensor& dy, const Tensor& dx);
  void conv_backward_data_add(const ConvParams& p, const Tensor& w, const Tensor& dy, const Tensor& dx,
                              const Tensor& scratch);
  void conv_backward_filter(const ConvParams& p, const Tensor& x, const Tensor& dy, const Tensor& dw);
  std::string conv_implementation(const ConvSignature& call) const;
  const ConvPlan* find_conv_plan(const ConvParams& p, const Shape& x, const Shape& w, DType dtype, Layout layout) const;
  int64_t input_lowerings() const { return forms_.input_lowerings; }

 private:
  using ConvKey = std::array<int64_t, 16>;
  using KeptForm = ConvFormState::KeptForm;  // cuda_conv_forms.hpp
  static ConvKey conv_key(const ConvParams& p, const Shape& x, const Shape& w, DType dtype, Layout layout);
  ConvPlan& conv_plan(const char* op, const ConvParams& p, const Shape& x, const Shape& w, DType dtype, Layout layout);
  // Staging `slot` shaped as channels-last `t` with `channels` channels (contents undefined).
  Tensor channels_staging(size_t slot, const Tensor& t, int64_t channels);
  // `t` (channels-last, C innermost) copied into staging `slot` with `channels` channels: zero-padded
  // when channels > C, cut back when channels < C.
  Tensor with_channels(size_t slot, const Tensor& t, int64_t channels);
  // Copies the first dst.c() channels of every pixel of `padded` into dst (channels-last).
  void unpad_channels(const Tensor& padded, const Tensor& dst);
  // Whether the direction `algo` of `plan` (&ConvPlan::fwd, ...) runs on plan.padded, as recorded in
  // plan.*on_padded. Its first call runs the searches that decide it: find_plain() on the plan as
  // given (unless padding is always on), find_padded() on the padded plan where there is one.
  template <typename FindPlain, typename FindPadded>
  bool runs_padded(const char* op, ConvPlan& plan, ConvAlgoChoice ConvPlan::*algo, bool ConvPlan::*on_padded,
                   FindPlain&& find_plain, FindPadded&& find_padded);
  // The plan conv_forward runs for these operands and the operands it takes (ForwardOperands).
  // `lowered`, `first`, `width`: the caller's lowered, channels-first and width-lowered decisions;
  // where any is Yes the operands are returned as given. Both forwards begin here (forward_begins).
  ForwardOperands forward_operands(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& y,
                                   ConvPlan::Choice ConvPlan::*lowered, ConvPlan::Choice ConvPlan::*first,
                                   ConvPlan::Choice ConvPlan::*width);
  // A convolution direction's search or run on `plan`, its operands in the direction's order:
  // (x, w, y) forward, (w, dy, dx) backward data, (x, dy, dw) backward filter.
  using ConvCall = void (ConvAlgorithms::*)(ConvPlan&, const Tensor&, const Tensor&, const Tensor&);
  // One direction of `plan` in its channels-first form (CudaBackendOptions::channels_first).
  void run_channels_first(ConvPlan& plan, ConvAlgoChoice ConvPlan::*algo, ConvCall find, ConvCall run,
                          const ChannelsFirstOperand& a, const ChannelsFirstOperand& b,
                          const ChannelsFirstOperand& out);
  // Runs run_b() where `decision` of `plan` is Yes, run_a() where No; at the first call (Unsearched)
  // b_wins() decides it. run_faster_order and run_faster_form are its two uses.
  template <typename Decide, typename RunA, typename RunB>
  void run_chosen(ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision, Decide&& b_wins, RunA&& run_a, RunB&& run_b);
  // Runs run_first() (the channels-first form) or run_given() (the op on its channels-last operands)
  // as `decision` says; decided at the first call, by timing both where measured
  // (form_measures_faster, its copies in transient staging: the backend's trial buffers).
  template <typename RunGiven, typename RunFirst>
  void run_faster_order(const char* op, ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision, RunGiven&& run_given,
                        RunFirst&& run_first);
  // Whether a form (run_form) measures faster than the op as it runs otherwise (run_other), timed
  // with `slots` transient (TrialStaging). No memory for them, or a form that fails in its trial
  // (e.g. no usable algorithm for its shape, logged at `failure`), loses.
  template <typename RunOther, typename RunForm>
  bool form_measures_faster(const char* op, const ConvPlan& plan, const StagingSlots& slots, const char* other_name,
                            RunOther&& run_other, const char* form_name, RunForm&& run_form, log::Level failure);
  // Whether run_b() measures faster than run_a() (each run once untimed, then the median of timed
  // runs), logged under the two names; it takes the notes of the trial (forms_.trial_notes) first.
  template <typename RunA, typename RunB>
  bool second_measures_faster(const char* op, const ConvPlan& plan, const char* a_name, RunA&& run_a,
                              const char* b_name, RunB&& run_b);
  void prime_switched_forward(const Tensor& x);
  // Runs trial(), a form's measured trial for `decision` of `plan`, with its notes; whether the form runs.
  template <typename Lower, typename Trial>
  bool noted_trial(ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision, ConvPlan::FormTrial ConvPlan::*forward_trial,
                   Lower&& lower, Trial&& trial);
  // `t` reordered into staging `slot` in memory order `to` (cudnnTransformTensor); reorder() into
  // a given tensor.
  Tensor reordered(size_t slot, const Tensor& t, Layout to);
  void reorder(const Tensor& src, const Tensor& dst);
  // The lowered convolution (conv_lowering, cuda_conv_lowered.cpp).
  bool lowerable(const ConvPlan& plan) const;
  static Shape lowered_shape(const ConvPlan& plan);  // (n*oh*ow, the field padded to whole 16-byte rows)
  // Likewise for the lowered form, slot 4 (forms_.kept).
  Tensor lowered_input(const ConvPlan& plan, const Tensor& x, bool forward);
  Tensor lowered_filter(const ConvPlan& plan, const Tensor& w, size_t slot);
  void run_lowered_forward(const ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor& bias, bool relu,
                           const Tensor& y);
  void run_lowered_backward_filter(const ConvPlan& plan, const Tensor& x, const Tensor& dy, const Tensor& dw);
  // Runs run_lowered() or run_cudnn() (the op as it runs otherwise), as `decision` of `plan` says;
  // decided at the first call, where measured, by timing both on the op's buffers
  // (lowered_measures_faster).
  template <typename RunCudnn, typename RunLowered>
  bool lowered_measures_faster(const char* op, const ConvPlan& plan, RunCudnn&& run_cudnn, RunLowered&& run_lowered);
  // `lower`, for the filter gradient only: x's lowering alone (noted_trial).
  template <typename RunCudnn, typename RunLowered, typename Lower = std::nullptr_t>
  void run_faster_form(const char* op, ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision, RunCudnn&& run_cudnn,
                       RunLowered&& run_lowered, Lower&& lower = nullptr);
  // Whether a width-lowered input of `lowered_x` for x (in `dtype`) is within the form's bounds.
  static bool width_lowering_fits(const Shape& lowered_x, const Shape& x, DType dtype);
  // The width-lowered form (width_lowering, cuda_conv_lowered.cpp); `forward`: which direction asks.
  Tensor width_lowered_input(const ConvPlan& plan, const Tensor& x, bool forward);
  void run_width_lowered_forward(const ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor* bias,
                                 const Tensor& y);
  void run_width_lowered_backward_filter(const ConvPlan& plan, const Tensor& x, const Tensor& dy, const Tensor& dw);
  // Runs run_width() or run_other() (the op as it runs otherwise) as `decision` of `plan` says;
  // decided at the first call, where measured, by timing both (form_measures_faster, the copies of
  // both forms in transient staging).
  template <typename RunOther, typename RunWidth, typename Lower = std::nullptr_t>
  void run_faster_width(const char* op, ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision, RunOther&& run_other,
                        RunWidth&& run_width, Lower&& lower = nullptr);
  ConvPlan& fused_forward_plan(const char* op, const ConvParams& p, const Tensor& x, const Tensor& w,
                               const Tensor& bias, const Tensor* addend, const Tensor& y);
  bool run_fused_plan(const char* op, const std::shared_ptr<cuda::ConvGraphPlan>& fused, const Tensor& x,
                      const Tensor& w, const Tensor& bias, const Tensor* addend, const Tensor& y);
  // The input of `form` for plan: for a filter gradient the kept lowering of x where there is one,
  // else x lowered by `g` into `into`, which is the form's kept slot outside a trial (recorded there
  // for a forward) and a transient buffer in one.
  Tensor lowered_or_kept(KeptForm form, const ConvPlan& plan, const Tensor& x, bool forward, const cuda::Im2colShape& g,
                         const Tensor& into);
  // A forward of `plan` is about to run: what it left in either slot may not be refreshed; the
  // plan's stamps and forward count are taken.
  void forward_begins(ConvPlan& plan);
  struct TrialStaging;  // installs and clears the backend's trial buffers (cuda_conv_trials.hpp)

  CudaBackend& b_;
  std::map<ConvKey, std::unique_ptr<ConvPlan>> conv_plans_;
  // The convolution forms' kept lowerings and the state of their timed trials (cuda_conv_forms.hpp).
  ConvFormState forms_;
  ConvAlgorithms algos_{b_, *this};
};

}  // namespace cuda
}  // namespace cnnscale
