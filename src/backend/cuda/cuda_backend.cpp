// CudaBackend lifetime, device description, memory (stream-ordered allocator, pinned host
// buffers), transfers, fill/copy and the shared device workspace.
#include "backend/cuda/cuda_backend.hpp"

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_op_checks.hpp"
#include "backend/cuda/cuda_timing_event.hpp"

namespace cnnscale {

// The compute stream outlives the backend while any tensor it allocated is alive: each
// allocation's deleter frees in stream order on it, so tensors may be dropped in any order. It
// holds the context, so a green context goes only after its stream (and every tensor) has.
struct CudaBackend::DeviceStream {
  std::shared_ptr<const cuda::DeviceContext> ctx;
  cudaStream_t stream = nullptr;
  ~DeviceStream() {
    if (!stream) return;
    // Destructors cannot throw; at process exit the runtime may already be unloading.
    ctx->make_current_noexcept();
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
  void free(void* p) const {
    if (!p) return;
    ctx->make_current_noexcept();
    cudaFreeAsync(p, stream);
  }
};

namespace {

// Runs first (it initialises device_, the first member), so a missing device is reported as such
// before any cuDNN/cuBLAS object is created.
int checked_device(int device_index) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw_runtime("gpu:{}: no usable CUDA device (cudaGetDeviceCount: {}: {})", device_index, cudaGetErrorName(e),
                  cudaGetErrorString(e));
  }
  if (device_index < 0 || device_index >= count)
    throw_runtime("gpu:{}: no such CUDA device: {} visible (indices 0..{}; CUDA_VISIBLE_DEVICES may hide others)",
                  device_index, count, count - 1);
  return device_index;
}

}  // namespace

// The context comes first (member order): with a partition, every stream, handle and allocation
// below is made with its green context current, so nothing of this backend runs outside it.
CudaBackend::CudaBackend(int device_index, CudaBackendOptions options)
    : device_(checked_device(device_index)),
      options_(options),
      ctx_(std::make_shared<cuda::DeviceContext>(device_, options.sm_count)) {
  activate();
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  device_name_ = prop.name;
  sm_count_ = prop.multiProcessorCount;
  total_memory_ = prop.totalGlobalMem;
  cc_major_ = prop.major;
  cc_minor_ = prop.minor;
  int pools = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device_));
  if (!pools) throw_runtime("gpu:{} ({}): the CUDA backend needs stream-ordered allocation (memory pools)", device_,
                            device_name_);
  // Keep freed blocks in the pool instead of returning them to the driver at every sync: the
  // pool then behaves like a caching allocator and steady-state steps never call into the driver.
  cudaMemPool_t pool = nullptr;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
  uint64_t keep_all = UINT64_MAX;
  CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));

  auto ds = std::make_shared<DeviceStream>();
  ds->ctx = ctx_;
  ds->stream = ctx_->create_stream();  // non-blocking, in the partition if there is one
  ds_ = std::move(ds);
  activate();
  try {
    CUDNN_CHECK(cudnnCreate(&cudnn_));
    CUDNN_CHECK(cudnnSetStream(cudnn_, ds_->stream));
    CUBLAS_CHECK(cublasCreate(&cublas_));
    CUBLAS_CHECK(cublasSetStream(cublas_, ds_->stream));
    // CUBLAS_DEFAULT_MATH never uses TF32 for fp32 GEMMs (that takes CUBLAS_TF32_TENSOR_OP_MATH or a
    // *_FAST_TF32 compute type); it still allows the fastest exact-fp32 kernels, unlike
    // CUBLAS_PEDANTIC_MATH, which the study has no reason to pay for.
    CUBLAS_CHECK(cublasSetMathMode(cublas_, options_.allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    norm_ = std::make_unique<cuda::Normalization>(*this);
  } catch (...) {
    if (cublas_) cublasDestroy(cublas_);
    if (cudnn_) cudnnDestroy(cudnn_);
    throw;
  }
}

CudaBackend::~CudaBackend() {
  ctx_->make_current_noexcept();
  if (ds_ && ds_->stream) cudaStreamSynchronize(ds_->stream);
  conv_.reset();    // its plans and kept buffers, before the handles and the workspace
  linear_.reset();  // its plans, then its handle
  if (workspace_) ds_->free(workspace_);
  if (cublas_) cublasDestroy(cublas_);
  if (cudnn_) cudnnDestroy(cudnn_);
}

cudaStream_t CudaBackend::stream() const { return ds_->stream; }

void CudaBackend::activate() const {
  CNNSCALE_CHECK(!lane_, "cuda backend: an op other than a conversion or the SGD update inside a LaneScope");
  ctx_->make_current();
}

void CudaBackend::activate_lane_op() const {
  ctx_->make_current();
}

cudaStream_t CudaBackend::op_stream() const {
  return lane_ ? lane_ : ds_->stream;
}

CudaBackend::LaneScope::LaneScope(CudaBackend& backend, cudaStream_t lane) : backend_(backend) {
  CNNSCALE_CHECK(lane && !backend.lane_, "cuda backend: a LaneScope inside another, or without a stream");
  backend_.lane_ = lane;
}

CudaBackend::LaneScope::~LaneScope() {
  backend_.lane_ = nullptr;
}

std::string CudaBackend::description() const {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  int blas_major = 0, blas_minor = 0, blas_patch = 0;
  cublasGetProperty(MAJOR_VERSION, &blas_major);
  cublasGetProperty(MINOR_VERSION, &blas_minor);
  cublasGetProperty(PATCH_LEVEL, &blas_patch);
  int dnn_major = 0, dnn_minor = 0, dnn_patch = 0;
  cudnnGetProperty(MAJOR_VERSION, &dnn_major);
  cudnnGetProperty(MINOR_VERSION, &dnn_minor);
  cudnnGetProperty(PATCH_LEVEL, &dnn_patch);
  const std::string sms = ctx_->partitioned()
                              ? fmt::format("{} of {} SMs (green context)", ctx_->granted_sms(), sm_count_)
                              : fmt::format("{} SMs", sm_count_);
  return fmt::format(
      "{} (gpu:{}, sm_{}{}, {}, {:.1f} GiB); CUDA runtime {}.{}, driver {}.{}; cuDNN {}.{}.{}; cuBLAS {}.{}.{}; "
      "fp32 math: {}{}",
      device_name_, device_, cc_major_, cc_minor_, sms, static_cast<double>(total_memory_) / (1u << 30),
      runtime / 1000, (runtime % 1000) / 10, driver / 1000, (driver % 1000) / 10, dnn_major, dnn_minor, dnn_patch,
      blas_major, blas_minor, blas_patch, options_.allow_tf32 ? "TF32 allowed" : "no TF32",
      options_.deterministic ? ", deterministic algorithms" : "");
}

// ---- memory ---------------------------------------------------------------------------------

Tensor CudaBackend::alloc(const Shape& shape, DType dtype) {
  activate();
  size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  void* p = nullptr;
  if (bytes > 0) {
    cudaError_t e = cudaMallocAsync(&p, bytes, ds_->stream);
    if (e != cudaSuccess) {
      cudaGetLastError();  // out-of-memory is not sticky; clear it so later calls report their own errors
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw_runtime("alloc on cuda (gpu:{}): {} {} ({} bytes) failed: {} ({:.2f} of {:.2f} GiB free)", device_,
                    shape.to_string(), dtype_name(dtype), bytes, cudaGetErrorString(e),
                    static_cast<double>(free_b) / (1u << 30), static_cast<double>(total_b) / (1u << 30));
    }
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, ds_->stream));
  }
  std::shared_ptr<DeviceStream> ds = ds_;
  std::shared_ptr<MemoryCounter> memory = memory_;
  const auto counted = static_cast<int64_t>(bytes);
  auto storage = std::make_shared<Storage>(p, bytes, device(), [ds, memory, counted](void* q) {
    ds->free(q);
    memory->release(counted);
  });
  memory_->add(counted);  // once the deleter that gives it back exists
  return Tensor(std::move(storage), 0, shape, dtype);
}

std::shared_ptr<Storage> CudaBackend::alloc_host(size_t bytes) {
  activate();
  void* p = nullptr;
  if (bytes > 0) CUDA_CHECK(cudaMallocHost(&p, bytes));
  return std::make_shared<Storage>(p, bytes, Device{}, [](void* q) { cudaFreeHost(q); });
}

void CudaBackend::upload(const void* host, const Tensor& dst) {
  cuda::expect_on_device("upload", "dst", dst, device_);
  if (dst.bytes() == 0) return;
  activate();
  CUDA_CHECK(cudaMemcpyAsync(dst.raw(), host, dst.bytes(), cudaMemcpyHostToDevice, ds_->stream));
}

void CudaBackend::download(const Tensor& src, void* host) {
  cuda::expect_on_device("download", "src", src, device_);
  activate();
  if (src.bytes() > 0)
    CUDA_CHECK(cudaMemcpyAsync(host, src.raw(), src.bytes(), cudaMemcpyDeviceToHost, ds_->stream));
  CUDA_CHECK(cudaStreamSynchronize(ds_->stream));
}

void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
  if (src.dtype() != dst.dtype() || src.numel() != dst.numel() ||
      (src.layout() != dst.layout() && src.shape() == dst.shape()))
    throw_runtime("copy on cuda: src {} {} {} and dst {} {} {} differ in dtype, size or memory order "
                  "(convert reorders)",
                  src.shape().to_string(), dtype_name(src.dtype()), layout_name(src.layout()),
                  dst.shape().to_string(), dtype_name(dst.dtype()), layout_name(dst.layout()));
  cuda::expect_on_device("copy", "src", src, device_);
  cuda::expect_on_device("copy", "dst", dst, device_);
  if (src.bytes() == 0 || src.raw() == dst.raw()) return;
  activate();
  CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.bytes(), cudaMemcpyDeviceToDevice, ds_->stream));
}

// A kernel argument, not a copy from host memory: a copy from pageable memory may wait for the
// stream, and the trainer writes its step values this way every step.
void CudaBackend::fill_i32(const Tensor& t, int32_t value) {
  cuda::expect_i32("fill_i32", "t", t, device_);
  activate();
  cuda::launch_fill_i32(t.i32(), t.numel(), value, ds_->stream);
}

void CudaBackend::fill(const Tensor& t, float value) {
  cuda::expect_on_device("fill", "t", t, device_);
  activate();
  // All-zero bits are +0.0f and int 0 alike: one memset, the common case (clearing gradients).
  bool zero_bits = value == 0.0f && !std::signbit(value);
  if (t.dtype() == DType::F32) {
    if (zero_bits && t.bytes() > 0)
      CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.bytes(), ds_->stream));
    else
      cuda::launch_fill_f32(t.f32(), t.numel(), value, ds_->stream);
  } else if (t.dtype() == DType::I32) {
    int32_t v = static_cast<int32_t>(value);
    if (v == 0 && t.bytes() > 0)
      CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.bytes(), ds_->stream));
    else
      cuda::launch_fill_i32(t.i32(), t.numel(), v, ds_->stream);
  } else if (zero_bits && t.bytes() > 0) {
    CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.bytes(), ds_->stream));  // +0 is all-zero bits in bf16/f16 too
  } else {
    cuda::launch_fill_float(t.dtype(), t.raw(), t.numel(), value, ds_->stream);
  }
}

void CudaBackend::convert(const Tensor& src, const Tensor& dst, float scale) {
  convert_with(src, dst, scale, nullptr);
}

void CudaBackend::convert_scaled_at(const Tensor& src, const Tensor& dst, const Tensor& scale) {
  cuda::expect_f32("convert_scaled_at", "scale", scale, device_);
  convert_with(src, dst, 1.0f, scale.f32());
}

// One launch; the table stays on the device (capturable). Its ranges are the caller's contract
// (Backend::convert_segments): they are not read back to be checked.
void CudaBackend::convert_segments(const Tensor& src, const Tensor& dst, const Tensor& ranges) {
  cuda::expect_float("convert_segments", "src", src, device_);
  cuda::expect_float("convert_segments", "dst", dst, device_);
  cuda::expect_numel("convert_segments", "dst", dst, src.numel());
  cuda::expect_i32("convert_segments", "ranges", ranges, device_);
  CNNSCALE_CHECK(src.shape().rank() == 1 && dst.shape() == src.shape() && ranges.numel() % 2 == 0,
                 "convert_segments on cuda: {} -> {} with {} range bounds", src.shape().to_string(),
                 dst.shape().to_string(), ranges.numel());
  if (ranges.numel() == 0) return;
  activate_lane_op();
  cuda::launch_convert_segments(src.dtype(), src.raw(), dst.dtype(), dst.raw(), ranges.i32(),
                                static_cast<int>(ranges.numel() / 2), op_stream());
}

void CudaBackend::convert_with(const Tensor& src, const Tensor& dst, float scale, const float* scale_at) {
  cuda::expect_float("convert", "src", src, device_);
  cuda::expect_float("convert", "dst", dst, device_);
  cuda::expect_numel("convert", "dst", dst, src.numel());
  if (src.numel() == 0) return;
  activate_lane_op();
  if (src.layout() != dst.layout()) {
    const Shape& sh = src.shape();
    if (sh.rank() != 4 || dst.shape() != sh || src.raw() == dst.raw())
      throw_runtime("convert on cuda: {} {} -> {} {} reorders only 4-d tensors of one shape, out of place",
                    sh.to_string(), layout_name(src.layout()), dst.shape().to_string(), layout_name(dst.layout()));
    const cuda::Permute p{sh.c(), sh.h() * sh.w(), dst.layout() == Layout::NHWC};
    cuda::launch_convert(src.numel(), src.dtype(), src.raw(), dst.dtype(), dst.raw(), scale, op_stream(), &p, scale_at);
    return;
  }
  if (src.dtype() == dst.dtype() && scale == 1.0f && !scale_at) {
    if (src.raw() != dst.raw())
      CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.bytes(), cudaMemcpyDeviceToDevice, op_stream()));
    return;
  }
  cuda::launch_convert(src.numel(), src.dtype(), src.raw(), dst.dtype(), dst.raw(), scale, op_stream(), nullptr,
                       scale_at);
}

void CudaBackend::decode_bytes(const Tensor& bytes, const Tensor& draws, const Tensor& affine, const Tensor& out) {
  check_decode_bytes(bytes, draws, affine, out, "decode_bytes on cuda");
  cuda::expect_on_device("decode_bytes", "bytes", bytes, device_);
  cuda::expect_on_device("decode_bytes", "affine", affine, device_);
  cuda::expect_on_device("decode_bytes", "out", out, device_);
  if (draws.defined()) cuda::expect_on_device("decode_bytes", "draws", draws, device_);
  activate();
  const Shape& s = bytes.shape();
  cuda::launch_decode_bytes(s.n(), s.c(), s.h(), s.w(), static_cast<const uint8_t*>(bytes.raw()),
                            draws.defined() ? draws.i32() : nullptr, affine.f32(), affine.numel() == 3 * s.c(),
                            out.f32(), ds_->stream);
}

// A strided copy: N rows of channels*H*W elements, with the source and destination row pitches of
// their own channel counts. cudaMemcpy2DAsync does exactly that, no kernel needed.
void CudaBackend::copy_channels(const Tensor& src, int64_t src_c, const Tensor& dst, int64_t dst_c,
                                int64_t channels) {
  cuda::expect_float("copy_channels", "src", src, device_);
  cuda::expect_float("copy_channels", "dst", dst, device_);
  cuda::expect_dtype("copy_channels", "dst", dst, src.dtype());
  cuda::expect_layout("copy_channels", "dst", dst, src.layout());
  const Shape& s = src.shape();
  const Shape& d = dst.shape();
  if (s.rank() < 2 || d.rank() < 2 || s.n() != d.n() || s.numel() / (s.n() * s.c()) != d.numel() / (d.n() * d.c()) ||
      channels < 0 || src_c < 0 || dst_c < 0 || src_c + channels > s.c() || dst_c + channels > d.c())
    throw_runtime("copy_channels on cuda: cannot copy {} channels from src {} at {} to dst {} at {}", channels,
                  s.to_string(), src_c, d.to_string(), dst_c);
  if (channels == 0 || s.n() == 0) return;
  activate();
  const size_t elem = dtype_size(src.dtype());
  if (src.layout() == Layout::NHWC) {  // one row of `channels` elements per pixel of every sample
    const size_t pixels = static_cast<size_t>(s.numel() / s.c());
    CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(dst.raw()) + dst_c * elem, d.c() * elem,
                                 static_cast<const char*>(src.raw()) + src_c * elem, s.c() * elem, channels * elem,
                                 pixels, cudaMemcpyDeviceToDevice, ds_->stream));
    return;
  }
  const size_t plane = static_cast<size_t>(s.numel() / (s.n() * s.c())) * elem;  // H*W elements
  CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(dst.raw()) + dst_c * plane, d.c() * plane,
                               static_cast<const char*>(src.raw()) + src_c * plane, s.c() * plane, channels * plane,
                               static_cast<size_t>(s.n()), cudaMemcpyDeviceToDevice, ds_->stream));
}

void CudaBackend::synchronize() {
  activate();
  CUDA_CHECK(cudaStreamSynchronize(ds_->stream));
}


std::shared_ptr<TimingEvent> CudaBackend::record_timing_event() {
  CNNSCALE_CHECK(!capturing(), "cuda: record_timing_event inside a capture (capture_timing_point)");
  activate();
  std::shared_ptr<cuda::CudaTimingEvent> e = cuda::make_timing_event(ds_, ctx_);
  CUDA_CHECK(cudaEventRecord(e->event, ds_->stream));
  return e;
}

bool CudaBackend::timing_event_done(const TimingEvent& e) {
  activate();
  const cudaError_t status = cudaEventQuery(cuda::as_cuda_event(e).event);
  if (status == cudaErrorNotReady) return false;
  CUDA_CHECK(status);
  return true;
}

double CudaBackend::elapsed_ms(const TimingEvent& a, const TimingEvent& b) {
  activate();
  const cuda::CudaTimingEvent& ca = cuda::as_cuda_event(a);
  const cuda::CudaTimingEvent& cb = cuda::as_cuda_event(b);
  // A no-op when the caller read after a synchronisation (the intended use).
  CUDA_CHECK(cudaEventSynchronize(cb.event));
  CUDA_CHECK(cudaEventSynchronize(ca.event));
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, ca.event, cb.event));
  return ms;
}

// Grows only: algorithms ask for their workspace in stream order, so freeing the old block with
// cudaFreeAsync is safe even while earlier kernels still use it.
Tensor CudaBackend::staging(size_t slot, const Shape& shape, DType dtype) {
  CNNSCALE_CHECK(slot < staging_.size(), "staging slot {} of {}", slot, staging_.size());
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  if (const Tensor& trial = trial_.staging[slot]; trial.defined()) {
    CNNSCALE_CHECK(trial.bytes() >= bytes, "trial staging slot {}: {} bytes for {}", slot, trial.bytes(), bytes);
    return Tensor(trial.storage(), 0, shape, dtype);
  }
  Tensor& held = staging_[slot];
  if (!held.defined() || held.bytes() < bytes) {
    if (held.defined()) buffers_moved();
    held = Tensor();  // release first: the old and new buffers need not both exist
    held = alloc(Shape{static_cast<int64_t>((bytes + 3) / 4)}, DType::F32);
  }
  return Tensor(held.storage(), 0, shape, dtype);
}

void* CudaBackend::workspace(size_t bytes) {
  if (bytes <= workspace_bytes_) return workspace_;
  // In a timed trial of a convolution form (trial_.depth > 0), an algorithm wanting more than the
  // kept workspace gets a transient one, uncounted as search workspace is: a form that loses must
  // leave neither a grown workspace nor its peak behind.
  if (trial_.depth > 0) {
    if (trial_.workspace.defined() && trial_.workspace.bytes() >= bytes) return trial_.workspace.raw();
    trial_.workspace = Tensor();
    const size_t rounded = (bytes + 3) / 4 * 4;
    void* p = nullptr;
    if (cudaMallocAsync(&p, rounded, ds_->stream) != cudaSuccess) {
      cudaGetLastError();
      throw_runtime("cuda (gpu:{}): trial workspace of {} bytes could not be allocated", device_, bytes);
    }
    trial_.workspace = Tensor(std::make_shared<Storage>(p, rounded, device(), [ds = ds_](void* q) { ds->free(q); }), 0,
                              Shape{static_cast<int64_t>(rounded / 4)}, DType::F32);
    return p;
  }
  if (workspace_) {
    ds_->free(workspace_);
    buffers_moved();
  }
  memory_->release(static_cast<int64_t>(workspace_bytes_));
  workspace_ = nullptr;
  workspace_bytes_ = 0;
  cudaError_t e = cudaMallocAsync(&workspace_, bytes, ds_->stream);
  if (e != cudaSuccess) {
    cudaGetLastError();
    workspace_ = nullptr;
    throw_runtime("cuda (gpu:{}): workspace of {} bytes could not be allocated: {}", device_, bytes,
                  cudaGetErrorString(e));
  }
  workspace_bytes_ = bytes;
  memory_->add(static_cast<int64_t>(bytes));
  return workspace_;
}

}  // namespace cnnscale
