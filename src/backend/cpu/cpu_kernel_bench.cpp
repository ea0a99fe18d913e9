// CPU kernel benchmark cases: one variant each, the fp32 reference implementation the rest of the
// program runs (OpenBLAS sgemm; im2col + sgemm convolution), timed by the harness with host clocks.
#include "backend/cpu/cpu_kernel_bench.hpp"

#include "core/error.hpp"

namespace cnnscale {

namespace {

const char* const kOpenBlas = "OpenBLAS";

void require_fp32(KernelPrecision precision, const std::string& what) {
  if (precision != KernelPrecision::FP32)
    throw_config("{} in {}: the CPU backend benchmarks fp32 only (its reference format)", what,
                 kernel_precision_name(precision));
}

Tensor upload_floats(Backend& b, const Shape& shape, const std::vector<float>& values) {
  Tensor t = b.alloc(shape, DType::F32);
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw_runtime("kernel bench: {} input values for a tensor of {}", values.size(), t.numel());
  b.upload(values.data(), t);
  return t;
}

class CpuGemmCase final : public KernelCase {
 public:
  CpuGemmCase(Backend& b, const GemmProblem& p, const KernelInputs& in) : b_(b), p_(p) {
    a_ = upload_floats(b, Shape({p.m * p.k}), in.first);
    b_mat_ = upload_floats(b, Shape({p.k * p.n}), in.second);
    c_ = b.alloc(Shape({p.m * p.n}), DType::F32);
    variants_.push_back({kOpenBlas, "cblas_sgemm", true, "", 0, {}});
  }
  const std::vector<KernelVariant>& variants() const override { return variants_; }
  void run(size_t) override {
    // Column-major C (m x n) = op(A) op(B) is row-major C^T (n x m) = op(B)^T op(A)^T: the same call
    // with the operands and their transposes swapped.
    b_.gemm(p_.trans_b, p_.trans_a, p_.n, p_.m, p_.k, 1.0f, b_mat_.f32(), a_.f32(), 0.0f, c_.f32());
  }
  std::vector<float> output(size_t v) override {
    run(v);
    std::vector<float> out(static_cast<size_t>(c_.numel()));
    b_.download(c_, out.data());
    return out;
  }
  int64_t operand_bytes() const override { return static_cast<int64_t>(a_.bytes() + b_mat_.bytes() + c_.bytes()); }

 private:
  Backend& b_;
  GemmProblem p_;
  Tensor a_, b_mat_, c_;
  std::vector<KernelVariant> variants_;
};

class CpuConvCase final : public KernelCase {
 public:
  CpuConvCase(Backend& b, const ConvProblem& p, ConvPass pass, const KernelInputs& in) : b_(b), pass_(pass) {
    params_.kernel_h = static_cast<int>(p.r);
    params_.kernel_w = static_cast<int>(p.s);
    params_.stride_h = static_cast<int>(p.stride_h);
    params_.stride_w = static_cast<int>(p.stride_w);
    params_.pad_h = static_cast<int>(p.pad_h);
    params_.pad_w = static_cast<int>(p.pad_w);
    switch (pass) {
      case ConvPass::Forward:
        x_ = upload_floats(b, p.x_shape(), in.first);
        w_ = upload_floats(b, p.w_shape(), in.second);
        y_ = b.alloc(p.y_shape(), DType::F32);
        break;
      case ConvPass::BackwardData:
        y_ = upload_floats(b, p.y_shape(), in.first);
        w_ = upload_floats(b, p.w_shape(), in.second);
        x_ = b.alloc(p.x_shape(), DType::F32);
        break;
      case ConvPass::BackwardFilter:
        x_ = upload_floats(b, p.x_shape(), in.first);
        y_ = upload_floats(b, p.y_shape(), in.second);
        w_ = b.alloc(p.w_shape(), DType::F32);
        break;
    }
    variants_.push_back({kOpenBlas, "im2col + cblas_sgemm", true, "", 0, {}});
  }
  const std::vector<KernelVariant>& variants() const override { return variants_; }
  void run(size_t) override {
    switch (pass_) {
      case ConvPass::Forward:
        b_.conv_forward(params_, x_, w_, y_);
        break;
      case ConvPass::BackwardData:
        b_.conv_backward_data(params_, w_, y_, x_);
        break;
      case ConvPass::BackwardFilter:
        b_.conv_backward_filter(params_, x_, y_, w_);
        break;
    }
  }
  std::vector<float> output(size_t v) override {
    const Tensor& out = pass_ == ConvPass::Forward ? y_ : pass_ == ConvPass::BackwardData ? x_ : w_;
    // backward-filter accumulates into dw in some backends' conventions: start each checked call at 0.
    b_.fill(out, 0.0f);
    run(v);
    std::vector<float> host(static_cast<size_t>(out.numel()));
    b_.download(out, host.data());
    return host;
  }
  int64_t operand_bytes() const override { return static_cast<int64_t>(x_.bytes() + w_.bytes() + y_.bytes()); }

 private:
  Backend& b_;
  ConvPass pass_;
  ConvParams params_;
  Tensor x_, w_, y_;
  std::vector<KernelVariant> variants_;
};

class CpuKernelBench final : public KernelBench {
 public:
  explicit CpuKernelBench(Backend& b) : b_(b) {}
  std::unique_ptr<KernelCase> gemm(const GemmProblem& p, KernelPrecision precision,
                                   const KernelInputs& inputs) override {
    require_fp32(precision, "bench gemm");
    return std::make_unique<CpuGemmCase>(b_, p, inputs);
  }
  std::unique_ptr<KernelCase> conv(const ConvProblem& p, ConvPass pass, KernelPrecision precision, Layout layout,
                                   const KernelInputs& inputs) override {
    require_fp32(precision, "bench conv");
    if (layout != Layout::NCHW)
      throw_config("bench conv --layout nhwc runs on a GPU only: the CPU backend computes in NCHW");
    return std::make_unique<CpuConvCase>(b_, p, pass, inputs);
  }

 private:
  Backend& b_;
};

}  // namespace

std::unique_ptr<KernelBench> make_cpu_kernel_bench(Backend& backend) {
  return std::make_unique<CpuKernelBench>(backend);
}

}  // namespace cnnscale
