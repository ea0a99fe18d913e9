// The CUDA kernel benchmark's RNN case: one layer through cuDNN's RNN API (v8 descriptors), each
// algorithm a variant.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_check_sparse.hpp"
#include "backend/cuda/cuda_kernel_bench_cases.hpp"
#include "backend/cuda/cudnn_descriptors.hpp"
#include "core/half.hpp"

namespace cnnscale::cuda_bench {
namespace {

using RnnDesc = cuda::CudnnDescriptor<cudnnRNNDescriptor_t, cudnnCreateRNNDescriptor, cudnnDestroyRNNDescriptor>;
using RnnDataDesc =
    cuda::CudnnDescriptor<cudnnRNNDataDescriptor_t, cudnnCreateRNNDataDescriptor, cudnnDestroyRNNDataDescriptor>;
using DropoutDesc =
    cuda::CudnnDescriptor<cudnnDropoutDescriptor_t, cudnnCreateDropoutDescriptor, cudnnDestroyDropoutDescriptor>;

const char* rnn_algo_name(int a) {
  switch (a) {
    case CUDNN_RNN_ALGO_STANDARD:
      return "STANDARD";
    case CUDNN_RNN_ALGO_PERSIST_STATIC:
      return "PERSIST_STATIC";
    case CUDNN_RNN_ALGO_PERSIST_DYNAMIC:
      return "PERSIST_DYNAMIC";
    case CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H:
      return "PERSIST_STATIC_SMALL_H";
  }
  return "?";
}

class CudaRnnCase final : public KernelCase {
 public:
  CudaRnnCase(CudaBackend& b, const RnnProblem& p, RnnPass pass, KernelPrecision precision, const RnnInputs& in,
              const std::function<bool()>& stop_requested)
      : b_(b), dnn_(b.cudnn_handle()), p_(p), pass_(pass), dtype_(kernel_input_dtype(precision)) {
    b.context()->make_current();
    const char* op = "bench rnn";
    const int h = cuda::to_int_dim(p.hidden, op), n = cuda::to_int_dim(p.batch, op);
    const int t = cuda::to_int_dim(p.time_steps, op);
    const cudnnDataType_t type = cuda::cudnn_type(dtype_);
    // No dropout (one layer: cuDNN applies it between layers only), but the descriptor must exist.
    size_t state_bytes = 0;
    CUDNN_CHECK(cudnnDropoutGetStatesSize(dnn_, &state_bytes));
    dropout_states_ = b.alloc(Shape({static_cast<int64_t>(std::max<size_t>(state_bytes, 1))}), DType::I8);
    CUDNN_CHECK(cudnnSetDropoutDescriptor(dropout_, dnn_, 0.0f, dropout_states_.raw(), state_bytes, 1));
    const std::vector<int32_t> lengths(static_cast<size_t>(n), t);
    std::vector<char> length_bytes(lengths.size() * sizeof(int32_t));
    std::memcpy(length_bytes.data(), lengths.data(), length_bytes.size());
    lengths_ = device_bytes(b, length_bytes);
    for (cudnnRNNDataDescriptor_t d : {xd_.get(), yd_.get()})
      CUDNN_CHECK(cudnnSetRNNDataDescriptor(d, type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, t, n, h, lengths.data(),
                                            nullptr));
    const int dims[3] = {1, n, h}, strides[3] = {n * h, h, 1};
    CUDNN_CHECK(cudnnSetTensorNdDescriptor(hd_, type, 3, dims, strides));
    const std::vector<char> x_bytes = encode(in.x, dtype_, {});
    x_ = device_bytes(b, x_bytes);
    dy_ = device_bytes(b, x_bytes);  // any gradient of y's shape: x's values serve
    y_ = b.alloc(Shape({static_cast<int64_t>(in.x.size() * dtype_size(dtype_))}), DType::I8);
    dx_ = b.alloc(Shape({static_cast<int64_t>(in.x.size() * dtype_size(dtype_))}), DType::I8);
    // fp32: FMA math only (no TF32 behind the name); tf32: cuDNN's default math, which lets float
    // RNNs use TF32 tensor cores (ALLOW_CONVERSION would let them down-convert to fp16); 16-bit:
    // tensor cores, fp32 arithmetic inside the cell.
    const cudnnMathType_t math = precision == KernelPrecision::FP32   ? CUDNN_FMA_MATH
                                 : precision == KernelPrecision::TF32 ? CUDNN_DEFAULT_MATH
                                                                      : CUDNN_TENSOR_OP_MATH;
    // Linear layer g is gate g's input matrix, gates + g its recurrent one (cuDNN's order: lstm input,
    // forget, cell, output; gru reset, update, new): encoded once, copied into every algorithm's
    // weight space; the copies are stream-ordered and the bytes live until the synchronise below.
    const size_t gates = static_cast<size_t>(p.gates());
    std::vector<std::vector<char>> matrices, biases;
    for (size_t id = 0; id < 2 * gates; ++id) {
      matrices.push_back(encode(id < gates ? in.w[id] : in.r[id - gates], dtype_, {}));
      biases.push_back(encode(id < gates ? in.bw[id] : in.br[id - gates], dtype_, {}));
    }
    for (int a = 0; a < static_cast<int>(CUDNN_RNN_ALGO_COUNT); ++a) {
      if (stop_requested && stop_requested()) {
        CUDA_CHECK(cudaStreamSynchronize(b_.stream()));  // the weight copies read host bytes
        throw BenchStopped{};
      }
      const auto t0 = std::chrono::steady_clock::now();
      add_algorithm(a, type, math, matrices, biases);
      // The trial call included: a first call may load or tune kernels.
      CUDA_CHECK(cudaStreamSynchronize(b_.stream()));
      variants_.back().setup_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  const std::vector<KernelVariant>& variants() const override { return variants_; }
  void run(size_t v) override { CUDNN_CHECK(call(*algos_[v])); }
  std::vector<float> output(size_t v) override {
    CUDA_CHECK(cudaMemsetAsync(y_.raw(), 0, y_.bytes(), b_.stream()));
    run(v);
    std::vector<char> host(y_.bytes());
    b_.download(y_, host.data());
    return decode(host, dtype_, {});
  }
  // x, y and the weights (training: and their gradients); each algorithm's work and reserve space
  // is its workspace.
  int64_t operand_bytes() const override {
    const size_t io = x_.bytes() + y_.bytes(), weights = weight_bytes_;
    return static_cast<int64_t>(pass_ == RnnPass::Training ? 2 * (io + weights) : io + weights);
  }

 private:
  struct Algorithm {
    RnnDesc desc;
    Tensor weights, dweights, work, reserve;
    size_t weight_bytes = 0, work_bytes = 0, reserve_bytes = 0;
  };

  const int32_t* lengths() const { return static_cast<const int32_t*>(lengths_.raw()); }
  cudnnStatus_t call(Algorithm& a) {
    if (pass_ == RnnPass::Inference)
      return cudnnRNNForward(dnn_, a.desc, CUDNN_FWD_MODE_INFERENCE, lengths(), xd_, x_.raw(), yd_, y_.raw(), hd_,
                             nullptr, nullptr, hd_, nullptr, nullptr, a.weight_bytes, a.weights.raw(), a.work_bytes,
                             a.work.raw(), 0, nullptr);
    cudnnStatus_t st = cudnnRNNForward(dnn_, a.desc, CUDNN_FWD_MODE_TRAINING, lengths(), xd_, x_.raw(), yd_, y_.raw(),
                                       hd_, nullptr, nullptr, hd_, nullptr, nullptr, a.weight_bytes, a.weights.raw(),
                                       a.work_bytes, a.work.raw(), a.reserve_bytes, a.reserve.raw());
    if (st != CUDNN_STATUS_SUCCESS) return st;
    st = cudnnRNNBackwardData_v8(dnn_, a.desc, lengths(), yd_, y_.raw(), dy_.raw(), xd_, dx_.raw(), hd_, nullptr,
                                 nullptr, nullptr, hd_, nullptr, nullptr, nullptr, a.weight_bytes, a.weights.raw(),
                                 a.work_bytes, a.work.raw(), a.reserve_bytes, a.reserve.raw());
    if (st != CUDNN_STATUS_SUCCESS) return st;
    // cuDNN accumulates weight gradients (its only mode): the sums grow over calls, the work does not.
    return cudnnRNNBackwardWeights_v8(dnn_, a.desc, CUDNN_WGRAD_MODE_ADD, lengths(), xd_, x_.raw(), hd_, nullptr, yd_,
                                      y_.raw(), a.weight_bytes, a.dweights.raw(), a.work_bytes, a.work.raw(),
                                      a.reserve_bytes, a.reserve.raw());
  }

  // One algorithm: its descriptor, weight space filled with the inputs' matrices, work and reserve
  // space, and a trial call. Whatever cuDNN refuses on the way makes the variant unsupported with
  // cuDNN's status (the persistent algorithms take only some sizes, formats and batches).
  void add_algorithm(int algo, cudnnDataType_t type, cudnnMathType_t math,
                     const std::vector<std::vector<char>>& matrices, const std::vector<std::vector<char>>& biases) {
    KernelVariant v{"cuDNN", rnn_algo_name(algo), true, "", 0, {}};
    auto a = std::make_unique<Algorithm>();
    const int h = static_cast<int>(p_.hidden);
    const cudnnRNNMode_t mode = p_.cell == RnnCell::Vanilla ? CUDNN_RNN_RELU
                                : p_.cell == RnnCell::Lstm  ? CUDNN_LSTM
                                                            : CUDNN_GRU;
    auto refuse = [&](cudnnStatus_t st, const char* step) {
      v.supported = false;
      v.status = fmt::format("{} ({})", cudnnGetErrorString(st), step);
      variants_.push_back(v);
      algos_.push_back(nullptr);
    };
    cudnnStatus_t st = cudnnSetRNNDescriptor_v8(a->desc, static_cast<cudnnRNNAlgo_t>(algo), mode, CUDNN_RNN_DOUBLE_BIAS,
                                                CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, type, CUDNN_DATA_FLOAT, math,
                                                h, h, h, 1, dropout_, CUDNN_RNN_PADDED_IO_DISABLED);
    if (st != CUDNN_STATUS_SUCCESS) return refuse(st, "descriptor");
    if (algo == CUDNN_RNN_ALGO_PERSIST_DYNAMIC) {
      st = cudnnBuildRNNDynamic(dnn_, a->desc, static_cast<int>(p_.batch));
      if (st != CUDNN_STATUS_SUCCESS) return refuse(st, "build");
    }
    st = cudnnGetRNNWeightSpaceSize(dnn_, a->desc, &a->weight_bytes);
    if (st != CUDNN_STATUS_SUCCESS) return refuse(st, "weight space");
    st = cudnnGetRNNTempSpaceSizes(dnn_, a->desc,
                                   pass_ == RnnPass::Inference ? CUDNN_FWD_MODE_INFERENCE : CUDNN_FWD_MODE_TRAINING,
                                   xd_, &a->work_bytes, &a->reserve_bytes);
    if (st != CUDNN_STATUS_SUCCESS) return refuse(st, "work space");
    auto bytes = [](size_t n) { return Shape({static_cast<int64_t>(std::max<size_t>(n, 1))}); };
    a->weights = b_.alloc(bytes(a->weight_bytes), DType::I8);
    a->work = b_.alloc(bytes(a->work_bytes), DType::I8);
    if (pass_ == RnnPass::Training) {
      a->reserve = b_.alloc(bytes(a->reserve_bytes), DType::I8);
      a->dweights = b_.alloc(bytes(a->weight_bytes), DType::I8);
      CUDA_CHECK(cudaMemsetAsync(a->dweights.raw(), 0, a->dweights.bytes(), b_.stream()));
    }
    // The matrices and biases where cuDNN keeps them in this algorithm's weight space.
    cuda::TensorDesc md, bd;
    for (size_t id = 0; id < matrices.size(); ++id) {
      void *m = nullptr, *bias = nullptr;
      st = cudnnGetRNNWeightParams(dnn_, a->desc, 0, a->weight_bytes, a->weights.raw(), static_cast<int32_t>(id), md,
                                   &m, bd, &bias);
      if (st != CUDNN_STATUS_SUCCESS) return refuse(st, "weight layout");
      CUDA_CHECK(cudaMemcpyAsync(m, matrices[id].data(), matrices[id].size(), cudaMemcpyHostToDevice, b_.stream()));
      CUDA_CHECK(cudaMemcpyAsync(bias, biases[id].data(), biases[id].size(), cudaMemcpyHostToDevice, b_.stream()));
    }
    weight_bytes_ = std::max(weight_bytes_, a->weight_bytes);
    v.workspace_bytes = static_cast<int64_t>(a->work_bytes + a->reserve_bytes);
    st = call(*a);
    if (st != CUDNN_STATUS_SUCCESS) return refuse(st, "call");
    variants_.push_back(v);
    algos_.push_back(std::move(a));
  }

  CudaBackend& b_;
  cudnnHandle_t dnn_;
  RnnProblem p_;
  RnnPass pass_;
  DType dtype_;
  DropoutDesc dropout_;
  RnnDataDesc xd_, yd_;
  cuda::TensorDesc hd_;
  Tensor dropout_states_, lengths_, x_, y_, dx_, dy_;
  size_t weight_bytes_ = 0;
  std::vector<std::unique_ptr<Algorithm>> algos_;  // null where the variant is unsupported
  std::vector<KernelVariant> variants_;
};

}  // namespace

std::unique_ptr<KernelCase> make_rnn_case(CudaBackend& b, const RnnProblem& p, RnnPass pass, KernelPrecision precision,
                                          const RnnInputs& in, const std::function<bool()>& stop_requested) {
  return std::make_unique<CudaRnnCase>(b, p, pass, precision, in, stop_requested);
}

}  // namespace cnnscale::cuda_bench
