// CUDA graphs: a sequence of backend work captured on the compute stream and replayed with a few
// launches. A timing point recorded during the capture ends one graph and begins the next; a replay
// launches the graphs in order with an ordinary event record between them. Event-record nodes
// inside one graph would save those launches, but re-pointing them at each replay's own events
// (cudaGraphExecEventRecordNodeSetEvent) is refused for timing events, and a handful of graph
// launches per step costs microseconds against a step of milliseconds.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cuda_timing_event.hpp"
#include "core/log.hpp"

namespace cnnscale {

namespace {

// One captured segment: the graph and its executable (both null when the segment queued nothing).
struct Segment {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

void destroy(std::vector<Segment>& segments) {
  for (Segment& s : segments) {
    if (s.exec) cudaGraphExecDestroy(s.exec);
    if (s.graph) cudaGraphDestroy(s.graph);
  }
  segments.clear();
}

class CudaCapturedWork final : public CapturedWork {
 public:
  CudaCapturedWork(std::vector<Segment> segments, cudaStream_t stream, std::shared_ptr<const void> stream_owner,
                   std::shared_ptr<const uint64_t> generation, std::shared_ptr<const cuda::DeviceContext> ctx)
      : segments_(std::move(segments)),
        stream_(stream),
        stream_owner_(std::move(stream_owner)),
        generation_(std::move(generation)),
        captured_at_(*generation_),
        ctx_(std::move(ctx)) {}

  ~CudaCapturedWork() override {
    ctx_->make_current_noexcept();
    // A replay may still be running: graph resources are released once it completes.
    destroy(segments_);
  }

  size_t timing_points() const override { return segments_.size() - 1; }

  bool valid() const override { return *generation_ == captured_at_; }

  void launch(const std::vector<std::shared_ptr<TimingEvent>>& points) override {
    CNNSCALE_CHECK(points.size() == timing_points(), "captured work has {} timing points, {} events given",
                   timing_points(), points.size());
    CNNSCALE_CHECK(valid(), "captured work replayed after the backend replaced a buffer it uses");
    ctx_->make_current();
    for (size_t i = 0; i < segments_.size(); ++i) {
      if (i > 0) CUDA_CHECK(cudaEventRecord(cuda::as_cuda_event(*points[i - 1]).event, stream_));
      if (segments_[i].exec) CUDA_CHECK(cudaGraphLaunch(segments_[i].exec, stream_));
    }
  }

 private:
  std::vector<Segment> segments_;  // timing_points() + 1 of them
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<const void> stream_owner_;  // the backend's stream lives while this does
  std::shared_ptr<const uint64_t> generation_;
  uint64_t captured_at_ = 0;
  std::shared_ptr<const cuda::DeviceContext> ctx_;
};

size_t node_count(cudaGraph_t graph) {
  size_t count = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  return count;
}

}  // namespace

void CudaBackend::begin_capture_segment() {
  CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
}

void CudaBackend::end_capture_segment() {
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream(), &graph);
  if (ended != cudaSuccess || !graph) {
    cudaGetLastError();  // the capture's failure is reported below, not by the next launch check
    if (graph) cudaGraphDestroy(graph);
    throw_runtime(
        "cuda (gpu:{}): the work could not be captured as a CUDA graph ({}: {}); an op in it synchronised "
        "with the host or used another stream (--no-graph skips the attempt)",
        device_, cudaGetErrorName(ended), cudaGetErrorString(ended));
  }
  capture_segments_.push_back(graph);
}

std::unique_ptr<CapturedWork> CudaBackend::capture(const std::function<void()>& work) {
  CNNSCALE_CHECK(!capturing_ && capture_segments_.empty(), "cuda: capture inside a capture");
  activate();
  std::vector<Segment> segments;
  auto abandon = [&] {
    if (capturing_) {
      capturing_ = false;
      cudaGraph_t graph = nullptr;
      cudaStreamEndCapture(stream(), &graph);  // ends the (possibly invalidated) capture
      if (graph) cudaGraphDestroy(graph);
    }
    for (cudaGraph_t g : capture_segments_) cudaGraphDestroy(g);
    capture_segments_.clear();
    destroy(segments);
    cudaGetLastError();
  };
  try {
    begin_capture_segment();
    work();
    end_capture_segment();
    for (cudaGraph_t g : capture_segments_) segments.push_back(Segment{g, nullptr});
    capture_segments_.clear();
    for (Segment& s : segments) {
      if (node_count(s.graph) == 0) continue;  // nothing between two timing points
      CUDA_CHECK(cudaGraphInstantiate(&s.exec, s.graph, 0));
    }
  } catch (...) {
    abandon();
    throw;
  }
  log::debug("cuda (gpu:{}): captured a graph in {} segments", device_, segments.size());
  return std::make_unique<CudaCapturedWork>(std::move(segments), stream(), ds_, buffer_generation_, ctx_);
}

}  // namespace cnnscale
