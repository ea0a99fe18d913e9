// The CPU backend's benchmark view: GEMM through OpenBLAS (cblas_sgemm, as Backend::gemm) and
// convolution as the backend computes it (im2col/col2im + OpenBLAS), fp32 only.
#pragma once
#include <memory>

#include "backend/kernel_bench.hpp"

namespace cnnscale {

std::unique_ptr<KernelBench> make_cpu_kernel_bench(Backend& backend);

}  // namespace cnnscale
