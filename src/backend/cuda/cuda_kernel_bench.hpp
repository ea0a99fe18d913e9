// The CUDA backend's benchmark view: cuBLAS and cuBLASLt GEMMs, every legacy cuDNN convolution
// algorithm of each pass. Declared without CUDA headers for the benchmark factory.
#pragma once
#include <memory>

#include "backend/kernel_bench.hpp"

namespace cnnscale {

// `backend` must be the CUDA backend (name() "cuda").
std::unique_ptr<KernelBench> make_cuda_kernel_bench(Backend& backend);

}  // namespace cnnscale
