// CUDA graphs: a sequence of backend work captured on the compute stream and replayed with a few
// launches. Timing points are kept in one of two ways (CaptureOptions):
// - Segments: a point ends one graph and begins the next; a replay launches the graphs in order
//   with an ordinary event record between them, into fresh events. Re-pointing event-record nodes
//   at each replay's own events (cudaGraphExecEventRecordNodeSetEvent) is refused for timing
//   events, and a handful of graph launches per step costs microseconds against milliseconds.
// - Nodes: one graph per copy whose points are external event-record nodes
//   (cudaEventRecordExternal), for work whose second stream runs across a point: a segment cannot
//   end while a forked stream is still apart, so the bucketed exchange, which runs on the
//   communication stream past backward's end, can only be timed this way. The nodes' events are
//   fixed, so the work is captured several times and the replays take the copies in turn, each
//   once nobody holds its previous replay's events.
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

// Segments: one copy of timing_points() + 1 segments and no events. Nodes: copies of one segment
// each, with the events of its timing points.
struct Copy {
  std::vector<Segment> segments;
  std::vector<std::shared_ptr<cuda::CudaTimingEvent>> events;
};

void destroy(std::vector<Copy>& copies) {
  for (Copy& c : copies)
    for (Segment& s : c.segments) {
      if (s.exec) cudaGraphExecDestroy(s.exec);
      if (s.graph) cudaGraphDestroy(s.graph);
    }
  copies.clear();
}

class CudaCapturedWork final : public CapturedWork {
 public:
  CudaCapturedWork(std::vector<Copy> copies, size_t points, cudaStream_t stream, std::shared_ptr<const void> stream_owner,
                   std::shared_ptr<const uint64_t> generation, std::shared_ptr<const cuda::DeviceContext> ctx)
      : copies_(std::move(copies)),
        points_(points),
        stream_(stream),
        stream_owner_(std::move(stream_owner)),
        generation_(std::move(generation)),
        captured_at_(*generation_),
        ctx_(std::move(ctx)) {}

  ~CudaCapturedWork() override {
    ctx_->make_current_noexcept();
    // A replay may still be running: graph resources are released once it completes.
    destroy(copies_);
  }

  size_t timing_points() const override { return points_; }

  bool valid() const override { return *generation_ == captured_at_; }

  bool ready() const override {
    for (const auto& e : copies_[next_].events)
      if (e.use_count() > 1) return false;  // a reader of an earlier replay still holds it
    return true;
  }

  std::vector<std::shared_ptr<TimingEvent>> launch() override {
    CNNSCALE_CHECK(valid(), "captured work replayed after the backend replaced a buffer it uses");
    CNNSCALE_CHECK(ready(), "captured work launched while the events of its next copy are still held");
    ctx_->make_current();
    const Copy& copy = copies_[next_];
    next_ = (next_ + 1) % copies_.size();
    std::vector<std::shared_ptr<TimingEvent>> points;
    if (copy.segments.size() == 1) {  // event nodes, or segments without a point
      points.assign(copy.events.begin(), copy.events.end());
      if (copy.segments[0].exec) CUDA_CHECK(cudaGraphLaunch(copy.segments[0].exec, stream_));
      return points;
    }
    for (size_t i = 0; i < copy.segments.size(); ++i) {
      if (i > 0) {
        points.push_back(cuda::make_timing_event(stream_owner_, ctx_));
        CUDA_CHECK(cudaEventRecord(cuda::as_cuda_event(*points.back()).event, stream_));
      }
      if (copy.segments[i].exec) CUDA_CHECK(cudaGraphLaunch(copy.segments[i].exec, stream_));
    }
    return points;
  }

 private:
  std::vector<Copy> copies_;
  size_t points_ = 0;
  size_t next_ = 0;  // the copy the next replay takes
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

void cuda::GraphCapture::begin_capture_segment(CaptureMode mode) {
  CUDA_CHECK(cudaStreamBeginCapture(b_.stream(), cudaStreamCaptureModeThreadLocal));
  capture_mode_ = mode;
}

void cuda::GraphCapture::end_capture_segment() {
  capture_mode_ = CaptureMode::None;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(b_.stream(), &graph);
  if (ended != cudaSuccess || !graph) {
    cudaGetLastError();  // the capture's failure is reported below, not by the next launch check
    if (graph) cudaGraphDestroy(graph);
    throw_runtime(
        "cuda (gpu:{}): the work could not be captured as a CUDA graph ({}: {}); an op in it synchronised "
        "with the host, used a stream outside the capture or left a forked stream apart (--no-graph skips the "
        "attempt)",
        b_.device_, cudaGetErrorName(ended), cudaGetErrorString(ended));
  }
  capture_segments_.push_back(graph);
}

size_t cuda::GraphCapture::capture_timing_point(cudaStream_t on) {
  CNNSCALE_CHECK(capturing(), "cuda: capture_timing_point outside a capture");
  if (capture_mode_ == CaptureMode::Segments) {
    if (on != b_.stream())
      throw_runtime("cuda (gpu:{}): a timing point on a second stream needs event-node capture", b_.device_);
    end_capture_segment();
    begin_capture_segment(CaptureMode::Segments);
    return capture_segments_.size() - 1;
  }
  std::shared_ptr<cuda::CudaTimingEvent> e = cuda::make_timing_event(b_.ds_, b_.ctx_);
  CUDA_CHECK(cudaEventRecordWithFlags(e->event, on, cudaEventRecordExternal));
  capture_points_.push_back(std::move(e));
  return capture_points_.size() - 1;
}

std::unique_ptr<CapturedWork> cuda::GraphCapture::capture(const std::function<void()>& work,
                                                          const CaptureOptions& options) {
  CNNSCALE_CHECK(!capturing() && capture_segments_.empty(), "cuda: capture inside a capture");
  const bool nodes = options.points == CaptureOptions::Points::Nodes;
  CNNSCALE_CHECK(options.copies >= 1 && (nodes || options.copies == 1), "cuda: {} copies of a segmented capture",
                 options.copies);
  b_.activate();
  std::vector<Copy> copies;
  auto abandon = [&] {
    if (capturing()) {
      capture_mode_ = CaptureMode::None;
      cudaGraph_t graph = nullptr;
      cudaStreamEndCapture(b_.stream(), &graph);  // ends the (possibly invalidated) capture
      if (graph) cudaGraphDestroy(graph);
    }
    for (cudaGraph_t g : capture_segments_) cudaGraphDestroy(g);
    capture_segments_.clear();
    capture_points_.clear();
    destroy(copies);
    cudaGetLastError();
  };
  size_t points = 0;
  try {
    for (int c = 0; c < options.copies; ++c) {
      begin_capture_segment(nodes ? CaptureMode::Nodes : CaptureMode::Segments);
      work();
      end_capture_segment();
      Copy copy;
      for (cudaGraph_t g : capture_segments_) copy.segments.push_back(Segment{g, nullptr});
      capture_segments_.clear();
      copy.events = std::move(capture_points_);
      capture_points_.clear();
      const size_t copy_points = nodes ? copy.events.size() : copy.segments.size() - 1;
      CNNSCALE_CHECK(c == 0 || copy_points == points, "cuda: capture copy {} has {} timing points, the first {}", c,
                     copy_points, points);
      points = copy_points;
      copies.push_back(std::move(copy));
      for (Segment& s : copies.back().segments) {
        if (node_count(s.graph) == 0) continue;  // nothing between two timing points
        CUDA_CHECK(cudaGraphInstantiate(&s.exec, s.graph, 0));
      }
    }
  } catch (...) {
    abandon();
    throw;
  }
  log::debug("cuda (gpu:{}): captured a graph, {} timing points as {}, {} cop{}", b_.device_, points,
             nodes ? "event nodes" : "segments", copies.size(), copies.size() == 1 ? "y" : "ies");
  return std::make_unique<CudaCapturedWork>(std::move(copies), points, b_.stream(), b_.ds_, b_.buffer_generation_,
                                            b_.ctx_);
}

}  // namespace cnnscale
