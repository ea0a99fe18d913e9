// Launchers for cnnscale's own CUDA kernels: only ops with no cuDNN/cuBLAS call (fill, axpby,
// dropout, SGD, loss, accuracy) and Caffe's ceil-mode pooling. All are asynchronous on `stream`,
// check their launch, and never synchronise with the host.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace cnnscale::cuda {

void launch_fill_f32(float* p, int64_t n, float value, cudaStream_t stream);
void launch_fill_i32(int32_t* p, int64_t n, int32_t value, cudaStream_t stream);
// y = alpha * x + beta * y; beta == 0 ignores y's old contents (BLAS convention).
void launch_axpby(int64_t n, float alpha, const float* x, float beta, float* y, cudaStream_t stream);
// out[i] = in[i] * scale when counter_uniform(seed, rng_stream, i) >= ratio, else 0 (forward and
// backward are the same map: backward applies it to dy).
void launch_dropout(int64_t n, float ratio, float scale, uint64_t seed, uint64_t rng_stream, const float* in,
                    float* out, cudaStream_t stream);
// Caffe SGD: history = momentum * history + lr * (dw + weight_decay * w); w -= history.
void launch_sgd_update(int64_t n, float* w, const float* dw, float* history, float lr, float momentum,
                       float weight_decay, cudaStream_t stream);
// flag[0] = tag if flag[0] == 0 and any x[i] is NaN or +-inf (first tag wins).
void launch_flag_nonfinite(int64_t n, const float* x, int32_t tag, int32_t* flag, cudaStream_t stream);
// loss[0] = -1/N sum_n log(max(prob[n, label[n]], FLT_MIN)); NaN if any label is outside [0, C).
void launch_cross_entropy_loss(const float* prob, const int32_t* labels, int64_t n, int64_t c, float* loss,
                               cudaStream_t stream);
// dx = scale * (prob - onehot(labels)); rows with a label outside [0, C) become NaN.
void launch_softmax_cross_entropy_backward(const float* prob, const int32_t* labels, int64_t n, int64_t c,
                                           float scale, float* dx, cudaStream_t stream);

constexpr int kMaxTopK = 8;
// out[j] = fraction of samples whose label is within the top ks[j] (ties count against: the number
// of other classes scoring >= the label's score must be < k); NaN if any label is outside [0, C).
void launch_accuracy_topk(const float* scores, const int32_t* labels, int64_t n, int64_t c, const int* ks,
                          int num_k, float* out, cudaStream_t stream);

// Caffe's pooling (pooling_layer.cu) on x (N*C planes of H x W) into y (PH x PW per plane).
struct PoolGeometry {
  int64_t planes = 0;  // N * C
  int height = 0, width = 0, pooled_height = 0, pooled_width = 0;
  int kernel_h = 0, kernel_w = 0, stride_h = 0, stride_w = 0, pad_h = 0, pad_w = 0;
};
void launch_caffe_max_pool_forward(const PoolGeometry& g, const float* x, float* y, cudaStream_t stream);
void launch_caffe_avg_pool_forward(const PoolGeometry& g, const float* x, float* y, cudaStream_t stream);
// Routes each dy to the first maximum of its window (Caffe's argmax rule), recomputed from x.
void launch_caffe_max_pool_backward(const PoolGeometry& g, const float* x, const float* y, const float* dy, float* dx,
                                    cudaStream_t stream);
void launch_caffe_avg_pool_backward(const PoolGeometry& g, const float* dy, float* dx, cudaStream_t stream);

}  // namespace cnnscale::cuda
