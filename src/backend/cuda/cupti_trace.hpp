// The kernel trace of a CudaBackend from CUPTI's activity API (cupti_trace.cpp), behind
// CudaBackend::trace_kernels. No CUPTI header here: a build without CUPTI compiles the same
// declaration, which refuses.
#pragma once
#include <memory>

#include "backend/kernel_trace.hpp"

namespace cnnscale {
class CudaBackend;
}  // namespace cnnscale

namespace cnnscale::cuda {

// A tracer of the kernels launched in `backend`'s context until its finish(); ConfigError in a
// build without CUPTI. The backend must outlive it.
std::unique_ptr<KernelTracer> make_cupti_tracer(CudaBackend& backend);

}  // namespace cnnscale::cuda
