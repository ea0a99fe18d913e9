// A convolution plan of the CUDA backend (ConvPlan): the descriptors of one shape, parameters,
// dtype and memory order, the algorithm chosen for each direction (ConvAlgoChoice), the fused
// graph plans, and the forms decided for it (padded, channels-first, lowered, width-lowered).
#pragma once
#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/backend.hpp"
#include "backend/cuda/cudnn_descriptors.hpp"
#include "backend/cuda/cudnn_graph.hpp"

namespace cnnscale {

// The algorithm chosen for one direction of one convolution shape, and what it needs.
struct ConvAlgoChoice {
  int algo = -1;  // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t; -1 until measured
  size_t workspace_bytes = 0;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  float measured_ms = 0.0f;
  // Set when a graph-API plan measured faster than every legacy algorithm: it runs instead, with
  // `algo` kept as the fallback for a call whose operands the plan cannot take (misaligned views).
  std::shared_ptr<cuda::ConvGraphPlan> graph;
  // The same engine adding to its output instead (ConvGraphSpec::accumulate), for
  // Backend::conv_backward_data_add: built at its first use, null where the engine refuses it.
  std::shared_ptr<cuda::ConvGraphPlan> graph_add;
  bool graph_add_tried = false;
};

// Descriptors for one (x shape, w shape, params) and the algorithm of each direction, measured on
// first use of that direction.
struct ConvPlan {
  DType dtype = DType::F32;  // of x, w and y
  Layout layout = Layout::NCHW;  // of x, w (KRSC when NHWC) and y
  int64_t channels = 0;  // of x
  Shape x_shape, w_shape;
  ConvParams params;
  cuda::TensorDesc x, y;
  cuda::FilterDesc w;
  cuda::ConvDesc conv;
  Shape y_shape;
  ConvAlgoChoice fwd, bwd_data, bwd_filter;
  // How the last conv_backward_data_add added its gradient, Never before its first call: in place,
  // or formed in a scratch and added after (where the chosen form cannot add).
  enum class Adds { Never, InPlace, ThroughScratch };
  Adds bwd_data_adds = Adds::Never;
  // The same convolution with x and w zero-padded to a multiple of 8 channels (a plan of its own,
  // owned by the backend's plan map), or nullptr when C needs none or padding is off; and which
  // directions run on it (decided when each direction is searched).
  ConvPlan* padded = nullptr;
  bool fwd_padded = false, bwd_data_padded = false, bwd_filter_padded = false;
  // conv_forward_bias_relu: the fused graph plan where one measured faster than the convolution,
  // bias and ReLU apart (null otherwise), and whether that was measured yet.
  std::shared_ptr<cuda::ConvGraphPlan> fwd_bias_relu;
  bool fwd_bias_relu_searched = false;
  // conv_forward_residual likewise: the fused graph plan of convolution, bias, addend and ReLU where
  // one measured faster than conv_forward and the three element-wise ops after it.
  std::shared_ptr<cuda::ConvGraphPlan> fwd_residual;
  bool fwd_residual_searched = false;
  // conv_forward_bias likewise: convolution and bias in one graph plan, against conv_forward and
  // bias_add.
  std::shared_ptr<cuda::ConvGraphPlan> fwd_bias;
  bool fwd_bias_searched = false;
  // Whether the lowered form (CudaBackendOptions::conv_lowering) runs each of conv_forward,
  // conv_forward_bias_relu and conv_backward_filter for this shape: measured at its first call (a
  // forward's No may turn Yes at the filter gradient's first call, which weighs both: FormTrial).
  enum class Choice { Unsearched, No, Yes };
  Choice fwd_lowered = Choice::Unsearched, fwd_bias_relu_lowered = Choice::Unsearched,
          bwd_filter_lowered = Choice::Unsearched;
  // The same convolution channels-first (NCHW x, y and KCRS w; a plan of its own in the backend's
  // map), or nullptr where CudaBackendOptions::channels_first does not apply; and whether each
  // direction runs on it, on reordered copies of its operands (decided at its first call).
  ConvPlan* channels_first = nullptr;
  Choice fwd_channels_first = Choice::Unsearched, fwd_bias_relu_channels_first = Choice::Unsearched,
         bwd_data_channels_first = Choice::Unsearched, bwd_filter_channels_first = Choice::Unsearched;
  // The same convolution lowered by width (CudaBackendOptions::width_lowering: an (R x 1)
  // convolution over width_field = S*C channels, zero-padded to whole 16-byte pixels; a plan of its
  // own in the backend's map), or nullptr where the form does not apply; and whether each of
  // conv_forward, conv_forward_bias_relu and conv_backward_filter runs it (decided at its first call).
  ConvPlan* width_lowered = nullptr;
  int64_t width_field = 0;
  // Set on a plan made as another's width_lowered: it is never lowered itself, since its full
  // im2col is the other plan's with the columns reordered, and that one is tried where it fits.
  bool serves_width_lowering = false;
  Choice fwd_width_lowered = Choice::Unsearched, fwd_bias_relu_width_lowered = Choice::Unsearched,
         bwd_filter_width_lowered = Choice::Unsearched;
  // A forward's timed trial of the lowered or width-lowered form: which decision it made and the two
  // medians (ms, the form as otherwise first). Where it kept the other form, the filter gradient's
  // trial weighs both directions together and may switch the forward to the form (noted_trial).
  struct FormTrial {
    Choice ConvPlan::*decision = nullptr;
    float other_ms = 0, form_ms = 0;
  };
  FormTrial fwd_lowered_trial, fwd_width_trial;
  // What a filter gradient may count on finding its forward's lowering by: the kept slots' write
  // counts when this plan's forward last began (ConvFormState::kept, by KeptForm), and how many
  // forwards of the plan ran since its last filter gradient (more than one: layers of one shape
  // share the plan, and only the last forward's lowering can still be there). The filter gradient
  // sets sole_user from the count as it begins.
  std::array<uint64_t, 2> slot_writes_at_forward{};
  int forwards_since_filter_gradient = 0;
  bool sole_user = false;
};

}  // namespace cnnscale
