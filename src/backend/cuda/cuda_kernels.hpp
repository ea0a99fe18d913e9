// Launchers for cnnscale's own CUDA kernels: only ops with no cuDNN/cuBLAS call (fill, axpby,
// dropout, SGD, loss, accuracy) and Caffe's ceil-mode pooling. All are asynchronous on `stream`,
// check their launch, and never synchronise with the host.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.hpp"

namespace cnnscale::cuda {

// Throws the RuntimeError for a dtype no kernel exists for (defined in host code: nvcc cannot
// compile the formatting library).
[[noreturn]] void throw_no_kernel(const char* op, DType t);
// Throws a RuntimeError "<op> on cuda: <why>" (host code, as above).
[[noreturn]] void throw_kernel_unfit(const char* op, const char* why);

void launch_fill_f32(float* p, int64_t n, float value, cudaStream_t stream);
void launch_fill_i32(int32_t* p, int64_t n, int32_t value, cudaStream_t stream);
// Kernels taking a DType run on f32, bf16 or f16 storage (computing in float) and throw for others.
void launch_fill_float(DType t, void* p, int64_t n, float value, cudaStream_t stream);
// A 4-d tensor's reordering between NCHW and NHWC: c channels, hw pixels per sample.
struct Permute {
  int64_t c = 1, hw = 1;
  bool to_nhwc = true;  // src NCHW, dst NHWC (false: the reverse)
};
// dst[i] = scale * src[i], converted (rounded to nearest even) from src_t to dst_t, and reordered
// when `permute` is given; scale_at != null: the scale is read there on the device.
void launch_convert(int64_t n, DType src_t, const void* src, DType dst_t, void* dst, float scale,
                    cudaStream_t stream, const Permute* permute = nullptr, const float* scale_at = nullptr);
// Backend::convert_segments: dst[i] = src[i] converted for i in each [ranges[2k], ranges[2k+1]),
// k < segments (f32 to `dst_t`, or any float pair); the elements between them untouched.
void launch_convert_segments(DType src_t, const void* src, DType dst_t, void* dst, const int32_t* ranges, int segments,
                             cudaStream_t stream);
// Backend::decode_bytes: u8 samples (n, c, h, w) to f32 NCHW `out`; affine = c scales then c
// offsets, then (`negates`) c flags of the channels a mirror negates; draws (n x kDrawInts,
// core/byte_input.hpp) or null.
void launch_decode_bytes(int64_t n, int64_t c, int64_t h, int64_t w, const uint8_t* bytes, const int32_t* draws,
                         const float* affine, bool negates, float* out, cudaStream_t stream);
// y (batch, c, inner) += bias[c]; dbias[c] = sum of dy over batch and inner (fp32 accumulation).
// For 16-bit and channels-last tensors; f32 NCHW bias ops go through cuDNN.
// channels_last: (batch, inner, c) in memory.
void launch_bias_add(DType t, int64_t batch, int64_t c, int64_t inner, bool channels_last, const void* bias, void* y,
                     cudaStream_t stream);
// Channels-last dbias reduces in two deterministic passes through `partial`, which must hold
// bias_backward_partials(batch * inner) * c floats (unused otherwise; may be null then).
int64_t bias_backward_partials(int64_t rows);
void launch_bias_backward(DType t, int64_t batch, int64_t c, int64_t inner, bool channels_last, const void* dy,
                          void* dbias, float* partial, cudaStream_t stream);
// Rows of 2- or 4-byte elements of type t: dst row r = src row r's first min(src_cols, dst_cols)
// elements, then zeros up to dst_cols. Pads channels-last tensors to more channels, or cuts them back.
void launch_copy_rows(DType t, int64_t rows, const void* src, int64_t src_cols, void* dst,
                      int64_t dst_cols, cudaStream_t stream);
// The lowered (im2col) form of a channels-last convolution's input, for computing it as one GEMM:
// col (n*oh*ow, cols) row-major, row (b, y, x) holding the receptive field of output pixel (y, x)
// of sample b in (r, s, c) order, which is a KRSC filter's row order; zeros where the field lies in
// the padding and in the columns from r*s*c up to `cols` (a row length GEMMs can align).
struct Im2colShape {
  int64_t n = 1, h = 1, w = 1, c = 1;  // x (n, h, w, c)
  int r = 1, s = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t oh = 1, ow = 1, cols = 1;
};
// Fastest: the tiled kernel (16-byte stores from a staged patch) where rows are 16-byte aligned
// and the patch fits, else the per-row kernel. Tests name one to compare them.
enum class Im2colKernel { Fastest, PerRow, Tiled };
void launch_im2col_nhwc(DType t, const Im2colShape& shape, const void* x, void* col, cudaStream_t stream,
                        Im2colKernel kernel = Im2colKernel::Fastest);
// Cross-channel LRN of `rows` rows of `channels` elements (channels-last pixels): backend.hpp's
// formula with Caffe's window, fp32 math (cuda_lrn_kernels.cu).
void launch_lrn_rows_forward(DType t, int64_t rows, int64_t channels, int size, float alpha, float beta, float k,
                             const void* x, void* y, cudaStream_t stream);
void launch_lrn_rows_backward(DType t, int64_t rows, int64_t channels, int size, float alpha, float beta, float k,
                              const void* x, const void* y, const void* dy, void* dx, cudaStream_t stream);
// Training batch norm over `rows` rows of `c` channels (channels-last x), cnnscale's own kernels
// (cuda_bn_kernels.cu), sized to `sms` SMs; statistics, scale and shift are f32, as with cuDNN.
// Forward: batch statistics, save_mean, save_inv_std = 1/sqrt(biased var + eps), the running
// statistics updated as cuDNN does (momentum, unbiased variance), y = ReLU?(x_hat scale + shift [+ z]);
// z may be null. Backward: y is the forward's output where a ReLU was fused (dy is gated by y > 0),
// else null; dx, dscale and dshift are overwritten, and dz (may be null) receives the gated dy.
// Both need bn_rows_workspace_bytes(rows, c, sms) bytes of `workspace`, and rows >= 2 (the unbiased
// variance). In place allowed: y may be x or z; dx may be x, dy or y, dz may be dy (not dx).
int64_t bn_rows_workspace_bytes(int64_t rows, int64_t c, int sms);
void launch_bn_rows_forward_train(DType t, int64_t rows, int64_t c, int sms, const void* x, const void* z,
                                  const float* scale, const float* shift, float momentum, double eps,
                                  float* running_mean, float* running_var, float* save_mean, float* save_inv_std,
                                  bool relu, void* y, void* workspace, cudaStream_t stream);
void launch_bn_rows_backward(DType t, int64_t rows, int64_t c, int sms, const void* x, const void* dy, const void* y,
                             const float* scale, const float* save_mean, const float* save_inv_std, void* dx,
                             float* dscale, float* dshift, void* dz, void* workspace, cudaStream_t stream);
// y = alpha * x + beta * y; beta == 0 ignores y's old contents (BLAS convention).
void launch_axpby(DType t, int64_t n, float alpha, const void* x, float beta, void* y, cudaStream_t stream);
// y = x > 0 ? x : 0; dx = y > 0 ? dy : 0 (in place allowed: x == y, dy == dx).
// q (rows, cq) int8 from x (rows, c) of storage t, channels c .. cq - 1 zero (cuda_int8_kernels.cu).
void launch_quantize_int8(DType t, int64_t rows, int64_t c, int64_t cq, const void* x, void* q, float scale,
                          cudaStream_t stream);
// y (n, k) of storage t = acc (n, kp) int32 * scale (k) + bias (k), then ReLU where asked: an int8
// fully connected layer's epilogue (cuda_int8_kernels.cu).
void launch_int8_linear_epilogue(DType t, int64_t n, int64_t k, int64_t kp, const int32_t* acc, const float* scale,
                                 const float* bias, bool relu, void* y, cudaStream_t stream);
void launch_relu_forward(DType t, int64_t n, const void* x, void* y, cudaStream_t stream);
void launch_relu_backward(DType t, int64_t n, const void* y, const void* dy, void* dx, cudaStream_t stream);
// out[i] = in[i] * scale when counter_uniform(seed, rng_stream, i) >= ratio, else 0 (forward and
// backward are the same map: backward applies it to dy). iteration != null: rng_stream is
// dropout_stream(*iteration, layer), read on the device (a captured step's own masks).
void launch_dropout(DType t, int64_t n, float ratio, float scale, uint64_t seed, uint64_t rng_stream,
                    const int32_t* iteration, uint64_t layer, const void* in, void* out, cudaStream_t stream);
// Caffe SGD: history = momentum * history + lr * (dw + weight_decay * w); w -= history.
void launch_sgd_update(int64_t n, float* w, const float* dw, float* history, float lr, float momentum,
                       float weight_decay, cudaStream_t stream);
// The SGD rule over segments [ranges[2k], ranges[2k+1]) of flat buffers, lr and weight decay times
// mults[2k] and mults[2k+1]; elements outside every segment are untouched (Backend::sgd_update_segments).
// lr_at != null: lr is read there on the device; skip_at != null and non-zero there: no change.
// mirror.data != null: each updated element is also written to its compute copy (SgdMirrors);
// mirror.grads != null: a mirrored element's gradient is read from the copies' gradients instead
// of dw. flag != null: *tag_at goes to *flag (if 0) when a gradient read is non-finite (GradCheck).
struct SegmentMirror {
  void* data = nullptr;
  DType dtype = DType::F32;
  const int32_t* map = nullptr;  // (4S)
  const void* grads = nullptr;   // of dtype, beside data
};
void launch_sgd_segments(int64_t n, float* w, const float* dw, float* history, const int32_t* ranges,
                         const float* mults, int segments, float lr, const float* lr_at, float momentum,
                         float weight_decay, cudaStream_t stream, const int32_t* skip_at = nullptr,
                         const SegmentMirror& mirror = SegmentMirror(), int32_t* flag = nullptr,
                         const int32_t* tag_at = nullptr);
// axpby on f32 scalars unless skip != null and skip[0] != 0 (one thread).
void launch_axpby_unless(float alpha, const float* x, float beta, float* y, const int32_t* skip, cudaStream_t stream);
// loss_scale_rule.hpp's step on device values (one thread): scale (2) f32, state (3) i32.
void launch_update_loss_scale(const int32_t* found_inf, float* scale, int32_t* state, const int32_t* tag,
                              int32_t* nonfinite, int64_t growth_interval, float max_scale, cudaStream_t stream);
// flag[0] = tag if flag[0] == 0 and any x[i] is NaN or +-inf (first tag wins); tag_at != null: the
// tag is read there on the device.
void launch_flag_nonfinite(int64_t n, const float* x, int32_t tag, const int32_t* tag_at, int32_t* flag,
                           cudaStream_t stream);
// loss[0] = -1/N sum_n log(max(prob[n, label[n]], FLT_MIN)); NaN if any label is outside [0, C).
void launch_cross_entropy_loss(const float* prob, const int32_t* labels, int64_t n, int64_t c, float* loss,
                               cudaStream_t stream);
// dx = scale * (prob - onehot(labels)); rows with a label outside [0, C) become NaN.
void launch_softmax_cross_entropy_backward(const float* prob, const int32_t* labels, int64_t n, int64_t c,
                                           float scale, float* dx, cudaStream_t stream);

constexpr int kMaxTopK = 8;
// out[j] = fraction of samples whose label is within the top ks[j] (ties count against: the number
// of other classes scoring >= the label's score must be < k); NaN if any label is outside [0, C).
void launch_accuracy_topk(DType t, const void* scores, const int32_t* labels, int64_t n, int64_t c, const int* ks,
                          int num_k, float* out, cudaStream_t stream);

// Caffe's pooling (pooling_layer.cu) on x (N*C planes of H x W) into y (PH x PW per plane).
struct PoolGeometry {
  int64_t planes = 0;  // N * C
  int channels = 1;    // C
  bool channels_last = false;  // x and y (and dy, dx) are NHWC
  int height = 0, width = 0, pooled_height = 0, pooled_width = 0;
  int kernel_h = 0, kernel_w = 0, stride_h = 0, stride_w = 0, pad_h = 0, pad_w = 0;
};
void launch_caffe_max_pool_forward(const PoolGeometry& g, DType t, const void* x, void* y, cudaStream_t stream);
void launch_caffe_avg_pool_forward(const PoolGeometry& g, DType t, const void* x, void* y, cudaStream_t stream);
// Max pooling of channels-last x in 16-byte packs of channels; false (nothing launched) when the
// channel count or an address does not allow packs. window_argmax (null: none): one byte per
// element of y, where the forward also stores each window's first maximum as the backward's gather
// reads it; only for shapes where max_pool_gathers_argmax.
bool launch_max_pool_forward_nhwc(const PoolGeometry& g, DType t, const void* x, void* y, cudaStream_t stream,
                                  uint8_t* window_argmax = nullptr);
// Whether the channels-last max backward of g runs as a gather over window argmax bytes (overlapping
// windows of at most 255 pixels, channels in whole 16-byte packs), given 16-byte aligned operands.
bool max_pool_gathers_argmax(const PoolGeometry& g, DType t);
// Routes each dy to the first maximum of its window (Caffe's argmax rule), found from x, or read
// from the bytes the forward saved (argmax_saved).
// window_argmax: one byte per element of y, used where max_pool_gathers_argmax (each window's
// argmax found once instead of once per covering input; null: not used); argmax_saved: it already
// holds what the forward of the same x stored there, so only the gather runs.
void launch_caffe_max_pool_backward(const PoolGeometry& g, DType t, const void* x, const void* y, const void* dy,
                                    void* dx, cudaStream_t stream, uint8_t* window_argmax = nullptr,
                                    bool argmax_saved = false);
void launch_caffe_avg_pool_backward(const PoolGeometry& g, DType t, const void* dy, void* dx, cudaStream_t stream);

}  // namespace cnnscale::cuda
