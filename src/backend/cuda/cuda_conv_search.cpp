// cuDNN convolution searches and runs: for each direction of a plan the algorithm measured with
// cudnnFind*AlgorithmEx on the real buffers (kFindTrials searches, each algorithm ranked by its
// median time), or ranked by cuDNN's heuristics in deterministic runs.
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
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_conv_timing.hpp"
#include "backend/engine_cache.hpp"
#include "core/log.hpp"

namespace cnnscale {

using cuda::EventPair;
using cuda::kFindTrials;
using cuda::median_run_ms;
using cuda::ran;
using cuda::SearchBuffer;
using cuda::timed_run;

namespace {

// Winograd's non-fused kernels transform larger tiles (5x5 filters too), and the transforms amplify
// rounding: in fp32 they erred by ninety times the error of direct summation on a CaffeNet conv2
// shape (docs/measurements/2026-11-25-convolution-choices.md). Strict fp32 (TF32 off)
// promises fp32 sums, so it refuses them; TF32 and 16-bit runs, whose own rounding is of that size,
// keep them.
bool amplifies_rounding(cudnnConvolutionFwdAlgo_t a) { return a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED; }
bool amplifies_rounding(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool amplifies_rounding(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// find_ranked returns its results fastest first. Take the fastest that ran, fits the workspace,
// and obeys the options: for f32 with TF32 off the descriptor is set to CUDNN_FMA_MATH, so tensor-op
// results should not appear, and are refused if they do, as are the non-fused Winograd algorithms;
// deterministic-only when asked.
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
    if (!tensor_ops && (cuda::is_tensor_op(r.mathType) || amplifies_rounding(r.algo))) continue;
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

}  // namespace

// Times the graph-API plans for one direction of `plan` on the search's buffers (x, w, y in the
// direction's roles, as ConvGraphPlan::execute takes them) and makes the fastest `choice.graph`
// if it beats the legacy algorithm already in `choice`.
void cuda::ConvAlgorithms::search_graph_plans(const char* op, const ConvPlan& plan, cuda::ConvDirection direction,
                                              ConvAlgoChoice& choice, void* x, void* w, void* y, void* workspace,
                                              size_t workspace_bytes) {
  // Deterministic runs keep cuDNN's heuristic legacy choice: timing plans would make it vary.
  if (b_.options_.deterministic || b_.options_.conv_graph_plans <= 0 ||
      (plan.dtype == DType::F32 && !b_.options_.allow_tf32))
    return;
  const cuda::ConvGraphSpec spec = cuda::conv_graph_spec(direction, plan.dtype, plan.layout, plan.x_shape, plan.w_shape,
                                                         plan.y_shape, plan.params, b_.options_.allow_tf32);
  const auto t0 = std::chrono::steady_clock::now();
  auto plans = cuda::conv_graph_plans(b_.cudnn_, spec, workspace_bytes, b_.options_.conv_graph_plans);
  const auto t1 = std::chrono::steady_clock::now();
  EventPair ev;
  std::string log_line;
  std::unique_ptr<cuda::ConvGraphPlan> best;
  float best_ms = 0.0f;
  for (auto& candidate : plans) {
    auto run = [&] { return ran(candidate->execute(b_.cudnn_, x, w, y, workspace)); };
    // A first run loads the kernels (lazy module loading: up to tens of ms,
    // docs/measurements/2026-11-25-convolution-choices.md). A plan
    // whose second run is still far slower than the best so far cannot win and is not timed
    // further, which keeps the search short where the heuristics also rank slow engines.
    float first = timed_run(ev, b_.stream(), run);
    if (first < 0.0f) continue;
    const float bound = std::min(best ? best_ms : choice.measured_ms, choice.measured_ms);
    if (first > 2.0f * bound) first = timed_run(ev, b_.stream(), run);
    if (first < 0.0f) continue;
    if (first > 2.0f * bound) {
      log_line += fmt::format(" [{} {:.3f} ms: not timed further]", candidate->name(), first);
      continue;
    }
    const float ms = median_run_ms(ev, b_.stream(), run);
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

bool cuda::ConvAlgorithms::run_graph_plan(const cuda::ConvGraphPlan* graph, void* x, void* w, void* y) {
  if (!graph) return false;
  void* ws = b_.workspace(graph->workspace_bytes());
  const cudnnStatus_t st = graph->execute(b_.cudnn_, x, w, y, ws);
  if (st == CUDNN_STATUS_BAD_PARAM) return false;  // operands the plan cannot take: the legacy algorithm runs
  if (st != CUDNN_STATUS_SUCCESS) cuda::fail(st, "cudnnBackendExecute (convolution graph plan)", __FILE__, __LINE__);
  return true;
}

size_t cuda::ConvAlgorithms::search_workspace_limit() const {
  // A choice that must not depend on the moment: the device's size, not its free memory, bounds it.
  if (b_.options_.deterministic) return std::min(b_.options_.max_workspace_bytes, b_.total_memory_ / 8);
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  // Blocks our pool keeps after frees are free for us, though the driver counts them as used.
  cudaMemPool_t pool = nullptr;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, b_.device_));
  uint64_t reserved = 0, used = 0;
  CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  size_t available = free_b + static_cast<size_t>(reserved > used ? reserved - used : 0);
  return std::min(b_.options_.max_workspace_bytes, available / 2);
}

// The searches run every algorithm on the real buffers (overwriting the op's output, which the
// op then computes anyway) and synchronise: once per shape and direction, outside steady state.
// Deterministic runs rank by cuDNN's heuristics instead (heuristic_ranked) and need no buffer.
// `operands` are x, w and y in the direction's roles, as ConvGraphPlan::execute takes them;
// heuristic(n, returned, perf) and find(n, returned, perf, workspace, bytes) are the direction's
// cudnnGet*Algorithm_v7 and cudnnFind*AlgorithmEx.
template <typename Perf, typename Heuristic, typename Find, typename WorkspaceSize>
ConvAlgoChoice cuda::ConvAlgorithms::search_direction(const char* op, ConvPlan& plan, cuda::ConvDirection direction,
                                                      int count, const std::array<void*, 3>& operands, const Shape& x,
                                                      const Shape& w, Heuristic&& heuristic, Find&& find,
                                                      WorkspaceSize&& workspace_size) {
  const size_t limit = search_workspace_limit();
  // An earlier process's outcome of this very search (same GPU model, SMs, cuDNN, problem, TF32
  // and graph-plan count): taken without timing anything where its workspace fits this process's
  // limit (the limit it was searched under is not in the key: a choice made with less workspace
  // is taken as it was). Deterministic runs do not time, so they need none.
  EngineCache* cache = b_.options_.deterministic ? nullptr : EngineCache::from_environment();
  const std::string cache_key =
      cache ? engine_cache_key(fmt::format("{} tf32 {} plans {}", conv_cache_text(op, plan),
                                           b_.options_.allow_tf32 ? 1 : 0, b_.options_.conv_graph_plans))
            : std::string();
  if (cache)
    if (const auto hit = cache->find(cache_key))
      if (auto cached = cached_conv_choice(*hit, plan, direction, count, operands, limit, workspace_size,
                                           [](int algo) { return amplifies_rounding(decltype(Perf::algo)(algo)); })) {
        log::debug("{} x {} w {}: algo {}{} from the engine cache", op, x.to_string(), w.to_string(), cached->algo,
                   cached->graph ? ", graph plan " + cached->graph->name() : std::string());
        return std::move(*cached);
      }
  SearchBuffer buf(b_.options_.deterministic ? 0 : limit, b_.stream());
  CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, conv_math(plan.dtype)));
  const std::vector<Perf> perf =
      b_.options_.deterministic ? heuristic_ranked<Perf>(count, heuristic) : find_ranked<Perf>([&] {
        std::vector<Perf> r(static_cast<size_t>(count));
        int returned = 0;
        CUDNN_CHECK(find(count, &returned, r.data(), buf.ptr(), buf.bytes()));
        r.resize(static_cast<size_t>(returned));
        return r;
      });
  ConvAlgoChoice choice =
      pick_algorithm(perf.data(), static_cast<int>(perf.size()), b_.options_.deterministic ? limit : buf.bytes(),
                     b_.options_, plan.dtype, op, x, w);
  search_graph_plans(op, plan, direction, choice, operands[0], operands[1], operands[2], buf.ptr(), buf.bytes());
  if (cache)
    cache->put(cache_key,
               format_conv_search({choice.algo, static_cast<int>(choice.math), choice.workspace_bytes,
                                   choice.measured_ms, choice.graph ? choice.graph->name() : std::string()}));
  return choice;
}

// A direction's search result read back from the engine cache: the legacy algorithm (with its
// math type, workspace and measured time) and the graph engine that beat it, if one did, compiled
// and run once here. nullopt (a miss: search anew) for a choice this backend cannot take: text
// that does not parse, an algorithm out of range or that cuDNN does not run for this problem (its
// workspace query fails), a tensor-core math type or a non-fused Winograd where strict fp32
// forbids them, more workspace than the search may use now, or a graph engine this GPU does not
// offer or that fails here.
// `workspace_size(algo, &bytes)` is the direction's cudnnGet*WorkspaceSize, `amplifies(algo)`
// whether strict fp32 refuses the algorithm.
std::optional<ConvAlgoChoice> cuda::ConvAlgorithms::cached_conv_choice(
    const std::string& text, const ConvPlan& plan, cuda::ConvDirection direction, int count,
    const std::array<void*, 3>& operands, size_t limit,
    const std::function<cudnnStatus_t(int, size_t*)>& workspace_size, bool (*amplifies)(int)) {
  const std::optional<ConvSearchEntry> entry = parse_conv_search(text);
  if (!entry) return std::nullopt;
  ConvAlgoChoice c;
  c.algo = entry->algo;
  c.workspace_bytes = entry->workspace_bytes;
  c.measured_ms = entry->ms;
  const int math = entry->math;
  const std::string& engine = entry->engine;
  if (c.algo >= count || c.workspace_bytes > limit) return std::nullopt;
  if (math != CUDNN_DEFAULT_MATH && math != CUDNN_TENSOR_OP_MATH && math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
      math != CUDNN_FMA_MATH)
    return std::nullopt;
  c.math = static_cast<cudnnMathType_t>(math);
  const bool tensor_ops = b_.options_.allow_tf32 || plan.dtype != DType::F32;
  // What pick_algorithm would refuse is refused here too (strict fp32: no tensor-core math, no
  // Winograd non-fused), and the algorithm must be one cuDNN runs for this problem: its workspace
  // query fails otherwise.
  if (!tensor_ops && (c.math != CUDNN_FMA_MATH || amplifies(c.algo))) return std::nullopt;
  CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, c.math));
  size_t bytes = 0;
  const cudnnStatus_t supported = workspace_size(c.algo, &bytes);
  if (supported != CUDNN_STATUS_SUCCESS || bytes > limit) return std::nullopt;
  c.workspace_bytes = std::max(c.workspace_bytes, bytes);
  if (!engine.empty()) {
    if (b_.options_.conv_graph_plans <= 0 || !tensor_ops) return std::nullopt;
    const cuda::ConvGraphSpec spec =
        cuda::conv_graph_spec(direction, plan.dtype, plan.layout, plan.x_shape, plan.w_shape, plan.y_shape, plan.params,
                              b_.options_.allow_tf32);
    auto graph = cached_graph_plan(engine, spec, [&](const cuda::ConvGraphPlan& p, void* ws) {
      return ran(p.execute(b_.cudnn_, operands[0], operands[1], operands[2], ws));
    });
    if (!graph) return std::nullopt;
    c.graph = std::move(graph);
  }
  return c;
}

std::string cuda::ConvAlgorithms::conv_cache_text(const char* op, const ConvPlan& plan) {
  const ConvParams& q = plan.params;
  return fmt::format("{} {} {} x {} w {} y {} stride {}x{} pad {}x{} dilation {}x{} groups {}", op,
                     dtype_name(plan.dtype), layout_name(plan.layout), plan.x_shape.to_string(),
                     plan.w_shape.to_string(), plan.y_shape.to_string(), q.stride_h, q.stride_w, q.pad_h, q.pad_w,
                     q.dilation_h, q.dilation_w, q.groups);
}

void cuda::ConvAlgorithms::find_conv_forward(ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor& y) {
  plan.fwd = search_direction<cudnnConvolutionFwdAlgoPerf_t>(
      "conv_forward", plan, cuda::ConvDirection::Forward, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, {x.raw(), w.raw(), y.raw()},
      x.shape(), w.shape(),
      [&](int n, int* got, cudnnConvolutionFwdAlgoPerf_t* r) {
        return cudnnGetConvolutionForwardAlgorithm_v7(b_.cudnn_, plan.x, plan.w, plan.conv, plan.y, n, got, r);
      },
      [&](int n, int* got, cudnnConvolutionFwdAlgoPerf_t* r, void* ws, size_t bytes) {
        return cudnnFindConvolutionForwardAlgorithmEx(b_.cudnn_, plan.x, x.raw(), plan.w, w.raw(), plan.conv, plan.y,
                                                      y.raw(), n, got, r, ws, bytes);
      },
      [&](int algo, size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(b_.cudnn_, plan.x, plan.w, plan.conv, plan.y,
                                                       static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
      });
}

void cuda::ConvAlgorithms::find_conv_backward_data(ConvPlan& plan, const Tensor& w, const Tensor& dy,
                                                   const Tensor& dx) {
  plan.bwd_data = search_direction<cudnnConvolutionBwdDataAlgoPerf_t>(
      "conv_backward_data", plan, cuda::ConvDirection::BackwardData, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
      {dx.raw(), w.raw(), dy.raw()}, dx.shape(), w.shape(),
      [&](int n, int* got, cudnnConvolutionBwdDataAlgoPerf_t* r) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(b_.cudnn_, plan.w, plan.y, plan.conv, plan.x, n, got, r);
      },
      [&](int n, int* got, cudnnConvolutionBwdDataAlgoPerf_t* r, void* ws, size_t bytes) {
        return cudnnFindConvolutionBackwardDataAlgorithmEx(b_.cudnn_, plan.w, w.raw(), plan.y, dy.raw(), plan.conv,
                                                           plan.x, dx.raw(), n, got, r, ws, bytes);
      },
      [&](int algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(b_.cudnn_, plan.w, plan.y, plan.conv, plan.x,
                                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
      });
}

void cuda::ConvAlgorithms::find_conv_backward_filter(ConvPlan& plan, const Tensor& x, const Tensor& dy,
                                                     const Tensor& dw) {
  plan.bwd_filter = search_direction<cudnnConvolutionBwdFilterAlgoPerf_t>(
      "conv_backward_filter", plan, cuda::ConvDirection::BackwardFilter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
      {x.raw(), dw.raw(), dy.raw()}, x.shape(), dw.shape(),
      [&](int n, int* got, cudnnConvolutionBwdFilterAlgoPerf_t* r) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(b_.cudnn_, plan.x, plan.y, plan.conv, plan.w, n, got, r);
      },
      [&](int n, int* got, cudnnConvolutionBwdFilterAlgoPerf_t* r, void* ws, size_t bytes) {
        return cudnnFindConvolutionBackwardFilterAlgorithmEx(b_.cudnn_, plan.x, x.raw(), plan.y, dy.raw(), plan.conv,
                                                             plan.w, dw.raw(), n, got, r, ws, bytes);
      },
      [&](int algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(
            b_.cudnn_, plan.x, plan.y, plan.conv, plan.w, static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
      });
}

std::unique_ptr<cuda::ConvGraphPlan> cuda::ConvAlgorithms::cached_graph_plan(
    const std::string& engine, const cuda::ConvGraphSpec& spec,
    const std::function<bool(const cuda::ConvGraphPlan&, void*)>& runs) {
  auto one = cuda::conv_graph_plans(b_.cudnn_, spec, search_workspace_limit(), 1, &engine);
  if (one.empty()) return nullptr;
  SearchBuffer buf(std::max<size_t>(one.front()->workspace_bytes(), size_t{1} << 20), b_.stream());
  if (buf.bytes() < one.front()->workspace_bytes() || !runs(*one.front(), buf.ptr())) return nullptr;
  return std::move(one.front());
}

// The EngineCache key of a search on this backend: `what` after the GPU model, compute capability,
// cuDNN version and, in a green context of fewer SMs than the GPU, the granted SM count, which
// decide what was measured.
std::string cuda::ConvAlgorithms::engine_cache_key(const std::string& what) const {
  const size_t v = cudnnGetVersion();  // cuDNN 9: major * 10000 + minor * 100 + patch
  const int sms = b_.ctx_->granted_sms();
  const std::string partition = sms > 0 && sms < b_.sm_count_ ? fmt::format(" sms {}", sms) : std::string();
  return fmt::format("{} sm_{}{}{} cudnn {}.{}.{} | {}", b_.device_name_, b_.cc_major_, b_.cc_minor_, partition,
                     v / 10000, (v % 10000) / 100, v % 100, what);
}

void cuda::ConvAlgorithms::run_conv_forward(ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor& y) {
  if (run_graph_plan(plan.fwd.graph.get(), x.raw(), w.raw(), y.raw())) return;
  CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, plan.fwd.math));
  void* ws = b_.workspace(plan.fwd.workspace_bytes);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnConvolutionForward(b_.cudnn_, &one, plan.x, x.raw(), plan.w, w.raw(), plan.conv,
                                      static_cast<cudnnConvolutionFwdAlgo_t>(plan.fwd.algo), ws,
                                      plan.fwd.workspace_bytes, &zero, plan.y, y.raw()));
}

void cuda::ConvAlgorithms::run_conv_backward_data(ConvPlan& plan, const Tensor& w, const Tensor& dy, const Tensor& dx) {
  if (run_graph_plan(plan.bwd_data.graph.get(), dx.raw(), w.raw(), dy.raw())) return;
  run_legacy_backward_data(plan, w, dy, dx, 0.0f);
}

void cuda::ConvAlgorithms::run_legacy_backward_data(ConvPlan& plan, const Tensor& w, const Tensor& dy, const Tensor& dx,
                                                    float beta) {
  CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, plan.bwd_data.math));
  void* ws = b_.workspace(plan.bwd_data.workspace_bytes);
  const float one = 1.0f;
  CUDNN_CHECK(cudnnConvolutionBackwardData(b_.cudnn_, &one, plan.w, w.raw(), plan.y, dy.raw(), plan.conv,
                                           static_cast<cudnnConvolutionBwdDataAlgo_t>(plan.bwd_data.algo), ws,
                                           plan.bwd_data.workspace_bytes, &beta, plan.x, dx.raw()));
}

bool cuda::ConvAlgorithms::run_conv_backward_data_add(ConvPlan& plan, const Tensor& w, const Tensor& dy,
                                                      const Tensor& dx) {
  ConvAlgoChoice& c = plan.bwd_data;
  if (c.graph) {
    if (!c.graph_add_tried) {
      c.graph_add_tried = true;
      cuda::ConvGraphSpec spec =
          cuda::conv_graph_spec(cuda::ConvDirection::BackwardData, plan.dtype, plan.layout, plan.x_shape, plan.w_shape,
                                plan.y_shape, plan.params, b_.options_.allow_tf32);
      spec.accumulate = true;
      auto plans = cuda::conv_graph_plans(b_.cudnn_, spec, search_workspace_limit(), 1, &c.graph->name());
      if (!plans.empty()) c.graph_add = std::move(plans.front());
      log::debug("conv_backward_data x {} w {}: graph plan {} {} add to its output", plan.x_shape.to_string(),
                 plan.w_shape.to_string(), c.graph->name(), c.graph_add ? "can" : "cannot");
    }
    if (!c.graph_add) return false;
    // Operands the plan cannot take (misaligned views): the legacy algorithm adds instead.
    if (run_graph_plan(c.graph_add.get(), dx.raw(), w.raw(), dy.raw())) return true;
  }
  run_legacy_backward_data(plan, w, dy, dx, 1.0f);
  return true;
}

void cuda::ConvAlgorithms::run_conv_backward_filter(ConvPlan& plan, const Tensor& x, const Tensor& dy,
                                                    const Tensor& dw) {
  if (run_graph_plan(plan.bwd_filter.graph.get(), x.raw(), dw.raw(), dy.raw())) return;
  CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, plan.bwd_filter.math));
  void* ws = b_.workspace(plan.bwd_filter.workspace_bytes);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnConvolutionBackwardFilter(b_.cudnn_, &one, plan.x, x.raw(), plan.y, dy.raw(), plan.conv,
                                             static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan.bwd_filter.algo), ws,
                                             plan.bwd_filter.workspace_bytes, &zero, plan.w, dw.raw()));
}

cudnnMathType_t cuda::ConvAlgorithms::conv_math(DType dtype) const {
  if (dtype != DType::F32) return CUDNN_TENSOR_OP_MATH;
  return b_.options_.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

}  // namespace cnnscale
