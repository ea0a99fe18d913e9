// CUDA graphs: a sequence of backend work captured once on the compute stream and replayed with
// one launch. Timing points recorded during the capture are external event-record nodes; each
// replay points them at fresh events, so per-phase times stay per iteration.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_timing_event.hpp"
#include "core/log.hpp"

namespace cnnscale {

namespace {

class CudaCapturedWork final : public CapturedWork {
 public:
  CudaCapturedWork(cudaGraph_t graph, cudaGraphExec_t exec, std::vector<cudaGraphNode_t> points, cudaStream_t stream,
                   std::shared_ptr<const void> stream_owner, std::shared_ptr<const uint64_t> generation,
                   std::shared_ptr<const cuda::DeviceContext> ctx, std::vector<std::shared_ptr<TimingEvent>> placeholders)
      : graph_(graph),
        exec_(exec),
        points_(std::move(points)),
        stream_(stream),
        stream_owner_(std::move(stream_owner)),
        generation_(std::move(generation)),
        captured_at_(*generation_),
        ctx_(std::move(ctx)),
        placeholders_(std::move(placeholders)) {}

  ~CudaCapturedWork() override {
    ctx_->make_current_noexcept();
    // A replay may still be running: graph resources are released once it completes.
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }

  size_t timing_points() const override { return points_.size(); }

  bool valid() const override { return *generation_ == captured_at_; }

  void launch(const std::vector<std::shared_ptr<TimingEvent>>& points) override {
    CNNSCALE_CHECK(points.size() == points_.size(), "captured work has {} timing points, {} events given",
                   points_.size(), points.size());
    CNNSCALE_CHECK(valid(), "captured work replayed after the backend replaced a buffer it uses");
    ctx_->make_current();
    // Changes to an instantiated graph apply to later launches only: replays already queued keep
    // the events they were launched with.
    for (size_t i = 0; i < points_.size(); ++i)
      CUDA_CHECK(cudaGraphExecEventRecordNodeSetEvent(exec_, points_[i], cuda::as_cuda_event(*points[i]).event));
    CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
  }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::vector<cudaGraphNode_t> points_;  // event-record nodes, in capture order
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<const void> stream_owner_;  // the backend's stream lives while this does
  std::shared_ptr<const uint64_t> generation_;
  uint64_t captured_at_ = 0;
  std::shared_ptr<const cuda::DeviceContext> ctx_;
  std::vector<std::shared_ptr<TimingEvent>> placeholders_;  // the events the nodes were captured with
};

}  // namespace

std::unique_ptr<CapturedWork> CudaBackend::capture(const std::function<void()>& work) {
  CNNSCALE_CHECK(!capturing_, "cuda: capture inside a capture");
  activate();
  cudaStream_t s = stream();
  capture_points_.clear();
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  cudaGraph_t graph = nullptr;
  try {
    work();
  } catch (...) {
    capturing_ = false;
    cudaStreamEndCapture(s, &graph);  // ends the (possibly invalidated) capture; the error is the one thrown
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    capture_points_.clear();
    throw;
  }
  capturing_ = false;
  const cudaError_t ended = cudaStreamEndCapture(s, &graph);
  if (ended != cudaSuccess || !graph) {
    cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    capture_points_.clear();
    throw_runtime(
        "cuda (gpu:{}): the training step could not be captured as a CUDA graph ({}: {}); an op in it "
        "synchronised with the host or used another stream. Run without --graph",
        device_, cudaGetErrorName(ended), cudaGetErrorString(ended));
  }
  std::vector<std::shared_ptr<TimingEvent>> placeholders = std::move(capture_points_);
  capture_points_.clear();
  cudaGraphExec_t exec = nullptr;
  std::vector<cudaGraphNode_t> points(placeholders.size(), nullptr);
  try {
    size_t count = 0;
    CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type{};
      CUDA_CHECK(cudaGraphNodeGetType(node, &type));
      if (type != cudaGraphNodeTypeEventRecord) continue;
      cudaEvent_t event = nullptr;
      CUDA_CHECK(cudaGraphEventRecordNodeGetEvent(node, &event));
      for (size_t i = 0; i < placeholders.size(); ++i)
        if (cuda::as_cuda_event(*placeholders[i]).event == event) points[i] = node;
    }
    for (size_t i = 0; i < points.size(); ++i)
      CNNSCALE_CHECK(points[i] != nullptr, "cuda: timing point {} of the capture has no event-record node", i);
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  } catch (...) {
    if (exec) cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    throw;
  }
  log::debug("cuda (gpu:{}): captured a graph with {} timing points", device_, points.size());
  return std::make_unique<CudaCapturedWork>(graph, exec, std::move(points), s, ds_, buffer_generation_, ctx_,
                                            std::move(placeholders));
}

}  // namespace cnnscale
