// Entry points of the CUDA backend library for the backend factory; plain C++ (no CUDA headers).
#pragma once
#include <memory>

#include "backend/backend.hpp"

namespace cnnscale {

// Any driver/runtime error (no driver, no device) counts as zero devices.
int cuda_backend_device_count();
// Throws RuntimeError if the device does not exist or cannot be initialised.
std::unique_ptr<Backend> make_cuda_backend(int device_index);

}  // namespace cnnscale
