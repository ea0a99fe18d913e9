// InferenceEngine: a network in its inference form on one backend, ready to run forward-only
// batches of any size: weights from a training checkpoint (or the seeded initialisation), one net
// per batch size sharing those weights, each with its input filled once on the device, so a timed
// batch is the forward pass alone (no host work, no transfer). Where the backend can capture (CUDA),
// each batch size's forward pass is captured as a CUDA graph after its first, uncaptured pass and
// replayed from then on: one launch per batch instead of one per op.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.hpp"
#include "net/fold.hpp"
#include "net/fuse.hpp"
#include "net/int8_spec.hpp"
#include "net/net.hpp"

namespace cnnscale::infer {

// What the input holds while batches are timed. Power depends on the data: an all-zero input lets
// the multipliers idle and under-reports watts, so both choices are non-zero.
enum class InputFill {
  Gaussian,  // N(0, 1), seeded: like real normalised images
  Constant,  // every element 0.5: the same value in every batch (reproducible power readings)
};
InputFill parse_input_fill(const std::string& text);  // "gaussian" | "constant"; ConfigError otherwise
std::string input_fill_name(InputFill fill);

struct EngineOptions {
  Precision precision = Precision::FP32;
  std::string checkpoint;  // empty: the net's seeded initialisation
  // Batch norms that follow a convolution folded into it (net/fold.hpp): the same outputs to fp32
  // rounding, one layer and one pass over the activations fewer each.
  bool fold_batch_norm = true;
  // Then every epilogue fused into the layer before it (net/fuse.hpp): a convolution's ReLU, and a
  // residual block's shortcut sum and ReLU into its last convolution; the same outputs to rounding,
  // one op and one pass over an activation fewer each.
  bool fuse_epilogues = true;
  // Non-empty: the convolutions named here run in int8 with these input scales (a calibration
  // table's, net/int8_spec.hpp), the rest of the network in `precision`.
  std::map<std::string, double> int8_input_scales;
  InputFill fill = InputFill::Gaussian;
  uint64_t seed = 1;
  bool cuda_graph = true;  // false: every forward pass queued op by op (--no-graph)
};

class InferenceEngine {
 public:
  // `spec` must be the network the checkpoint was trained as (names and shapes are checked).
  InferenceEngine(const NetSpec& spec, Backend& backend, EngineOptions options);
  ~InferenceEngine();

  // Queues one forward pass (test phase) of `batch` samples; the first call for a batch size builds
  // its net (allocation, and on a GPU the algorithm searches), so time only after a warm-up.
  void run(int64_t batch);
  void synchronize() { backend_.synchronize(); }
  // Builds the net of `batch` now (throws the backend's out-of-memory error if it does not fit).
  Net& net(int64_t batch);
  // Drops every net but the weights' source (frees their memory, e.g. between batch sizes).
  void release_nets();

  const NetSpec& spec() const { return spec_; }  // as trained
  // What runs: the folded network, or the trained one when nothing was folded.
  const NetSpec& run_spec() const {
    return int8_ ? int8_->spec : fused_ ? fused_->spec : folded_ ? folded_->spec : spec_;
  }
  // The int8 form, where int8_input_scales asked for one: which convolutions run in int8.
  const Int8Spec* int8() const { return int8_ ? &*int8_ : nullptr; }
  // The convolutions that ran as int8 kernels in a forward pass so far (those of int8() whose
  // backend had an int8 engine for their shape), in network order; empty before any pass.
  std::vector<std::string> int8_layers_run() const;
  size_t folded_batch_norms() const { return folded_ ? folded_->folded.size() : 0; }
  size_t fused_epilogues() const { return fused_ ? fused_->fused.size() : 0; }
  // "on" once a forward pass has been replayed from a graph, otherwise "off: <why>" (as train's
  // cuda_graph); graph_replays counts the replayed passes.
  std::string cuda_graph() const;
  int64_t graph_replays() const { return graph_replays_; }
  Backend& backend() { return backend_; }
  const EngineOptions& options() const { return options_; }

 private:
  const NetSpec& spec_;
  Backend& backend_;
  EngineOptions options_;
  std::optional<FoldedSpec> folded_;  // set when at least one batch norm folded
  std::optional<FusedSpec> fused_;    // set when at least one epilogue fused (into the folded net)
  std::optional<Int8Spec> int8_;      // set with int8_input_scales
  std::unique_ptr<Net> source_;       // batch 1 of run_spec(): holds the weights every batch size copies
  struct BatchNet {
    std::unique_ptr<Net> net;
    std::unique_ptr<CapturedWork> graph;  // after the first pass, where capture is possible
    int64_t passes = 0;
  };
  std::map<int64_t, BatchNet> nets_;
  BatchNet& batch_net(int64_t batch);  // built, weights copied and input filled on first use
  std::string graph_note_;  // why no pass is replayed ("" while graphs are possible)
  int64_t graph_replays_ = 0;
};

// The network a run of a trained model uses: `net` (a name or a YAML path) where given, else the one
// the checkpoint holds (ConfigError where it holds none).
NetSpec network_to_run(const std::string& net, const std::string& checkpoint);

}  // namespace cnnscale::infer
