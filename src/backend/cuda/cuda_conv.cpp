// cuDNN convolution: one plan per (x shape, w shape, params) with cached descriptors, and for each
// direction the algorithm measured with cudnnFind*AlgorithmEx on the real buffers (kFindTrials
// searches, each algorithm ranked by its median time).
// Workspace policy: the search may use min(options.max_workspace_bytes, half the memory free on
// the device, counting blocks cached in our memory pool); the backend then keeps one workspace
// grown to the largest requirement among the chosen algorithms.
// Besides the legacy algorithms, 16-bit and TF32 searches time the plans of cuDNN's graph API
// (cudnn_graph.hpp) the same way; the fastest of both sets runs.
// Precision: x, w and y share one storage type (f32, bf16 or f16). 16-bit convolutions accumulate
// in fp32 (compute type FLOAT: cuDNN's pseudo-half/pseudo-bf16 configurations) on tensor cores;
// f32 ones use TF32 tensor cores only when the backend allows TF32.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/cuda_op_checks.hpp"
#include "backend/width_lowering.hpp"
#include "core/log.hpp"

namespace cnnscale {
namespace {

// Channels-last tensor-core convolutions want whole 16-byte pixels: 8 channels of 2 bytes, or 4 of
// 4 bytes (TF32).
constexpr int64_t kPixelQuantumBytes = 16;
int64_t channel_quantum(DType dtype) { return kPixelQuantumBytes / static_cast<int64_t>(dtype_size(dtype)); }

// The im2col kernel keeps three ints per lowered column in shared memory (48 KiB at most).
constexpr int64_t kMaxLoweredCols = 4096;
// A width-lowered input bigger than this, or than kMaxWidthLoweredGrowth times the input, is not
// tried. The gait nets' conv1 at batch 256 lowers to 0.58 GB in 16 bits and 1.17 GB in TF32 (7
// times the input); a full im2col there would be 40 times.
constexpr size_t kMaxWidthLoweredBytes = size_t{2} << 30;
constexpr int64_t kMaxWidthLoweredGrowth = 16;

bool is_tensor_op(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// find_ranked returns its results fastest first. Take the fastest that ran, fits the workspace,
// and obeys the options: for f32 with TF32 off the descriptor is set to CUDNN_FMA_MATH, so tensor-op
// results should not appear, and are refused if they do; deterministic-only when asked.
template <typename Perf>
ConvAlgoChoice pick_algorithm(const Perf* perf, int returned, size_t limit, const CudaBackendOptions& options,
                              DType dtype, const char* op, const Shape& x, const Shape& w) {
  const bool tensor_ops = options.allow_tf32 || dtype != DType::F32;
  if (log::level() <= log::Level::Debug) {
    std::string all;
    for (int i = 0; i < returned; ++i)
      all += fmt::format(" [algo {} status {} {:.3f} ms {} MiB math {}]", static_cast<int>(perf[i].algo),
                         static_cast<int>(perf[i].status), perf[i].time, perf[i].memory >> 20,
                         static_cast<int>(perf[i].mathType));
    log::debug("{} x {} w {}: workspace limit {} MiB, cudnnFind:{}", op, x.to_string(), w.to_string(), limit >> 20,
               all);
  }
  for (int i = 0; i < returned; ++i) {
    const Perf& r = perf[i];
    if (r.status != CUDNN_STATUS_SUCCESS || r.memory > limit) continue;
    if (!tensor_ops && is_tensor_op(r.mathType)) continue;
    if (options.deterministic && r.determinism != CUDNN_DETERMINISTIC) continue;
    ConvAlgoChoice c;
    c.algo = static_cast<int>(r.algo);
    c.workspace_bytes = r.memory;
    c.math = tensor_ops ? r.mathType : CUDNN_FMA_MATH;
    c.measured_ms = r.time;
    return c;
  }
  throw_runtime("{} on cuda: cuDNN found no usable {} algorithm for x {} w {} ({} tried, workspace limit {} bytes{})",
                op, dtype_name(dtype), x.to_string(), w.to_string(), returned, limit,
                options.deterministic ? ", deterministic only" : "");
}

// One cudnnFind call times each algorithm once, at the start of a run: clocks still ramping and
// kernels loaded on first use (lazy module loading) can put one timing off by a large factor, and
// then the choice, and the run's speed, differs from one run to the next (with one search, runs of
// one training configuration on an H100 differed by up to 1.6x in samples/s). Three searches, each
// algorithm (with its math type) ranked by its median time, outvote one bad timing.
constexpr int kFindTrials = 3;

template <typename Perf, typename FindOnce>
std::vector<Perf> find_ranked(FindOnce&& find_once) {
  std::map<std::pair<int, int>, std::vector<Perf>> by_algo;  // (algo, math type) -> its results
  for (int t = 0; t < kFindTrials; ++t)
    for (const Perf& r : find_once()) by_algo[{static_cast<int>(r.algo), static_cast<int>(r.mathType)}].push_back(r);
  std::vector<Perf> ranked;
  for (auto& [key, results] : by_algo) {
    Perf merged = results.front();
    std::vector<float> times;
    for (const Perf& r : results) {
      if (r.status != CUDNN_STATUS_SUCCESS) merged.status = r.status;  // failed once: not a candidate
      merged.memory = std::max(merged.memory, r.memory);
      times.push_back(r.time);
    }
    if (results.size() < static_cast<size_t>(kFindTrials) && merged.status == CUDNN_STATUS_SUCCESS)
      merged.status = CUDNN_STATUS_NOT_SUPPORTED;  // not returned by every search
    std::sort(times.begin(), times.end());
    merged.time = times[times.size() / 2];
    ranked.push_back(merged);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const Perf& a, const Perf& b) {
    const bool a_ok = a.status == CUDNN_STATUS_SUCCESS, b_ok = b.status == CUDNN_STATUS_SUCCESS;
    return a_ok != b_ok ? a_ok : (a_ok && a.time < b.time);
  });
  return ranked;
}

// cuDNN's heuristic ranking of the algorithms (cudnnGetConvolution*Algorithm_v7): nothing is run,
// so every process given the same shape, device and cuDNN ranks alike. Deterministic runs choose
// by it; a timed search can choose differently in a resumed process, and algorithms round
// differently, so a resumed run would not continue bit for bit.
template <typename Perf, typename Get>
std::vector<Perf> heuristic_ranked(int count, Get&& get) {
  std::vector<Perf> r(static_cast<size_t>(count));
  int returned = 0;
  CUDNN_CHECK(get(count, &returned, r.data()));
  r.resize(static_cast<size_t>(returned));
  return r;
}

// Temporary search workspace, freed in stream order whatever happens to the search.
class SearchBuffer {
 public:
  SearchBuffer(size_t wanted, cudaStream_t stream) : stream_(stream) {
    // Halve on failure: a smaller search space beats failing the first step.
    for (bytes_ = wanted; bytes_ >= (size_t{1} << 20); bytes_ /= 2) {
      if (cudaMallocAsync(&ptr_, bytes_, stream_) == cudaSuccess) return;
      cudaGetLastError();
      ptr_ = nullptr;
    }
    bytes_ = 0;
  }
  ~SearchBuffer() {
    if (ptr_) cudaFreeAsync(ptr_, stream_);
  }
  SearchBuffer(const SearchBuffer&) = delete;
  SearchBuffer& operator=(const SearchBuffer&) = delete;
  void* ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  cudaStream_t stream_;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A pair of timing events, destroyed whatever happens to the search.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

// One call of `run` (which says whether it succeeded) between the pair of events on `stream`: its
// time in ms, or a negative value if it failed.
template <typename Run>
float timed_run(const EventPair& ev, cudaStream_t stream, Run&& run) {
  CUDA_CHECK(cudaEventRecord(ev.start, stream));
  const bool ok = run();
  CUDA_CHECK(cudaEventRecord(ev.stop, stream));
  CUDA_CHECK(cudaEventSynchronize(ev.stop));
  if (!ok) return -1.0f;
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
  return ms;
}

// The median of kFindTrials timed calls of `run`, as the legacy search ranks its algorithms; a
// negative value if one failed.
template <typename Run>
float median_run_ms(const EventPair& ev, cudaStream_t stream, Run&& run) {
  std::vector<float> times;
  for (int t = 0; t < kFindTrials; ++t) {
    const float ms = timed_run(ev, stream, run);
    if (ms < 0.0f) return -1.0f;
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// A run of a graph plan for timed_run: whether it ran (a refusal leaves no sticky error behind).
bool ran(cudnnStatus_t st) {
  if (st != CUDNN_STATUS_SUCCESS) cudaGetLastError();
  return st == CUDNN_STATUS_SUCCESS;
}

}  // namespace

void CudaBackend::search_graph_plans(const char* op, const ConvPlan& plan, cuda::ConvDirection direction,
                                     ConvAlgoChoice& choice, void* x, void* w, void* y, void* workspace,
                                     size_t workspace_bytes) {
  // Deterministic runs keep cuDNN's heuristic legacy choice: timing plans would make it vary.
  if (options_.deterministic || options_.conv_graph_plans <= 0 || (plan.dtype == DType::F32 && !options_.allow_tf32))
    return;
  const cuda::ConvGraphSpec spec = cuda::conv_graph_spec(direction, plan.dtype, plan.layout, plan.x_shape,
                                                         plan.w_shape, plan.y_shape, plan.params, options_.allow_tf32);
  const auto t0 = std::chrono::steady_clock::now();
  auto plans = cuda::conv_graph_plans(cudnn_, spec, workspace_bytes, options_.conv_graph_plans);
  const auto t1 = std::chrono::steady_clock::now();
  EventPair ev;
  std::string log_line;
  std::unique_ptr<cuda::ConvGraphPlan> best;
  float best_ms = 0.0f;
  for (auto& candidate : plans) {
    auto run = [&] { return ran(candidate->execute(cudnn_, x, w, y, workspace)); };
    // A first run loads the kernels (lazy module loading: up to tens of ms on an H100). A plan
    // whose second run is still far slower than the best so far cannot win and is not timed
    // further, which keeps the search short where the heuristics also rank slow engines.
    float first = timed_run(ev, stream(), run);
    if (first < 0.0f) continue;
    const float bound = std::min(best ? best_ms : choice.measured_ms, choice.measured_ms);
    if (first > 2.0f * bound) first = timed_run(ev, stream(), run);
    if (first < 0.0f) continue;
    if (first > 2.0f * bound) {
      log_line += fmt::format(" [{} {:.3f} ms: not timed further]", candidate->name(), first);
      continue;
    }
    const float ms = median_run_ms(ev, stream(), run);
    if (ms < 0.0f) continue;
    log_line += fmt::format(" [{} {:.3f} ms {} MiB]", candidate->name(), ms, candidate->workspace_bytes() >> 20);
    if (!best || ms < best_ms) {
      best = std::move(candidate);
      best_ms = ms;
    }
  }
  const auto t2 = std::chrono::steady_clock::now();
  auto ms_between = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  const bool wins = best && best_ms < choice.measured_ms;
  log::debug("{} x {} w {}: {} graph plans built in {:.0f} ms, timed in {:.0f} ms:{}; {} (legacy algo {} {:.3f} ms)",
             op, plan.x_shape.to_string(), plan.w_shape.to_string(), plans.size(), ms_between(t0, t1),
             ms_between(t1, t2), log_line.empty() ? " no plan ran" : log_line,
             wins ? "graph plan " + best->name() + " runs" : std::string("legacy algorithm runs"), choice.algo,
             choice.measured_ms);
  if (!wins) return;
  choice.graph = std::move(best);
  choice.measured_ms = best_ms;
}

bool CudaBackend::run_graph_plan(const ConvAlgoChoice& choice, void* x, void* w, void* y) {
  if (!choice.graph) return false;
  void* ws = workspace(choice.graph->workspace_bytes());
  const cudnnStatus_t st = choice.graph->execute(cudnn_, x, w, y, ws);
  if (st == CUDNN_STATUS_BAD_PARAM) return false;  // operands the plan cannot take: the legacy algorithm runs
  if (st != CUDNN_STATUS_SUCCESS) cuda::fail(st, "cudnnBackendExecute (convolution graph plan)", __FILE__, __LINE__);
  return true;
}

size_t CudaBackend::search_workspace_limit() const {
  // A choice that must not depend on the moment: the device's size, not its free memory, bounds it.
  if (options_.deterministic) return std::min(options_.max_workspace_bytes, total_memory_ / 8);
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  // Blocks our pool keeps after frees are free for us, though the driver counts them as used.
  cudaMemPool_t pool = nullptr;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
  uint64_t reserved = 0, used = 0;
  CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  size_t available = free_b + static_cast<size_t>(reserved > used ? reserved - used : 0);
  return std::min(options_.max_workspace_bytes, available / 2);
}

// Plans are per shape, parameters, dtype and memory order.
CudaBackend::ConvKey CudaBackend::conv_key(const ConvParams& p, const Shape& x, const Shape& w, DType dtype,
                                           Layout layout) {
  return {x[0],       x[1],       x[2],    x[3],    w[0],         w[1],         w[2],         w[3],
          p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w, p.groups,
          static_cast<int64_t>(dtype) * 2 + (layout == Layout::NHWC ? 1 : 0)};
}

// The memory order one convolution call runs in: channels-last if any operand is. An operand of one
// pixel (a 1x1 filter, a 1x1 output) is the same bytes in both orders, so it may carry either tag.
static Layout conv_layout(const char* op, const Tensor& a, const Tensor& b, const Tensor& c) {
  const bool nhwc = a.layout() == Layout::NHWC || b.layout() == Layout::NHWC || c.layout() == Layout::NHWC;
  const Layout l = nhwc ? Layout::NHWC : Layout::NCHW;
  for (const Tensor* t : {&a, &b, &c})
    if (t->layout() != l && t->shape().rank() == 4 && t->shape().h() * t->shape().w() > 1)
      throw_runtime("{} on cuda: operands {} {}, {} {} and {} {} mix memory orders", op, a.shape().to_string(),
                    layout_name(a.layout()), b.shape().to_string(), layout_name(b.layout()), c.shape().to_string(),
                    layout_name(c.layout()));
  return l;
}

ConvPlan& CudaBackend::conv_plan(const char* op, const ConvParams& p, const Shape& x, const Shape& w, DType dtype,
                                 Layout layout) {
  if (x.rank() != 4 || w.rank() != 4)
    throw_runtime("{} on cuda: x {} and w {} must be 4-d (N, C, H, W) / (K, C/groups, R, S)", op, x.to_string(),
                  w.to_string());
  if (p.groups < 1 || x.c() != w.c() * p.groups || w.n() % p.groups != 0 || w.h() != p.kernel_h ||
      w.w() != p.kernel_w || p.stride_h < 1 || p.stride_w < 1 || p.dilation_h < 1 || p.dilation_w < 1 || p.pad_h < 0 ||
      p.pad_w < 0)
    throw_runtime("{} on cuda: inconsistent x {} w {} kernel {}x{} stride {}x{} pad {}x{} dilation {}x{} groups {}", op,
                  x.to_string(), w.to_string(), p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w,
                  p.dilation_h, p.dilation_w, p.groups);
  const ConvKey key = conv_key(p, x, w, dtype, layout);
  auto it = conv_plans_.find(key);
  if (it != conv_plans_.end()) return *it->second;

  auto plan = std::make_unique<ConvPlan>();
  plan->dtype = dtype;
  plan->layout = layout;
  plan->channels = x.c();
  plan->x_shape = x;
  plan->w_shape = w;
  plan->params = p;
  cuda::set_nchw(plan->x, x, op, dtype, layout);
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan->w, cuda::cudnn_type(dtype), cuda::cudnn_format(layout),
                                         cuda::to_int_dim(w[0], op),
                                         cuda::to_int_dim(w[1], op), cuda::to_int_dim(w[2], op),
                                         cuda::to_int_dim(w[3], op)));
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(plan->conv, p.pad_h, p.pad_w, p.stride_h, p.stride_w, p.dilation_h,
                                              p.dilation_w, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionGroupCount(plan->conv, p.groups));
  CUDNN_CHECK(cudnnSetConvolutionMathType(plan->conv, conv_math(dtype)));
  int n = 0, k = 0, oh = 0, ow = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(plan->conv, plan->x, plan->w, &n, &k, &oh, &ow));
  // The shape rule every backend and the layers share; cuDNN must agree with it.
  Shape expected{x[0], w[0], conv_output_dim(x[2], p.kernel_h, p.stride_h, p.pad_h, p.dilation_h),
                 conv_output_dim(x[3], p.kernel_w, p.stride_w, p.pad_w, p.dilation_w)};
  plan->y_shape = Shape{n, k, oh, ow};
  if (plan->y_shape != expected || oh < 1 || ow < 1)
    throw_runtime("{} on cuda: cuDNN output {} differs from cnnscale's {} for x {} w {}", op, plan->y_shape.to_string(),
                  expected.to_string(), x.to_string(), w.to_string());
  cuda::set_nchw(plan->y, plan->y_shape, op, dtype, layout);
  ConvPlan& made = *conv_plans_.emplace(key, std::move(plan)).first->second;
  const int64_t quantum = channel_quantum(dtype);
  if (layout == Layout::NHWC && p.groups == 1 && x.c() % quantum != 0 &&
      options_.channel_padding != ConvChannelPadding::Never) {
    Shape xp = x, wp = w;
    xp[1] = wp[1] = (x.c() + quantum - 1) / quantum * quantum;
    made.padded = &conv_plan(op, p, xp, wp, dtype, layout);  // map nodes stay put: `made` is still valid
  }
  // Measured needs timing: deterministic runs choose without it, so they stay channels-last.
  const bool first_form = options_.channels_first == ConvChannelsFirst::Always ||
                          (options_.channels_first == ConvChannelsFirst::Measured && !options_.deterministic);
  if (layout == Layout::NHWC && p.groups == 1 && x.c() % quantum != 0 && first_form)
    made.channels_first = &conv_plan(op, p, x, w, dtype, Layout::NCHW);
  // Width lowering: for the same first convolutions, where tensor cores compute (strict fp32 stays
  // on cuDNN's own forms, as with lowering) and where the copy is not out of proportion.
  const bool width_form = options_.width_lowering == ConvWidthLowering::Always ||
                          (options_.width_lowering == ConvWidthLowering::Measured && !options_.deterministic);
  if (layout == Layout::NHWC && x.c() % quantum != 0 && width_form && (dtype != DType::F32 || options_.allow_tf32)) {
    if (const auto l = width_lowering(p, x, w, quantum)) {
      const int64_t elements = l->x.numel();
      if (l->x.c() <= kMaxLoweredCols &&
          static_cast<size_t>(elements) * dtype_size(dtype) <= kMaxWidthLoweredBytes &&
          elements <= kMaxWidthLoweredGrowth * x.numel()) {
        made.width_lowered = &conv_plan(op, l->params, l->x, l->w, dtype, layout);
        made.width_lowered->serves_width_lowering = true;
        made.width_field = l->field;
      }
    }
  }
  return made;
}

Tensor CudaBackend::reordered(size_t slot, const Tensor& t, Layout to) {
  Tensor out = staging(slot, t.shape(), t.dtype()).as_layout(to);
  reorder(t, out);
  return out;
}

void CudaBackend::reorder(const Tensor& src, const Tensor& dst) {
  cuda::set_desc(desc_a_, src, "reorder");
  cuda::set_desc(desc_b_, dst, "reorder");
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnTransformTensor(cudnn_, &one, desc_a_, src.raw(), &zero, desc_b_, dst.raw()));
}

// Transient staging slots and workspace for a timed trial of a convolution form, uncounted as
// cuDNN's search workspace is: what a losing form used is freed and counts in no peak. A trial
// inside another (the channels-first choice made within the width-lowered or lowered form's trial
// of the same plan) uses the enclosing one's buffers, of the same sizes, for the slots it installed.
struct CudaBackend::TrialStaging {
  using Slots = std::vector<std::pair<size_t, int64_t>>;  // (staging slot, elements of the plan's dtype)
  TrialStaging(CudaBackend& backend, DType dtype, const Slots& slots) : b(backend) {
    ++b.trial_depth_;
    try {
      install(dtype, slots);
    } catch (...) {  // the destructor will not run: undo here
      release();
      throw;
    }
  }
  ~TrialStaging() { release(); }
  TrialStaging(const TrialStaging&) = delete;
  TrialStaging& operator=(const TrialStaging&) = delete;
  bool room() const { return has_room; }

  // The slots of the forms nested in a trial of `plan`: the channels-first form's x, w and y
  // (5..7) and the width-lowered input and filter (8, 9), where the plan has those forms.
  static Slots inner_form_slots(const ConvPlan& plan, bool channels_first, bool width) {
    Slots slots;
    if (channels_first && plan.channels_first)
      slots.insert(slots.end(),
                   {{5, plan.x_shape.numel()}, {6, plan.w_shape.numel()}, {7, plan.y_shape.numel()}});
    if (width && plan.width_lowered)
      slots.insert(slots.end(), {{8, plan.width_lowered->x_shape.numel()}, {9, plan.width_lowered->w_shape.numel()}});
    return slots;
  }

  CudaBackend& b;
  bool has_room = true;
  std::vector<size_t> owned;
  std::vector<std::unique_ptr<SearchBuffer>> buffers;

 private:
  void install(DType dtype, const Slots& slots) {
    const size_t size = dtype_size(dtype);
    for (const auto& [slot, numel] : slots) {
      if (b.trial_staging_[slot].defined()) continue;  // an enclosing trial's
      const size_t bytes = static_cast<size_t>(numel) * size;
      buffers.push_back(std::make_unique<SearchBuffer>(std::max(bytes, size_t{1} << 20), b.stream()));
      if (buffers.back()->bytes() < bytes) {  // SearchBuffer got less (or nothing): no trial
        buffers.pop_back();
        has_room = false;
        return;
      }
      b.trial_staging_[slot] =
          Tensor(std::make_shared<Storage>(buffers.back()->ptr(), buffers.back()->bytes(), b.device(), nullptr), 0,
                 Shape{numel}, dtype);
      owned.push_back(slot);
    }
  }
  // The views go before the buffers they point into (the buffers are members, destroyed after).
  void release() {
    for (size_t slot : owned) b.trial_staging_[slot] = Tensor();
    owned.clear();
    if (--b.trial_depth_ == 0) b.trial_workspace_ = Tensor();
  }
};

void CudaBackend::run_channels_first(ConvPlan& plan, ConvAlgoChoice ConvPlan::*algo, ConvCall find, ConvCall run,
                                     const ChannelsFirstOperand& a, const ChannelsFirstOperand& b,
                                     const ChannelsFirstOperand& out) {
  ConvPlan& first = *plan.channels_first;
  const Tensor at = reordered(a.slot, a.t, Layout::NCHW), bt = reordered(b.slot, b.t, Layout::NCHW);
  const Tensor outt = staging(out.slot, out.t.shape(), out.t.dtype()).as_layout(Layout::NCHW);
  if ((first.*algo).algo < 0) (this->*find)(first, at, bt, outt);
  (this->*run)(first, at, bt, outt);
  reorder(outt, out.t);
}

template <typename RunA, typename RunB>
bool CudaBackend::second_measures_faster(const char* op, const ConvPlan& plan, const char* a_name, RunA&& run_a,
                                         const char* b_name, RunB&& run_b) {
  EventPair ev;
  // One untimed call of each first (kernels loaded, staging grown, nested choices made), then the
  // medians.
  auto timed = [&](auto&& run) {
    run();
    return median_run_ms(ev, stream(), [&] {
      run();
      return true;
    });
  };
  const float a_ms = timed(run_a), b_ms = timed(run_b);
  log::debug("{} x {} w {}: {} {:.3f} ms, {} {:.3f} ms; {} runs", op, plan.x_shape.to_string(),
             plan.w_shape.to_string(), a_name, a_ms, b_name, b_ms, b_ms < a_ms ? b_name : a_name);
  return b_ms < a_ms;
}

template <typename Decide, typename RunA, typename RunB>
void CudaBackend::run_chosen(ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision, Decide&& b_wins, RunA&& run_a,
                             RunB&& run_b) {
  if (plan.*decision == ConvPlan::Choice::Unsearched)
    plan.*decision = b_wins() ? ConvPlan::Choice::Yes : ConvPlan::Choice::No;
  if (plan.*decision == ConvPlan::Choice::Yes)
    run_b();
  else
    run_a();
}

template <typename RunGiven, typename RunFirst>
bool CudaBackend::channels_first_measures_faster(const char* op, const ConvPlan& plan, RunGiven&& run_given,
                                                 RunFirst&& run_first) {
  const TrialStaging trial(*this, plan.dtype, TrialStaging::inner_form_slots(plan, true, false));
  if (!trial.room()) {
    log::debug("{} x {} w {}: no memory for the channels-first copies: channels-last runs", op,
               plan.x_shape.to_string(), plan.w_shape.to_string());
    return false;
  }
  try {
    return second_measures_faster(op, plan, "channels-last", run_given, "channels-first (reordered copies)",
                                  run_first);
  } catch (const RuntimeError& e) {  // e.g. no usable NCHW algorithm: the form is not for this shape
    log::debug("{} x {} w {}: the channels-first form failed ({}): channels-last runs", op, plan.x_shape.to_string(),
               plan.w_shape.to_string(), e.what());
    return false;
  }
}

template <typename RunGiven, typename RunFirst>
void CudaBackend::run_faster_order(const char* op, ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision,
                                   RunGiven&& run_given, RunFirst&& run_first) {
  run_chosen(
      plan, decision,
      [&] {
        return plan.channels_first && (options_.channels_first == ConvChannelsFirst::Always ||
                                       channels_first_measures_faster(op, plan, run_given, run_first));
      },
      run_given, run_first);
}

Tensor CudaBackend::channels_staging(size_t slot, const Tensor& t, int64_t channels) {
  Shape s = t.shape();
  s[1] = channels;
  return staging(slot, s, t.dtype()).as_layout(Layout::NHWC);
}

Tensor CudaBackend::with_channels(size_t slot, const Tensor& t, int64_t channels) {
  Tensor out = channels_staging(slot, t, channels);
  const int64_t pixels = t.numel() / t.shape().c();
  cuda::launch_copy_rows(t.dtype(), pixels, t.raw(), t.shape().c(), out.raw(), channels, stream());
  return out;
}

void CudaBackend::unpad_channels(const Tensor& padded, const Tensor& dst) {
  const int64_t pixels = dst.numel() / dst.shape().c();
  cuda::launch_copy_rows(dst.dtype(), pixels, padded.raw(), padded.shape().c(), dst.raw(), dst.shape().c(), stream());
}

// The search times kernels only: the padding copies (a few percent of the time of the convolutions
// that need them) are left out, so a near tie goes to whichever cuDNN timed faster.
template <typename FindPlain, typename FindPadded>
bool CudaBackend::runs_padded(const char* op, ConvPlan& plan, ConvAlgoChoice ConvPlan::*algo,
                              bool ConvPlan::*on_padded, FindPlain&& find_plain, FindPadded&& find_padded) {
  const ConvAlgoChoice& plain = plan.*algo;
  if (plain.algo >= 0 || plan.*on_padded) return plan.*on_padded;  // decided by an earlier call
  // Deterministic runs do not time: a measured choice could differ in a resumed process.
  const bool always = options_.channel_padding == ConvChannelPadding::Always ||
                      (options_.deterministic && options_.channel_padding == ConvChannelPadding::Measured);
  if (!plan.padded || !always) find_plain();
  if (!plan.padded) return false;
  const ConvAlgoChoice& padded = (*plan.padded).*algo;
  if (padded.algo < 0) find_padded();  // the padded plan may be shared with another shape
  const bool choice = always || plain.algo < 0 || (padded.algo >= 0 && padded.measured_ms < plain.measured_ms);
  log::debug("{}: channel padding {} (algo {} {:.3f} ms unpadded, algo {} {:.3f} ms padded)", op,
             choice ? "on" : "off", plain.algo, plain.measured_ms, padded.algo, padded.measured_ms);
  plan.*on_padded = choice;
  return choice;
}

const ConvPlan* CudaBackend::find_conv_plan(const ConvParams& p, const Shape& x, const Shape& w, DType dtype,
                                            Layout layout) const {
  if (x.rank() != 4 || w.rank() != 4) return nullptr;
  const ConvKey key = conv_key(p, x, w, dtype, layout);
  auto it = conv_plans_.find(key);
  return it == conv_plans_.end() ? nullptr : it->second.get();
}

// The searches run every algorithm on the real buffers (overwriting the op's output, which the
// op then computes anyway) and synchronise: once per shape and direction, outside steady state.
// Deterministic runs rank by cuDNN's heuristics instead (heuristic_ranked) and need no buffer.
// `operands` are x, w and y in the direction's roles, as ConvGraphPlan::execute takes them;
// heuristic(n, returned, perf) and find(n, returned, perf, workspace, bytes) are the direction's
// cudnnGet*Algorithm_v7 and cudnnFind*AlgorithmEx.
template <typename Perf, typename Heuristic, typename Find>
ConvAlgoChoice CudaBackend::search_direction(const char* op, ConvPlan& plan, cuda::ConvDirection direction, int count,
                                             const std::array<void*, 3>& operands, const Shape& x, const Shape& w,
                                             Heuristic&& heuristic, Find&& find) {
  const size_t limit = search_workspace_limit();
  SearchBuffer buf(options_.deterministic ? 0 : limit, stream());
  CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, conv_math(plan.dtype)));
  const std::vector<Perf> perf =
      options_.deterministic ? heuristic_ranked<Perf>(count, heuristic) : find_ranked<Perf>([&] {
        std::vector<Perf> r(static_cast<size_t>(count));
        int returned = 0;
        CUDNN_CHECK(find(count, &returned, r.data(), buf.ptr(), buf.bytes()));
        r.resize(static_cast<size_t>(returned));
        return r;
      });
  ConvAlgoChoice choice = pick_algorithm(perf.data(), static_cast<int>(perf.size()),
                                         options_.deterministic ? limit : buf.bytes(), options_, plan.dtype, op, x, w);
  search_graph_plans(op, plan, direction, choice, operands[0], operands[1], operands[2], buf.ptr(), buf.bytes());
  return choice;
}

void CudaBackend::find_conv_forward(ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor& y) {
  plan.fwd = search_direction<cudnnConvolutionFwdAlgoPerf_t>(
      "conv_forward", plan, cuda::ConvDirection::Forward, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, {x.raw(), w.raw(), y.raw()},
      x.shape(), w.shape(),
      [&](int n, int* got, cudnnConvolutionFwdAlgoPerf_t* r) {
        return cudnnGetConvolutionForwardAlgorithm_v7(cudnn_, plan.x, plan.w, plan.conv, plan.y, n, got, r);
      },
      [&](int n, int* got, cudnnConvolutionFwdAlgoPerf_t* r, void* ws, size_t bytes) {
        return cudnnFindConvolutionForwardAlgorithmEx(cudnn_, plan.x, x.raw(), plan.w, w.raw(), plan.conv, plan.y,
                                                      y.raw(), n, got, r, ws, bytes);
      });
}

void CudaBackend::find_conv_backward_data(ConvPlan& plan, const Tensor& w, const Tensor& dy, const Tensor& dx) {
  plan.bwd_data = search_direction<cudnnConvolutionBwdDataAlgoPerf_t>(
      "conv_backward_data", plan, cuda::ConvDirection::BackwardData, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
      {dx.raw(), w.raw(), dy.raw()}, dx.shape(), w.shape(),
      [&](int n, int* got, cudnnConvolutionBwdDataAlgoPerf_t* r) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnn_, plan.w, plan.y, plan.conv, plan.x, n, got, r);
      },
      [&](int n, int* got, cudnnConvolutionBwdDataAlgoPerf_t* r, void* ws, size_t bytes) {
        return cudnnFindConvolutionBackwardDataAlgorithmEx(cudnn_, plan.w, w.raw(), plan.y, dy.raw(), plan.conv,
                                                           plan.x, dx.raw(), n, got, r, ws, bytes);
      });
}

void CudaBackend::find_conv_backward_filter(ConvPlan& plan, const Tensor& x, const Tensor& dy, const Tensor& dw) {
  plan.bwd_filter = search_direction<cudnnConvolutionBwdFilterAlgoPerf_t>(
      "conv_backward_filter", plan, cuda::ConvDirection::BackwardFilter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
      {x.raw(), dw.raw(), dy.raw()}, x.shape(), dw.shape(),
      [&](int n, int* got, cudnnConvolutionBwdFilterAlgoPerf_t* r) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnn_, plan.x, plan.y, plan.conv, plan.w, n, got, r);
      },
      [&](int n, int* got, cudnnConvolutionBwdFilterAlgoPerf_t* r, void* ws, size_t bytes) {
        return cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnn_, plan.x, x.raw(), plan.y, dy.raw(), plan.conv,
                                                             plan.w, dw.raw(), n, got, r, ws, bytes);
      });
}

// The forms nest, each decided at its first call: lowered, or else width-lowered, or else
// channels-first, or else cuDNN on the operands as given (channel-padded where that pays).
void CudaBackend::conv_forward(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& y) {
  const ForwardOperands f = forward_operands(p, x, w, y, &ConvPlan::fwd_lowered, &ConvPlan::fwd_channels_first,
                                             &ConvPlan::fwd_width_lowered);
  auto cudnn = [&] {
    run_faster_order(
        "conv_forward", *f.given, &ConvPlan::fwd_channels_first, [&] { run_conv_forward(*f.plan, f.x, f.w, y); },
        [&] {
          run_channels_first(*f.given, &ConvPlan::fwd, &CudaBackend::find_conv_forward, &CudaBackend::run_conv_forward,
                             {x, 5}, {w, 6}, {y, 7});
        });
  };
  auto width_or_cudnn = [&] {
    run_faster_width("conv_forward", *f.given, &ConvPlan::fwd_width_lowered, cudnn,
                     [&] { run_width_lowered_forward(*f.given, x, w, nullptr, y); });
  };
  run_faster_form("conv_forward", *f.given, &ConvPlan::fwd_lowered, width_or_cudnn,
                  [&] { run_lowered_forward(*f.given, x, w, Tensor(), false, y); });
}

// ---- lowered convolutions ------------------------------------------------------------------------
// A lowered input bigger than this, or than kMaxLoweredGrowth times the input, is not tried: the
// GEMM would then mostly move the copies (ResNet's 3x3 convolutions, 9 times their input, are
// still timed; the gait nets' 7x7 conv1 over 50 channels, 40 times, is not).
constexpr size_t kMaxLoweredBytes = size_t{1} << 30;
constexpr int64_t kMaxLoweredGrowth = 16;
// Lowered rows are padded to this many elements (16 bytes in 16 bits), which cuBLASLt's
// tensor-core kernels want of every leading dimension.
constexpr int64_t kLoweredColumnQuantum = 8;

// The bytes of a channels-last tensor (NHWC activations, KRSC filters) as a row-major matrix, as the
// GEMMs of the lowered form take them (tagged NCHW: a 2-d matrix has no channels to reorder).
static Tensor as_rows(const Tensor& t, int64_t rows, int64_t cols) {
  return t.reshape(Shape{rows, cols}).as_layout(Layout::NCHW);
}

// A receptive field's r*s*c values: the lowered row before its padding, and a KRSC filter row.
static int64_t lowered_field(const ConvPlan& plan) {
  return plan.channels * plan.params.kernel_h * plan.params.kernel_w;
}

Shape CudaBackend::lowered_shape(const ConvPlan& plan) {
  const int64_t q = kLoweredColumnQuantum, cols = (lowered_field(plan) + q - 1) / q * q;
  return Shape{plan.y_shape.n() * plan.y_shape.h() * plan.y_shape.w(), cols};
}

bool CudaBackend::lowerable(const ConvPlan& plan) const {
  if (options_.conv_lowering == ConvLowering::Never) return false;
  if (options_.conv_lowering == ConvLowering::Measured && options_.deterministic) return false;  // no timing
  if (plan.layout != Layout::NHWC || plan.params.groups != 1 || plan.serves_width_lowering) return false;
  if (plan.dtype == DType::F32 && !options_.allow_tf32) return false;  // strict fp32 stays on cuDNN
  const Shape lowered = lowered_shape(plan);
  if (lowered[1] > kMaxLoweredCols) return false;
  const int64_t elements = lowered.numel();
  return elements * static_cast<int64_t>(dtype_size(plan.dtype)) <= static_cast<int64_t>(kMaxLoweredBytes) &&
         elements <= kMaxLoweredGrowth * plan.x_shape.numel();
}

Tensor CudaBackend::lowered_input(const ConvPlan& plan, const Tensor& x) {
  const ConvParams& p = plan.params;
  cuda::Im2colShape g;
  g.n = plan.x_shape.n();
  g.c = plan.channels;
  g.h = plan.x_shape.h();
  g.w = plan.x_shape.w();
  g.r = p.kernel_h;
  g.s = p.kernel_w;
  g.stride_h = p.stride_h;
  g.stride_w = p.stride_w;
  g.pad_h = p.pad_h;
  g.pad_w = p.pad_w;
  g.dilation_h = p.dilation_h;
  g.dilation_w = p.dilation_w;
  g.oh = plan.y_shape.h();
  g.ow = plan.y_shape.w();
  const Shape shape = lowered_shape(plan);
  g.cols = shape[1];
  Tensor col = lowered_search_plan_ == &plan && lowered_search_input_.defined() ? lowered_search_input_
                                                                               : staging(4, shape, plan.dtype);
  CNNSCALE_CHECK(col.shape() == shape && col.dtype() == plan.dtype, "lowered input {} for {}", col.shape().to_string(),
                 shape.to_string());
  cuda::launch_im2col_nhwc(plan.dtype, g, x.raw(), col.raw(), stream());
  return col;
}

Tensor CudaBackend::lowered_filter(const ConvPlan& plan, const Tensor& w, size_t slot) {
  const int64_t k = plan.w_shape.n(), field = lowered_field(plan), cols = lowered_shape(plan)[1];
  if (cols == field) return as_rows(w, k, cols);  // KRSC rows are the lowered rows already
  Tensor padded = staging(slot, Shape{k, cols}, plan.dtype);
  cuda::launch_copy_rows(plan.dtype, k, w.raw(), field, padded.raw(), cols, stream());
  return padded;
}

// y (n*oh*ow, k), which is y in NHWC, = lowered x (n*oh*ow, cols) times the filter rows (k, cols)
// transposed, with the bias and ReLU in the GEMM's epilogue.
void CudaBackend::run_lowered_forward(const ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor& bias,
                                      bool relu, const Tensor& y) {
  const Tensor col = lowered_input(plan, x);
  // Slot 3: slots 0 and 1 may hold the padded operands of the cuDNN form, timed beside this one.
  const Tensor rows = lowered_filter(plan, w, 3);
  linear_forward(col, rows, bias, relu, as_rows(y, col.shape()[0], plan.w_shape.n()));
}

// dw rows (k, cols) = dy (n*oh*ow, k) transposed times lowered x (n*oh*ow, cols), the zero columns
// past r*s*c cut off on the way into dw (KRSC).
void CudaBackend::run_lowered_backward_filter(const ConvPlan& plan, const Tensor& x, const Tensor& dy,
                                              const Tensor& dw) {
  const Tensor col = lowered_input(plan, x);
  const int64_t k = plan.w_shape.n(), field = lowered_field(plan), cols = col.shape()[1];
  const Tensor dy_rows = as_rows(dy, col.shape()[0], k);
  if (cols == field) return linear_backward_params(col, dy_rows, as_rows(dw, k, cols), Tensor());
  const Tensor dw_rows = staging(2, Shape{k, cols}, plan.dtype);
  linear_backward_params(col, dy_rows, dw_rows, Tensor());
  cuda::launch_copy_rows(plan.dtype, k, dw_rows.raw(), cols, dw.raw(), field, stream());
}

template <typename RunCudnn, typename RunLowered>
bool CudaBackend::lowered_measures_faster(const char* op, const ConvPlan& plan, RunCudnn&& run_cudnn,
                                          RunLowered&& run_lowered) {
  // The search's lowered input lives in a transient buffer, as cuDNN's search workspace does: a
  // form that loses leaves no memory held behind it, nor in the run's peak.
  const Shape col_shape = lowered_shape(plan);
  const size_t col_bytes = static_cast<size_t>(col_shape.numel()) * dtype_size(plan.dtype);
  // SearchBuffer halves its request on failure down to 1 MiB: ask for at least that.
  SearchBuffer col(std::max(col_bytes, size_t{1} << 20), stream());
  if (col.bytes() < col_bytes) {
    log::debug("{} x {} w {}: no memory for the lowered input ({} bytes): cuDNN runs", op, plan.x_shape.to_string(),
               plan.w_shape.to_string(), col_bytes);
    return false;
  }
  // The cuDNN side may run the width-lowered or channels-first form, decided within this trial:
  // their copies stay transient too, whichever form wins here.
  std::optional<TrialStaging> inner_copies;
  if (plan.channels_first || plan.width_lowered)
    inner_copies.emplace(*this, plan.dtype, TrialStaging::inner_form_slots(plan, true, true));
  // Short of memory for them, none is held here: each inner trial then asks for its own, or skips
  // its form.
  if (inner_copies && !inner_copies->room()) inner_copies.reset();
  // A lowered trial of another plan nested in this one (the width-lowered form's own convolution)
  // has its own buffer; this one's is back when it ends.
  struct Restore {
    CudaBackend& b;
    Tensor input = b.lowered_search_input_;
    const ConvPlan* plan = b.lowered_search_plan_;
    ~Restore() {
      b.lowered_search_input_ = input;
      b.lowered_search_plan_ = plan;
    }
  } restore{*this};
  lowered_search_input_ =
      Tensor(std::make_shared<Storage>(col.ptr(), col.bytes(), device(), nullptr), 0, col_shape, plan.dtype);
  lowered_search_plan_ = &plan;
  return second_measures_faster(op, plan, "cuDNN", run_cudnn, "lowered (im2col + GEMM)", run_lowered);
}

template <typename RunCudnn, typename RunLowered>
void CudaBackend::run_faster_form(const char* op, ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision,
                                  RunCudnn&& run_cudnn, RunLowered&& run_lowered) {
  run_chosen(
      plan, decision,
      [&] {
        return lowerable(plan) && (options_.conv_lowering == ConvLowering::Always ||
                                   lowered_measures_faster(op, plan, run_cudnn, run_lowered));
      },
      run_cudnn, run_lowered);
}

// ---- width-lowered convolutions ------------------------------------------------------------------

// Each image row of x as im2col lowers an image for a kernel one row high: output column q of row
// (n, h) gets the S kernel columns' C channels side by side, which is the width-lowered input
// (N, H, Q, Cl) channels-last (backend/width_lowering.hpp), zeros in the padding and past S*C.
Tensor CudaBackend::width_lowered_input(const ConvPlan& plan, const Tensor& x) {
  const ConvPlan& l = *plan.width_lowered;
  const ConvParams& p = plan.params;
  cuda::Im2colShape g;
  g.n = plan.x_shape.n() * plan.x_shape.h();
  g.c = plan.channels;
  g.h = 1;
  g.w = plan.x_shape.w();
  g.r = 1;
  g.s = p.kernel_w;
  g.stride_w = p.stride_w;
  g.pad_w = p.pad_w;
  g.dilation_w = p.dilation_w;
  g.oh = 1;
  g.ow = l.x_shape.w();
  g.cols = l.channels;
  const Tensor xl = staging(8, l.x_shape, plan.dtype).as_layout(Layout::NHWC);
  cuda::launch_im2col_nhwc(plan.dtype, g, x.raw(), xl.raw(), stream());
  return xl;
}

// The width-lowered filter's KRSC rows (k, r) are w's KRSC rows, S*C long, zero-padded to Cl.
void CudaBackend::run_width_lowered_forward(const ConvPlan& plan, const Tensor& x, const Tensor& w,
                                            const Tensor* bias, const Tensor& y) {
  const ConvPlan& l = *plan.width_lowered;
  const Tensor xl = width_lowered_input(plan, x);
  const Tensor wl = staging(9, l.w_shape, plan.dtype).as_layout(Layout::NHWC);
  cuda::launch_copy_rows(plan.dtype, plan.w_shape.n() * plan.params.kernel_h, w.raw(), plan.width_field, wl.raw(),
                         l.channels, stream());
  if (bias)
    conv_forward_bias_relu(l.params, xl, wl, *bias, y);
  else
    conv_forward(l.params, xl, wl, y);
}

// The filter gradient of the (R x 1) convolution, its rows cut back from Cl to S*C into dw (KRSC).
void CudaBackend::run_width_lowered_backward_filter(const ConvPlan& plan, const Tensor& x, const Tensor& dy,
                                                    const Tensor& dw) {
  const ConvPlan& l = *plan.width_lowered;
  const Tensor xl = width_lowered_input(plan, x);
  const Tensor dwl = staging(9, l.w_shape, plan.dtype).as_layout(Layout::NHWC);
  conv_backward_filter(l.params, xl, dy, dwl);
  cuda::launch_copy_rows(plan.dtype, plan.w_shape.n() * plan.params.kernel_h, dwl.raw(), l.channels, dw.raw(),
                         plan.width_field, stream());
}

template <typename RunOther, typename RunWidth>
bool CudaBackend::width_lowered_measures_faster(const char* op, const ConvPlan& plan, RunOther&& run_other,
                                                RunWidth&& run_width) {
  // Both forms' copies are transient while timed: the width-lowered input and filter, and the
  // channels-first copies the other side may choose within this trial.
  const TrialStaging trial(*this, plan.dtype, TrialStaging::inner_form_slots(plan, true, true));
  if (!trial.room()) {
    log::debug("{} x {} w {}: no memory for the width-lowered copies: the other forms run", op,
               plan.x_shape.to_string(), plan.w_shape.to_string());
    return false;
  }
  try {
    return second_measures_faster(op, plan, "as otherwise", run_other, "width-lowered (R x 1 over S*C channels)",
                                  run_width);
  } catch (const RuntimeError& e) {  // e.g. no usable algorithm for the (R x 1) shape
    // Said where it is seen: a failure of another kind than a shape cuDNN does not serve would
    // otherwise hide behind the other forms.
    log::warn("{} x {} w {}: the width-lowered form failed ({}): the other forms run", op,
              plan.x_shape.to_string(), plan.w_shape.to_string(), e.what());
    return false;
  }
}

template <typename RunOther, typename RunWidth>
void CudaBackend::run_faster_width(const char* op, ConvPlan& plan, ConvPlan::Choice ConvPlan::*decision,
                                   RunOther&& run_other, RunWidth&& run_width) {
  run_chosen(
      plan, decision,
      [&] {
        return plan.width_lowered && (options_.width_lowering == ConvWidthLowering::Always ||
                                      width_lowered_measures_faster(op, plan, run_other, run_width));
      },
      run_other, run_width);
}

CudaBackend::ForwardOperands CudaBackend::forward_operands(const ConvParams& p, const Tensor& x, const Tensor& w,
                                                           const Tensor& y, ConvPlan::Choice ConvPlan::*lowered,
                                                           ConvPlan::Choice ConvPlan::*first,
                                                           ConvPlan::Choice ConvPlan::*width) {
  cuda::expect_float("conv_forward", "x", x, device_);
  cuda::expect_float("conv_forward", "w", w, device_);
  cuda::expect_float("conv_forward", "y", y, device_);
  cuda::expect_dtype("conv_forward", "w", w, x.dtype());
  cuda::expect_dtype("conv_forward", "y", y, x.dtype());
  activate();
  ConvPlan& plan =
      conv_plan("conv_forward", p, x.shape(), w.shape(), x.dtype(), conv_layout("conv_forward", x, w, y));
  cuda::expect_shape("conv_forward", "y", y, plan.y_shape);
  // Running lowered, channels-first or width-lowered: those forms read x and w as given, so no
  // padded copies are made.
  if (plan.*lowered == ConvPlan::Choice::Yes || plan.*first == ConvPlan::Choice::Yes ||
      plan.*width == ConvPlan::Choice::Yes)
    return {&plan, x, w, &plan};
  const int64_t c = plan.padded ? plan.padded->channels : 0;
  Tensor xp, wp;
  auto pad = [&] {
    if (xp.defined()) return;
    xp = with_channels(0, x, c);
    wp = with_channels(1, w, c);
  };
  if (!runs_padded(
          "conv_forward", plan, &ConvPlan::fwd, &ConvPlan::fwd_padded, [&] { find_conv_forward(plan, x, w, y); },
          [&] {
            pad();
            find_conv_forward(*plan.padded, xp, wp, y);
          }))
    return {&plan, x, w, &plan};
  pad();
  return {plan.padded, xp, wp, &plan};
}

// The fused plan runs where cuDNN's graph API has one for the shape and it measured faster than
// the convolution's own choice followed by the bias and ReLU kernels; otherwise those three run, as
// on every backend. Strict fp32 (no tensor-core engines) and deterministic runs (no timing) keep
// the three ops.
void CudaBackend::conv_forward_bias_relu(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                                         const Tensor& y) {
  cuda::expect_float("conv_forward_bias_relu", "bias", bias, device_);
  cuda::expect_dtype("conv_forward_bias_relu", "bias", bias, x.dtype());
  cuda::expect_numel("conv_forward_bias_relu", "bias", bias, y.shape().c());
  const ForwardOperands f = forward_operands(p, x, w, y, &ConvPlan::fwd_bias_relu_lowered,
                                             &ConvPlan::fwd_bias_relu_channels_first,
                                             &ConvPlan::fwd_bias_relu_width_lowered);
  ConvPlan& plan = *f.plan;
  if (!plan.fwd_bias_relu_searched && f.given->fwd_bias_relu_lowered != ConvPlan::Choice::Yes &&
      f.given->fwd_bias_relu_channels_first != ConvPlan::Choice::Yes &&
      f.given->fwd_bias_relu_width_lowered != ConvPlan::Choice::Yes)
    search_bias_relu(plan, f.x, f.w, bias, y);
  auto cudnn = [&] {
    if (plan.fwd_bias_relu) {
      void* ws = workspace(plan.fwd_bias_relu->workspace_bytes());
      const cudnnStatus_t st = plan.fwd_bias_relu->execute(cudnn_, f.x.raw(), f.w.raw(), y.raw(), ws, bias.raw());
      if (st == CUDNN_STATUS_SUCCESS) return;
      // Misaligned views: the three ops below. Anything else is an error.
      if (st != CUDNN_STATUS_BAD_PARAM) cuda::fail(st, "cudnnBackendExecute (fused convolution)", __FILE__, __LINE__);
    }
    run_conv_forward(plan, f.x, f.w, y);
    bias_add(bias, y);
    relu_forward(y, y);
  };
  auto cudnn_in_faster_order = [&] {
    run_faster_order("conv_forward_bias_relu", *f.given, &ConvPlan::fwd_bias_relu_channels_first, cudnn,
                     [&] {
                       run_channels_first(*f.given, &ConvPlan::fwd, &CudaBackend::find_conv_forward,
                                          &CudaBackend::run_conv_forward, {x, 5}, {w, 6}, {y, 7});
                       bias_add(bias, y);
                       relu_forward(y, y);
                     });
  };
  auto width_or_cudnn = [&] {
    run_faster_width("conv_forward_bias_relu", *f.given, &ConvPlan::fwd_bias_relu_width_lowered,
                     cudnn_in_faster_order, [&] { run_width_lowered_forward(*f.given, x, w, &bias, y); });
  };
  run_faster_form("conv_forward_bias_relu", *f.given, &ConvPlan::fwd_bias_relu_lowered, width_or_cudnn,
                  [&] { run_lowered_forward(*f.given, x, w, bias, true, y); });
}

void CudaBackend::search_bias_relu(ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor& bias,
                                   const Tensor& y) {
  plan.fwd_bias_relu_searched = true;
  if (options_.deterministic || options_.conv_graph_plans <= 0 || (plan.dtype == DType::F32 && !options_.allow_tf32))
    return;
  const size_t limit = search_workspace_limit();
  const cuda::ConvGraphSpec spec = cuda::conv_bias_relu_graph_spec(plan.dtype, plan.layout, plan.x_shape,
                                                                   plan.w_shape, plan.y_shape, plan.params,
                                                                   options_.allow_tf32);
  auto plans = cuda::conv_graph_plans(cudnn_, spec, limit, options_.conv_graph_plans);
  if (plans.empty()) {
    log::debug("conv_forward_bias_relu x {} w {}: the graph API offers no fused plan", plan.x_shape.to_string(),
               plan.w_shape.to_string());
    return;
  }
  EventPair ev;
  // The median of timed runs after one untimed run that loads the kernels; negative if one failed.
  auto median_ms = [&](auto&& run) { return run() ? median_run_ms(ev, stream(), run) : -1.0f; };
  const float apart_ms = median_ms([&] {
    run_conv_forward(plan, x, w, y);
    bias_add(bias, y);
    relu_forward(y, y);
    return true;
  });
  std::string log_line;
  float best_ms = apart_ms;
  for (auto& candidate : plans) {
    SearchBuffer buf(std::max<size_t>(candidate->workspace_bytes(), size_t{1} << 20), stream());
    if (buf.bytes() < candidate->workspace_bytes()) continue;
    const float ms =
        median_ms([&] { return ran(candidate->execute(cudnn_, x.raw(), w.raw(), y.raw(), buf.ptr(), bias.raw())); });
    if (ms < 0.0f) continue;
    log_line += fmt::format(" [{} {:.3f} ms]", candidate->name(), ms);
    if (ms < best_ms) {
      best_ms = ms;
      plan.fwd_bias_relu = std::move(candidate);
    }
  }
  log::debug("conv_forward_bias_relu x {} w {}: apart {:.3f} ms, fused plans:{}; {}", plan.x_shape.to_string(),
             plan.w_shape.to_string(), apart_ms, log_line.empty() ? " none ran" : log_line,
             plan.fwd_bias_relu ? "fused plan " + plan.fwd_bias_relu->name() + " runs" : std::string("ops apart run"));
}

void CudaBackend::conv_backward_data(const ConvParams& p, const Tensor& w, const Tensor& dy, const Tensor& dx) {
  cuda::expect_float("conv_backward_data", "w", w, device_);
  cuda::expect_float("conv_backward_data", "dy", dy, device_);
  cuda::expect_float("conv_backward_data", "dx", dx, device_);
  cuda::expect_dtype("conv_backward_data", "dy", dy, w.dtype());
  cuda::expect_dtype("conv_backward_data", "dx", dx, w.dtype());
  activate();
  ConvPlan& plan = conv_plan("conv_backward_data", p, dx.shape(), w.shape(), w.dtype(),
                             conv_layout("conv_backward_data", dx, w, dy));
  cuda::expect_shape("conv_backward_data", "dy", dy, plan.y_shape);
  const int64_t c = plan.padded ? plan.padded->channels : 0;
  Tensor wp, dxp;
  auto pad = [&] {
    if (wp.defined()) return;
    wp = with_channels(1, w, c);
    dxp = channels_staging(2, dx, c);
  };
  const bool padded = runs_padded(
      "conv_backward_data", plan, &ConvPlan::bwd_data, &ConvPlan::bwd_data_padded,
      [&] { find_conv_backward_data(plan, w, dy, dx); },
      [&] {
        pad();
        find_conv_backward_data(*plan.padded, wp, dy, dxp);
      });
  auto cudnn = [&] {
    if (!padded) return run_conv_backward_data(plan, w, dy, dx);
    pad();
    run_conv_backward_data(*plan.padded, wp, dy, dxp);
    unpad_channels(dxp, dx);
  };
  run_faster_order("conv_backward_data", plan, &ConvPlan::bwd_data_channels_first, cudnn,
                   [&] {
                     run_channels_first(plan, &ConvPlan::bwd_data, &CudaBackend::find_conv_backward_data,
                                        &CudaBackend::run_conv_backward_data, {w, 6}, {dy, 7}, {dx, 5});
                   });
}

void CudaBackend::conv_backward_filter(const ConvParams& p, const Tensor& x, const Tensor& dy, const Tensor& dw) {
  cuda::expect_float("conv_backward_filter", "x", x, device_);
  cuda::expect_float("conv_backward_filter", "dy", dy, device_);
  cuda::expect_float("conv_backward_filter", "dw", dw, device_);
  cuda::expect_dtype("conv_backward_filter", "dy", dy, x.dtype());
  cuda::expect_dtype("conv_backward_filter", "dw", dw, x.dtype());
  activate();
  ConvPlan& plan = conv_plan("conv_backward_filter", p, x.shape(), dw.shape(), x.dtype(),
                             conv_layout("conv_backward_filter", x, dw, dy));
  cuda::expect_shape("conv_backward_filter", "dy", dy, plan.y_shape);
  const int64_t c = plan.padded ? plan.padded->channels : 0;
  Tensor xp, dwp;
  auto pad = [&] {
    if (xp.defined()) return;
    xp = with_channels(0, x, c);
    dwp = channels_staging(2, dw, c);
  };
  const bool padded = runs_padded(
      "conv_backward_filter", plan, &ConvPlan::bwd_filter, &ConvPlan::bwd_filter_padded,
      [&] { find_conv_backward_filter(plan, x, dy, dw); },
      [&] {
        pad();
        find_conv_backward_filter(*plan.padded, xp, dy, dwp);
      });
  auto cudnn = [&] {
    if (!padded) return run_conv_backward_filter(plan, x, dy, dw);
    pad();
    run_conv_backward_filter(*plan.padded, xp, dy, dwp);
    unpad_channels(dwp, dw);
  };
  auto cudnn_in_faster_order = [&] {
    run_faster_order("conv_backward_filter", plan, &ConvPlan::bwd_filter_channels_first, cudnn,
                     [&] {
                       run_channels_first(plan, &ConvPlan::bwd_filter, &CudaBackend::find_conv_backward_filter,
                                          &CudaBackend::run_conv_backward_filter, {x, 5}, {dy, 7}, {dw, 6});
                     });
  };
  auto width_or_cudnn = [&] {
    run_faster_width("conv_backward_filter", plan, &ConvPlan::bwd_filter_width_lowered, cudnn_in_faster_order,
                     [&] { run_width_lowered_backward_filter(plan, x, dy, dw); });
  };
  run_faster_form("conv_backward_filter", plan, &ConvPlan::bwd_filter_lowered, width_or_cudnn,
                  [&] { run_lowered_backward_filter(plan, x, dy, dw); });
}

void CudaBackend::run_conv_forward(ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor& y) {
  if (run_graph_plan(plan.fwd, x.raw(), w.raw(), y.raw())) return;
  CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, plan.fwd.math));
  void* ws = workspace(plan.fwd.workspace_bytes);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnConvolutionForward(cudnn_, &one, plan.x, x.raw(), plan.w, w.raw(), plan.conv,
                                      static_cast<cudnnConvolutionFwdAlgo_t>(plan.fwd.algo), ws,
                                      plan.fwd.workspace_bytes, &zero, plan.y, y.raw()));
}

void CudaBackend::run_conv_backward_data(ConvPlan& plan, const Tensor& w, const Tensor& dy, const Tensor& dx) {
  if (run_graph_plan(plan.bwd_data, dx.raw(), w.raw(), dy.raw())) return;
  CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, plan.bwd_data.math));
  void* ws = workspace(plan.bwd_data.workspace_bytes);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnConvolutionBackwardData(cudnn_, &one, plan.w, w.raw(), plan.y, dy.raw(), plan.conv,
                                           static_cast<cudnnConvolutionBwdDataAlgo_t>(plan.bwd_data.algo), ws,
                                           plan.bwd_data.workspace_bytes, &zero, plan.x, dx.raw()));
}

void CudaBackend::run_conv_backward_filter(ConvPlan& plan, const Tensor& x, const Tensor& dy, const Tensor& dw) {
  if (run_graph_plan(plan.bwd_filter, x.raw(), dw.raw(), dy.raw())) return;
  CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, plan.bwd_filter.math));
  void* ws = workspace(plan.bwd_filter.workspace_bytes);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnConvolutionBackwardFilter(cudnn_, &one, plan.x, x.raw(), plan.y, dy.raw(), plan.conv,
                                             static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan.bwd_filter.algo), ws,
                                             plan.bwd_filter.workspace_bytes, &zero, plan.w, dw.raw()));
}

}  // namespace cnnscale
