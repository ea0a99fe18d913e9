// The CUDA backend's timing point: one timing-enabled event. Shared by the stream's own records
// (cuda_backend.cpp) and the records between the graphs of captured work (cuda_graph.cpp).
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <utility>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_context.hpp"
#include "core/error.hpp"

namespace cnnscale::cuda {

// Creating and destroying events never synchronises (a destroyed event still pending is released
// by the runtime when it completes). Holds the device stream so the event outlives no context it
// belongs to.
struct CudaTimingEvent final : TimingEvent {
  std::shared_ptr<const void> owner;  // keeps the backend's DeviceStream (and so its context) alive
  std::shared_ptr<const DeviceContext> ctx;
  cudaEvent_t event = nullptr;
  ~CudaTimingEvent() override {
    if (!event) return;
    ctx->make_current_noexcept();
    cudaEventDestroy(event);
  }
};

// A new (not yet recorded) timing-enabled event of `ctx`, kept alive with `owner`.
inline std::shared_ptr<CudaTimingEvent> make_timing_event(std::shared_ptr<const void> owner,
                                                          std::shared_ptr<const DeviceContext> ctx) {
  ctx->make_current();
  auto e = std::make_shared<CudaTimingEvent>();
  e->owner = std::move(owner);
  e->ctx = std::move(ctx);
  CUDA_CHECK(cudaEventCreate(&e->event));  // default flags: timing enabled, spin on sync
  return e;
}

inline const CudaTimingEvent& as_cuda_event(const TimingEvent& e) {
  const auto* c = dynamic_cast<const CudaTimingEvent*>(&e);
  CNNSCALE_CHECK(c != nullptr, "timing event of another backend given to the cuda backend");
  return *c;
}

}  // namespace cnnscale::cuda
