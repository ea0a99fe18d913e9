// The CUDA backend's entry points for the backend factory (backend.cpp), which includes no CUDA
// header: device count (0 on any driver/runtime error) and construction of a CudaBackend.
#include "backend/cuda/cuda_entry.hpp"

#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.hpp"

namespace cnnscale {

// A build machine with the toolkit but no driver answers cudaErrorInsufficientDriver (35), not 0
// devices; "no GPU" it is, whatever the error.
int cuda_backend_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // do not leave the error for the next unrelated check to report
    return 0;
  }
  return count;
}

std::unique_ptr<Backend> make_cuda_backend(int device_index) {
  // CudaBackend's constructor checks the index against the device count and says what it found.
  return std::make_unique<CudaBackend>(device_index);
}

}  // namespace cnnscale
