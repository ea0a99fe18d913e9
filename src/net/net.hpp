// Network: a DAG of named layers over named blobs, built from networks/*.yaml.
// NetSpec parses, expands blocks/repeats, creates layers and infers every shape (no allocation:
// netinfo and the shape tests use it alone). Net allocates a NetSpec on a Backend: one flat buffer
// for all parameters and one for all gradients (so later allreduce works on contiguous buckets),
// activations and their diffs, and runs forward/backward in topological order.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "layers/layer.hpp"
#include "net/gradient_plan.hpp"

namespace cnnscale {

// Command-line overrides of the network file's `input:` section.
struct NetOptions {
  std::optional<std::vector<int64_t>> input_shape;  // per sample (C, H, W)
  std::optional<int64_t> classes;
};

struct LayerInfo {
  std::string name, type;
  std::vector<Shape> bottom_shapes, top_shapes;  // per sample (batch 1)
  int64_t params = 0;
  LayerCost cost;
};

// The keys of a network file (`name`, `input`, ...), of its `input:` and the keys every layer takes
// besides its type's own (LayerTypeDoc::keys): what NetSpec checks, and what the reference lists.
const std::vector<KeyDoc>& network_file_keys();
const std::vector<KeyDoc>& network_input_keys();
const std::vector<KeyDoc>& common_layer_keys();

// A network given on the command line: an existing path is returned as is; a bare name such as
// `caffenet` becomes networks/caffenet.yaml, looked up in the current directory and then in the
// source tree (CNNSCALE_SOURCE_DIR). ConfigError listing the places tried when nothing matches.
std::string resolve_network_path(const std::string& name_or_path);

class NetSpec {
 public:
  // Throws ConfigError naming file, line/column and key path for any invalid input.
  static NetSpec load(const std::string& file, const NetOptions& options = {});
  static NetSpec load_string(const std::string& yaml, const std::string& name, const NetOptions& options = {});

  const std::string& name() const;
  const std::string& file() const;
  const std::vector<int64_t>& input_shape() const;  // per sample (C, H, W)
  int64_t classes() const;
  const std::vector<LayerInfo>& layers() const;
  int64_t total_params() const;
  int64_t forward_macs() const;  // per sample
  std::string resolved_yaml() const;  // the expanded network, for results /config

  NetSpec(NetSpec&&) noexcept;
  NetSpec& operator=(NetSpec&&) noexcept;
  ~NetSpec();
  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  NetSpec();
  std::unique_ptr<Impl> impl_;
};

// What a net is built for. Training allocates every activation gradient backward needs; Inference
// (forward passes in the test phase only, as `cnnscale infer` runs them) allocates none of them,
// which is most of a training net's activation memory beyond the activations themselves, and
// refuses backward and training-phase forwards.
enum class NetUse { Training, Inference };

// Whether a backward pass hands its gradients to the gradient plan's exchange (Exchanged: the
// training step's) or keeps them on this rank (Local: phase loops, probes, a single process). An
// exchanged pass gathers the planned layers' gradients and, summing the compute gradients in place,
// leaves the unmirrored ones for the exchange to round (GradientPlan).
enum class BackwardPass { Local, Exchanged };

class Net {
 public:
  // Allocates everything for `batch` samples and initialises parameters from `seed`
  // (host mt19937_64, so CPU and GPU start from identical weights). `compute`: the storage of
  // activations and the weights' compute copies (bf16/f16: mixed precision over f32 masters).
  // `copies_at_master_offsets`: the compute copies and their gradients are laid out at the masters'
  // offsets (flat_mirrors() and flat_mirror_grads() are (P), with a slot for every parameter, an
  // unmirrored one's never read as a copy), so a 16-bit gradient exchange can sum the compute
  // gradients in place, in the buckets it cuts from the f32 offsets (GradientBuckets).
  Net(const NetSpec& spec, Backend& backend, int64_t batch, uint64_t seed, DType compute = DType::F32,
      NetUse use = NetUse::Training, bool copies_at_master_offsets = false);
  ~Net();

  Backend& backend() const;
  int64_t batch() const;
  NetUse use() const;
  // Re-allocate activations for another batch size (e.g. the last, partial test batch);
  // parameters and state are untouched.
  void reshape(int64_t batch);

  const Tensor& input() const;   // "data" blob (N, C, H, W) f32 (widened to the compute dtype in forward)
  const Tensor& labels() const;  // "label" blob (N) i32

  // `after_layer(l)` (optional) is called, first to last, once layer l (index in layers()) has
  // queued its forward; layers that do not run in `phase` are skipped (per-layer timing).
  // `after_copies` (optional) is called once the weights' compute copies and the input's have been
  // queued, before the first layer: per-layer timing keeps them out of the first layer's time.
  void forward(Phase phase, uint64_t iteration, const std::function<void(size_t layer_index)>& after_layer = {},
               const std::function<void()>& after_copies = {});
  // After forward(Phase::Train, same iteration). `after_layer(l)` is called for every layer, last
  // to first, once layer l (index in layers()) has queued its backward: from then on all gradients
  // of layers l..L-1, a prefix of flat_grads(), are final in stream order (data-parallel buckets
  // start their allreduce there).
  void backward(uint64_t iteration, const std::function<void(size_t layer_index)>& after_layer = {},
                BackwardPass pass = BackwardPass::Local);

  // Multiplies every loss layer's gradient (LayerContext::loss_scale; data parallel: n / B).
  void set_loss_scale(double scale);
  double loss_scale() const;
  // fp16 loss scaling: loss gradients are multiplied by `scale` and the widened f32 parameter
  // gradients divided by it again, so small gradients survive fp16's subnormal range. 1: off.
  void set_grad_scale(double scale);
  double grad_scale() const;
  // The same scale kept in device memory instead, for a step captured for replay whose scale moves
  // between replays: `scale` f32 (2) holds the scale and its exact inverse (powers of two), read by
  // the loss layers and the widening on the device; undefined: back to the host value (1). The
  // host scale must be 1 meanwhile.
  void set_grad_scale_on_device(const Tensor& scale);
  const Tensor& grad_scale_on_device() const;  // undefined when the scale is the host value
  // dst = src times the gradient scale, or divided by it with `inverse`, whichever of the two holds
  // it (queued on the backend): backward's unscaling, and the 16-bit exchange carrying backward's
  // scaled values on the wire.
  void apply_grad_scale(const Tensor& src, const Tensor& dst, bool inverse) const;
  DType compute_dtype() const;
  // The job's other ranks, handed to layers (sync batch norm); null in a single process.
  void set_rank_exchange(RankExchange* ranks);
  // How this net's gradients are written and read (net/gradient_plan.hpp), set once, before the
  // first backward and before the solver or the exchange is made (they read it here); checked
  // (GradientPlan::check) and refused where this net cannot follow it. The default plan: a single
  // process whose update reads the f32 gradients.
  //  - gather_gradients (after set_rank_exchange): which layers form their parameter gradients from
  //    every rank's rows (Layer::gathers_gradients at gather_rows rows per rank on the exchange's
  //    ranks) is decided here, for the run; they gather in BackwardPass::Exchanged passes, with the
  //    rows set_gather_rows last gave (a new largest share keeps the plan).
  //  - update_reads_mirror_grads: backward no longer widens the mirrored parameters' gradients into
  //    flat_grads(), whose mirrored parts then hold nothing of the step: only for a step that
  //    exchanges no gradients but the compute ones, and scales none (backward throws if a gradient
  //    scale is set). With copies_at_master_offsets the update reads every gradient there, and
  //    backward rounds each unmirrored one into its slot (what a 16-bit exchange would have rounded
  //    it to anyway), except in an exchanged pass that sums them in place (sum_compute_grads): the
  //    exchange then rounds a whole bucket's of them in one op before summing it (GradientBuckets),
  //    where ResNet-34 would have 72 launches of its own in backward.
  void set_gradient_plan(const GradientPlan& plan);
  const GradientPlan& gradient_plan() const;
  size_t gathering_layers() const;  // how many layers gather their gradients' rows
  void set_gather_rows(int64_t rows);
  bool layer_gathers(size_t layer_index) const;
  // Inference: the masters will not change, so forward refreshes the 16-bit weight copies once (the
  // next forward) instead of every time. Training must leave it off (the update writes the masters).
  void freeze_weights(bool frozen);
  // Counts reshapes that moved the activation buffers: work captured with the old ones is stale.
  uint64_t generation() const;
  // The training iteration in device memory (i32 (1)), handed to layers (LayerContext): a step
  // captured for replay draws its dropout masks from it. Null (the default): the host value.
  void set_iteration_on_device(const Tensor* iteration);

  // The loss (sum of loss layers' outputs times their weights) as a device scalar (1); no sync.
  const Tensor& loss() const;
  // A named blob's data (e.g. "top1", "top5" from an Accuracy layer).
  const Tensor& blob(const std::string& name) const;
  bool has_blob(const std::string& name) const;
  // Names of the scalar test outputs (Accuracy tops), in network order.
  std::vector<std::string> accuracy_outputs() const;

  std::vector<Layer*> layers() const;
  // Whether layer `index` (of layers()) runs in `phase` (a layer may be limited to one: Accuracy).
  bool runs_in_phase(size_t index, Phase phase) const;
  std::vector<Param*> params() const;      // in network order
  const Tensor& flat_params() const;       // (P) every parameter's f32 master, contiguous
  const Tensor& flat_grads() const;        // (P) every f32 gradient, same offsets
  // (M) the compute copies of the mirrored parameters (ParamSpec::mirrored), in the compute dtype;
  // undefined when no parameter is mirrored. Each Param::data of a mirrored parameter views it.
  // (P) at the masters' offsets where the net was built with copies_at_master_offsets.
  const Tensor& flat_mirrors() const;
  bool copies_at_master_offsets() const;
  // The update just queued also wrote every mirrored parameter's compute copy from the updated
  // masters (Backend::sgd_update_segments with SgdMirrors): the next forward, and only the next,
  // skips converting them. Whoever writes the masters in any other way must not call this.
  void mirrors_written_by_update();
  // (M) the gradients of the compute copies, same offsets and layouts as flat_mirrors().
  const Tensor& flat_mirror_grads() const;
  bool update_reads_mirror_grads() const { return gradient_plan().update_reads_mirror_grads; }
  // Non-learned state (batch norm running statistics) as (layer/name, tensor), for checkpoints.
  std::vector<std::pair<std::string, Tensor>> state() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cnnscale
