// The CUDA context a CudaBackend works in: the device's primary context, or a green context that
// confines every stream, library handle and kernel of the backend to a partition of the GPU's SMs
// (--sm-counts: unequal GPUs emulated on identical ones; the GPU's own settings are never touched).
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

namespace cnnscale::cuda {

// How the driver lets this device's SMs be partitioned (cuDeviceGetDevResource).
struct SmPartitionRules {
  int device_sms = 0;
  int min_sms = 0;    // smallest partition
  int alignment = 0;  // SMs guaranteed co-scheduled in one GPC; partitions are built from such groups
};
// Throws RuntimeError when the driver has no green contexts (older than CUDA 12.5).
SmPartitionRules sm_partition_rules(int device);

class DeviceContext {
 public:
  // sm_count 0: the whole device through its primary context. sm_count > 0 and below the device's
  // SMs: a green context of at least sm_count SMs (the driver rounds up to its granularity; read
  // granted_sms()). A count equal to the device's SMs is the whole device. ConfigError (one line)
  // for a count above the device's SMs, below the smallest partition, or one that rounds up past
  // the device. Leaves this context current on the calling thread.
  DeviceContext(int device, int sm_count);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  bool partitioned() const { return green_ != nullptr; }
  int requested_sms() const { return requested_sms_; }
  // SMs of the partition as the driver reports them for the created green context; 0 = whole device.
  int granted_sms() const { return granted_sms_; }
  CUgreenCtx green_context() const { return green_; }  // nullptr on the whole device

  // Makes this context current on the calling thread. Every CUDA call of the backend is preceded
  // by it: cudaSetDevice would make the primary context current (the whole GPU), and NCCL calls
  // may leave it current too. A green context may be current to one thread at a time; the backend
  // is used from one thread.
  void make_current() const;
  void make_current_noexcept() const noexcept;  // for destructors; errors ignored
  // After a library call that may switch this thread to the device's primary context (NCCL does):
  // the partition current again. Nothing to do on a whole GPU, whose current device stays set.
  void reclaim() const {
    if (partitioned()) make_current();
  }
  // A non-blocking stream whose kernels run in this context's partition (cuGreenCtxStreamCreate,
  // independent of the thread's current context); an ordinary non-blocking stream otherwise.
  // Lower priority numbers are higher priorities, as for cudaStreamCreateWithPriority.
  cudaStream_t create_stream(int priority = 0) const;

 private:
  int device_ = 0;
  int requested_sms_ = 0;
  int granted_sms_ = 0;
  CUgreenCtx green_ = nullptr;
  CUcontext context_ = nullptr;  // cuCtxFromGreenCtx(green_): the handle cuCtxSetCurrent takes
};

}  // namespace cnnscale::cuda
