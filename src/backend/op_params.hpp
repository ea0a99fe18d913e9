// The parameters of the Backend's ops (backend.hpp), apart from the ops themselves: a convolution's,
// pooling's, LRN's and batch norm's settings, the convolution call a layer names, and the extra
// operands of the segmented SGD update. Layers build these without needing the whole interface.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.hpp"

namespace cnnscale {

struct ConvParams {
  int kernel_h = 1, kernel_w = 1;
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
  int dilation_h = 1, dilation_w = 1;
  int groups = 1;
};

// A convolution as a layer calls it: its parameters, the shapes of x (N, C, H, W) and w (K, C/groups,
// R, S), the storage and memory order of its operands, and whether its forward includes the bias and
// ReLU (conv_forward_bias_relu) and also a residual addend (conv_forward_residual).
struct ConvSignature {
  ConvParams p;
  Shape x, w;
  DType dtype = DType::F32;
  Layout layout = Layout::NCHW;
  bool bias_relu = false;
  bool addend = false;     // with bias_relu
  bool bias_only = false;  // the forward is conv_forward_bias's
  bool adds = false;       // the data gradient is conv_backward_data_add's
};

// The memory order a convolution call runs in: channels-last if any of its operands is (an operand
// of one pixel is the same bytes in both orders, so it may carry either tag). The CUDA backend keys
// its plans by it; a layer names its calls to Backend::conv_implementation by it.
inline Layout conv_call_layout(const Tensor& x, const Tensor& w, const Tensor& y) {
  const bool nhwc = x.layout() == Layout::NHWC || w.layout() == Layout::NHWC || y.layout() == Layout::NHWC;
  return nhwc ? Layout::NHWC : Layout::NCHW;
}

enum class PoolMode { Max, Average };

struct PoolParams {
  PoolMode mode = PoolMode::Max;
  int kernel_h = 2, kernel_w = 2;
  int stride_h = 2, stride_w = 2;
  int pad_h = 0, pad_w = 0;
  // Caffe rounds the output size up (so CaffeNet's 55->27->13->6 holds); floor matches cuDNN/PyTorch.
  bool ceil_mode = true;
};
// Output extent of a pooling window along one axis, with Caffe's rule that the last window must
// start inside the input (or its left padding).
int64_t pool_output_dim(int64_t in, int kernel, int stride, int pad, bool ceil_mode);
int64_t conv_output_dim(int64_t in, int kernel, int stride, int pad, int dilation);

// Cross-channel local response normalisation, Caffe's ACROSS_CHANNELS form:
// y = x / (k + alpha / local_size * sum_{window} x^2) ^ beta.
struct LrnParams {
  int local_size = 5;
  float alpha = 1e-4f;
  float beta = 0.75f;
  float k = 1.0f;
};

// Spatial batch norm (statistics per channel over N, H, W).
// running = (1 - momentum) * running + momentum * batch; running variance is unbiased (N*H*W - 1).
struct BatchNormParams {
  float eps = 1e-5f;
  float momentum = 0.1f;
  // Fused epilogue: y = max(0, bn(x) + z) (z optional, see BatchNormFused), so that a residual
  // block's batch norm, shortcut sum and ReLU are one pass over memory instead of three.
  bool relu = false;
};

// The fused epilogue's extra operands, all optional (undefined tensors), x's shape, dtype and layout.
struct BatchNormFused {
  Tensor z;      // forward: the addend (y = [relu](bn(x) + z))
  Tensor y;      // backward: the forward's output, whose sign gates dy when relu (required then)
  Tensor shift;  // backward: the forward's shift, (C) f32 (required when relu)
  Tensor dz;     // backward: written with the addend's gradient, dy gated by the ReLU
};

// The compute copies (16-bit, or channels-last filters) a segmented SGD update writes beside the f32
// masters (Backend::sgd_update_segments). `mirror` is the net's buffer of copies, of one float dtype;
// `map` (4S) i32 gives, for segment k of the update's table, {offset of its copy in `mirror`, or -1
// for a segment with none; channels C; pixels P; 1 if reordered}. A reordered segment is a filter
// (K, C, P) in the master and (K, P, C) in its copy (KCRS -> KRSC, as convert() moves NCHW to NHWC);
// otherwise the copy has the master's order. Each copy element is the updated master rounded once
// to the copy's dtype, bit for bit what convert() would write after the update.
// `grads`, where defined (only on a backend whose sgd_reads_mirror_grads() is true), is the net's
// buffer of the copies' gradients (mirror's dtype, offsets and layouts): the update then reads a
// mirrored segment's gradient there, widened exactly to f32, instead of from dw, so the net need
// not widen (and reorder) those gradients into dw after backward (GradientPlan::update_reads_mirror_grads).
struct SgdMirrors {
  Tensor mirror, map;
  Tensor grads;
  bool defined() const { return mirror.defined(); }
};
// A divergence check fused into the update: `flag` (i32 (1)) takes the value at `tag` (i32 (1),
// > 0) if it is 0 and a gradient the update reads is NaN or +-inf, as flag_nonfinite_at does on a
// whole buffer (the update itself goes ahead: the caller stops the run on the flag). Which
// gradients: CUDA checks those it applies (not a frozen parameter's, nor alignment gaps); the
// default path checks all of dw.
struct GradCheck {
  Tensor flag, tag;
  bool defined() const { return flag.defined(); }
};
// Throws unless `mirrors` is undefined or fits a segment table `ranges` (2S) as described above.
void check_sgd_mirrors(const SgdMirrors& mirrors, const Tensor& ranges, const std::string& where);
// Throws unless decode_bytes' arguments fit each other (dtypes, shapes; not their device): "<where>: ...".
void check_decode_bytes(const Tensor& bytes, const Tensor& draws, const Tensor& affine, const Tensor& out,
                        const std::string& where);

}  // namespace cnnscale
