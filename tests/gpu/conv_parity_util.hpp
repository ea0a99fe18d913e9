// What the convolution parity tests share (test_cuda_parity_conv*.cpp): convolution parameters in
// one call, the padding cases and their test names, the twin operands of a case on the GPU and the
// CPU with the checks of every direction against the CPU, and the peak memory of a form's measured
// trial.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "parity_util.hpp"

#if CNNSCALE_HAVE_CUDA
#include "backend/cuda/cuda_backend.hpp"
#endif

namespace cnnscale::testing::conv_parity {

inline ConvParams conv(int kh, int kw, int sh, int sw, int ph, int pw, int dil, int groups) {
  return ConvParams{kh, kw, sh, sw, ph, pw, dil, dil, groups};
}

struct PadCase {
  std::string name;
  Shape x;
  int64_t filters;
  ConvParams p;
};

// A (case, precision) test's name: "<case>_<precision>".
inline std::string pad_case_name(const ::testing::TestParamInfo<std::tuple<PadCase, DType>>& info) {
  return std::get<0>(info.param).name + "_" + tensor_core_name(std::get<1>(info.param));
}

#if CNNSCALE_HAVE_CUDA
// The operands of one convolution case on a GPU backend, in `dtype` and `layout`: x, w and dy drawn
// from U(-1, 1) (seeds seed, seed + 1, seed + 2), outputs y, dx, dw; and on the CPU the same values
// in f32 NCHW (widening is exact) with the reference outputs of all three directions.
struct ConvTwins {
  Shape ws, ys;
  Tensor x, w, dy, y, dx, dw;
  Tensor xc, wc, dyc, yc, dxc, dwc;
};

inline ConvTwins make_conv_twins(CudaBackend& g, const PadCase& c, DType dtype, Layout layout, uint64_t seed) {
  const ConvParams& p = c.p;
  Backend& cpu = cpu_backend();
  ConvTwins t;
  t.ws = Shape{c.filters, c.x.c() / p.groups, p.kernel_h, p.kernel_w};
  t.ys = Shape{c.x.n(), c.filters, conv_output_dim(c.x.h(), p.kernel_h, p.stride_h, p.pad_h, p.dilation_h),
               conv_output_dim(c.x.w(), p.kernel_w, p.stride_w, p.pad_w, p.dilation_w)};
  auto operand = [&](const Shape& s, uint64_t sd, Tensor& on_cpu) {
    Tensor gt = g.alloc(s, dtype).as_layout(layout);
    fill_uniform(g, gt, sd, -1.0f, 1.0f);
    on_cpu = cpu.alloc(s);
    from_host(cpu, on_cpu, to_host(g, gt));
    return gt;
  };
  t.x = operand(c.x, seed, t.xc);
  t.w = operand(t.ws, seed + 1, t.wc);
  t.dy = operand(t.ys, seed + 2, t.dyc);
  t.y = g.alloc(t.ys, dtype).as_layout(layout);
  t.dx = g.alloc(c.x, dtype).as_layout(layout);
  t.dw = g.alloc(t.ws, dtype).as_layout(layout);
  t.yc = cpu.alloc(t.ys);
  t.dxc = cpu.alloc(c.x);
  t.dwc = cpu.alloc(t.ws);
  cpu.conv_forward(p, t.xc, t.wc, t.yc);
  cpu.conv_backward_data(p, t.wc, t.dyc, t.dxc);
  cpu.conv_backward_filter(p, t.xc, t.dyc, t.dwc);
  return t;
}

// A bias for case c on the GPU, a channels-last GPU output for conv_forward_bias_relu, and the
// CPU's max(0, conv(x, w) + bias) with the same bias values, from the twins' CPU forward.
struct BiasReluTwins {
  Tensor bias, fused, fused_c;
};

inline BiasReluTwins make_bias_relu_twins(CudaBackend& g, const PadCase& c, const ConvTwins& t, DType dtype,
                                   uint64_t seed) {
  Backend& cpu = cpu_backend();
  BiasReluTwins b;
  b.bias = g.alloc(Shape{c.filters}, dtype);
  fill_uniform(g, b.bias, seed, -0.5f, 0.5f);
  Tensor bias_c = cpu.alloc(Shape{c.filters});
  from_host(cpu, bias_c, to_host(g, b.bias));
  b.fused_c = cpu.alloc(t.ys);
  cpu.copy(t.yc, b.fused_c);
  cpu.bias_add(bias_c, b.fused_c);
  cpu.relu_forward(b.fused_c, b.fused_c);
  b.fused = g.alloc(t.ys, dtype).as_layout(Layout::NHWC);
  return b;
}

// The forward, the forward with bias and ReLU, the data gradient (with_data) and the filter
// gradient of case c on `g`, twice (the call that decides a form, then the planned one), each
// output filled with 9 first so that one left unwritten shows, every output against the CPU's.
inline void expect_directions_match_cpu(CudaBackend& g, const PadCase& c, const ConvTwins& t, const BiasReluTwins& b,
                                 double tol, bool with_data) {
  Backend& cpu = cpu_backend();
  const ConvParams& p = c.p;
  for (int round = 0; round < 2; ++round) {
    for (const Tensor* out : {&t.y, &b.fused, &t.dx, &t.dw}) g.fill(*out, 9.0f);
    g.conv_forward(p, t.x, t.w, t.y);
    g.conv_forward_bias_relu(p, t.x, t.w, b.bias, b.fused);
    if (with_data) g.conv_backward_data(p, t.w, t.dy, t.dx);
    g.conv_backward_filter(p, t.x, t.dy, t.dw);
    expect_parity(c.name + " y", to_host(g, t.y), to_host(cpu, t.yc), tol);
    expect_parity(c.name + " bias relu", to_host(g, b.fused), to_host(cpu, b.fused_c), tol);
    if (with_data) expect_parity(c.name + " dx", to_host(g, t.dx), to_host(cpu, t.dxc), tol);
    expect_parity(c.name + " dw", to_host(g, t.dw), to_host(cpu, t.dwc), tol);
  }
}
// The filter gradient reads the lowered input its forward left behind (CudaBackend::
// input_lowerings counts the im2col passes) only for the buffer that forward lowered: after a
// forward of another x, the filter gradient of the first x lowers it again, and matches the CPU
// both times. The negative control: the filter gradient from the other x, what a stale lowering
// would give, is far outside the tolerance, so the checks tell the two apart.
inline void expect_filter_gradient_reuses_forward_lowering(CudaBackend& g, const PadCase& c, DType dtype) {
  const ConvParams& p = c.p;
  const double tol = tol_tensor_core_dot(dtype);
  const ConvTwins a = make_conv_twins(g, c, dtype, Layout::NHWC, 171);
  const ConvTwins b = make_conv_twins(g, c, dtype, Layout::NHWC, 181);
  g.conv_forward(p, a.x, a.w, a.y);
  const int64_t after_forward = g.input_lowerings();
  g.conv_backward_filter(p, a.x, a.dy, a.dw);
  EXPECT_EQ(g.input_lowerings(), after_forward) << "the filter gradient lowered x again";
  expect_parity(c.name + " dw after its forward", to_host(g, a.dw), to_host(cpu_backend(), a.dwc), tol);
  g.conv_forward(p, b.x, b.w, b.y);  // the kept slot now holds b.x's lowering
  g.fill(a.dw, 9.0f);
  const int64_t before = g.input_lowerings();
  g.conv_backward_filter(p, a.x, a.dy, a.dw);
  EXPECT_EQ(g.input_lowerings(), before + 1) << "a.x was not lowered again";
  expect_parity(c.name + " dw after another x's forward", to_host(g, a.dw), to_host(cpu_backend(), a.dwc), tol);
  g.conv_backward_filter(p, b.x, a.dy, b.dw);
  EXPECT_GT(parity_error(to_host(g, b.dw), to_host(cpu_backend(), a.dwc)).normalized, 10 * tol);
}
#endif

#if CNNSCALE_HAVE_CUDA
// Peak memory of every direction of a case (expect_directions_match_cpu) on a backend that never
// tries one convolution form and on one that times it (measured), and whether it was chosen.
struct TrialPeaks {
  int64_t never = 0, measured = 0;
  bool chosen = false;
};

// set_form(options, measured) turns the form under test off or to measured; every other form, the
// channel padding and the workspace are off (every algorithm then needs none), so nothing else
// differs between the two backends. inspect(plan, measured, twins) checks the case's plan after
// the directions ran and says whether some direction chose the form.
template <typename SetForm, typename Inspect>
TrialPeaks measured_trial_peaks(const PadCase& c, DType dtype, uint64_t seed, SetForm&& set_form, Inspect&& inspect) {
  const double tol = tol_tensor_core_dot(dtype);
  TrialPeaks peaks;
  for (bool measured : {false, true}) {
    SCOPED_TRACE(measured ? "measured" : "never");
    CudaBackendOptions options;
    options.channels_first = ConvChannelsFirst::Never;
    options.width_lowering = ConvWidthLowering::Never;
    options.conv_lowering = ConvLowering::Never;
    options.channel_padding = ConvChannelPadding::Never;
    options.max_workspace_bytes = 0;
    options.allow_tf32 = dtype == DType::F32;
    set_form(options, measured);
    CudaBackend g(0, options);
    const ConvTwins t = make_conv_twins(g, c, dtype, Layout::NHWC, seed);
    const BiasReluTwins b = make_bias_relu_twins(g, c, t, dtype, seed + 1);
    g.reset_peak_memory();
    expect_directions_match_cpu(g, c, t, b, tol, /*with_data=*/true);
    g.synchronize();
    (measured ? peaks.measured : peaks.never) = g.memory_stats().peak_bytes;
    const ConvPlan* plan = g.find_conv_plan(c.p, c.x, t.ws, dtype, Layout::NHWC);
    EXPECT_NE(plan, nullptr);
    if (!plan) continue;
    const bool chosen = inspect(*plan, measured, t);
    peaks.chosen = peaks.chosen || (measured && chosen);
  }
  if (parity_verbose())
    std::printf("[parity] %s %s: form %s; peak %lld never, %lld measured\n", c.name.c_str(),
                dtype_name(dtype).c_str(), peaks.chosen ? "chosen" : "not chosen", static_cast<long long>(peaks.never),
                static_cast<long long>(peaks.measured));
  return peaks;
}

// Whether each of `decisions` of `plan` was made (measured), and any of them is Yes.
inline bool decided_any(const ConvPlan& plan, std::initializer_list<ConvPlan::Choice ConvPlan::*> decisions) {
  bool yes = false;
  for (ConvPlan::Choice ConvPlan::*d : decisions) {
    EXPECT_NE(plan.*d, ConvPlan::Choice::Unsearched);
    yes = yes || plan.*d == ConvPlan::Choice::Yes;
  }
  return yes;
}

// What a kept staging slot of `s` in `dtype` holds: whole floats, (bytes + 3) / 4 of them.
inline int64_t staging_bytes(const Shape& s, DType dtype) {
  return (s.numel() * static_cast<int64_t>(dtype_size(dtype)) + 3) / 4 * 4;
}
#endif

}  // namespace cnnscale::testing::conv_parity
