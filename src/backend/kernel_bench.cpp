// Names of the kernel benchmarks' formats and passes, and the choice of a backend's benchmark view:
// the one file, beside the backend factory, that knows which implementations were built.
#include "backend/kernel_bench.hpp"

#include "backend/cpu/cpu_kernel_bench.hpp"
#if CNNSCALE_HAVE_CUDA
#include "backend/cuda/cuda_kernel_bench.hpp"
#endif
#include "core/error.hpp"

namespace cnnscale {

std::string kernel_precision_name(KernelPrecision p) {
  switch (p) {
    case KernelPrecision::FP32:
      return "fp32";
    case KernelPrecision::TF32:
      return "tf32";
    case KernelPrecision::BF16:
      return "bf16";
    case KernelPrecision::FP16:
      return "fp16";
    case KernelPrecision::INT8:
      return "int8";
  }
  return "?";
}

KernelPrecision parse_kernel_precision(const std::string& s, const std::string& what) {
  for (KernelPrecision p : {KernelPrecision::FP32, KernelPrecision::TF32, KernelPrecision::BF16, KernelPrecision::FP16,
                            KernelPrecision::INT8})
    if (s == kernel_precision_name(p)) return p;
  throw_config("{} '{}': expected fp32, tf32, bf16, fp16 or int8", what, s);
}

DType kernel_input_dtype(KernelPrecision p) {
  switch (p) {
    case KernelPrecision::BF16:
      return DType::BF16;
    case KernelPrecision::FP16:
      return DType::F16;
    case KernelPrecision::INT8:
      return DType::I8;
    default:
      return DType::F32;
  }
}

DType kernel_output_dtype(KernelPrecision p) {
  return p == KernelPrecision::INT8 ? DType::I32 : kernel_input_dtype(p);
}

double ConvProblem::flops() const {
  return 2.0 * static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(out_h()) *
         static_cast<double>(out_w()) * static_cast<double>(c) * static_cast<double>(r) * static_cast<double>(s);
}

std::string conv_pass_name(ConvPass p) {
  switch (p) {
    case ConvPass::Forward:
      return "fwd";
    case ConvPass::BackwardData:
      return "bwd_data";
    case ConvPass::BackwardFilter:
      return "bwd_filter";
  }
  return "?";
}

ConvPass parse_conv_pass(const std::string& s, const std::string& what) {
  for (ConvPass p : {ConvPass::Forward, ConvPass::BackwardData, ConvPass::BackwardFilter})
    if (s == conv_pass_name(p)) return p;
  throw_config("{} '{}': expected fwd, bwd_data or bwd_filter", what, s);
}

std::unique_ptr<KernelCase> KernelBench::spmm(const SparseProblem&, const SparseInputs&) {
  throw_config("bench spmm times cuSPARSE: it runs on a GPU (--device gpu)");
}

std::string rnn_cell_name(RnnCell c) {
  switch (c) {
    case RnnCell::Vanilla:
      return "vanilla";
    case RnnCell::Lstm:
      return "lstm";
    case RnnCell::Gru:
      return "gru";
  }
  return "?";
}

RnnCell parse_rnn_cell(const std::string& s, const std::string& what) {
  for (RnnCell c : {RnnCell::Vanilla, RnnCell::Lstm, RnnCell::Gru})
    if (s == rnn_cell_name(c)) return c;
  throw_config("{}: cell '{}': expected vanilla, lstm or gru", what, s);
}

double RnnProblem::flops(bool training) const {
  const double forward = 2.0 * static_cast<double>(gates()) * static_cast<double>(hidden) * 2.0 *
                         static_cast<double>(hidden) * static_cast<double>(batch) * static_cast<double>(time_steps);
  return training ? 3.0 * forward : forward;
}

std::string rnn_pass_name(RnnPass p) {
  return p == RnnPass::Inference ? "inference" : "training";
}

RnnPass parse_rnn_pass(const std::string& s, const std::string& what) {
  for (RnnPass p : {RnnPass::Inference, RnnPass::Training})
    if (s == rnn_pass_name(p)) return p;
  throw_config("{} '{}': expected inference or training", what, s);
}

std::unique_ptr<KernelCase> KernelBench::rnn(const RnnProblem&, RnnPass, KernelPrecision, const RnnInputs&) {
  throw_config("bench rnn times cuDNN's RNN API: it runs on a GPU (--device gpu)");
}

std::unique_ptr<KernelBench> make_kernel_bench(Backend& backend) {
  if (backend.name() == "cpu") return make_cpu_kernel_bench(backend);
#if CNNSCALE_HAVE_CUDA
  if (backend.name() == "cuda") return make_cuda_kernel_bench(backend);
#endif
  throw_runtime("kernel benchmarks: no benchmark view of the {} backend", backend.name());
}

}  // namespace cnnscale
