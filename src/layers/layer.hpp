// Layer: one node of the network DAG. A layer parses its YAML parameters, infers its output shapes
// (validating its inputs), declares learnable parameters and state, and runs forward/backward via
// Backend ops. Adding a layer = one source file ending in CNNSCALE_REGISTER_LAYER, plus tests.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/config.hpp"
#include "core/key_doc.hpp"
#include "core/tensor.hpp"

namespace cnnscale {

enum class Phase { Train, Test };

// How a parameter is initialised.
struct Filler {
  std::string type = "constant";  // constant, gaussian, uniform, xavier, msra
  float value = 0.0f;             // constant
  float mean = 0.0f, std = 0.01f; // gaussian
  float min = 0.0f, max = 1.0f;   // uniform
  // xavier / msra: variance from fan_in (default, as Caffe), fan_out or average.
  std::string variance_norm = "fan_in";
  static Filler parse(const ConfigNode& node);  // {type: gaussian, std: 0.01}
  static const std::vector<KeyDoc>& keys();      // the keys of the mapping form, which parse checks
};

struct ParamSpec {
  std::string name;  // "weight", "bias", "scale", "shift"
  Shape shape;
  Filler filler;
  float lr_mult = 1.0f;
  float decay_mult = 1.0f;
  int64_t fan_in = 1, fan_out = 1;  // for xavier/msra
  // Storage of the data and diff the layer computes with. The net keeps an f32 master copy and an
  // f32 gradient of every parameter; a 16-bit or channels-last parameter's data is refreshed from its
  // master before each forward and its diff converted into the f32 gradient after the layer's backward.
  DType dtype = DType::F32;
  // Memory order of the compute copy (data and diff; the f32 master is always NCHW): convolution
  // filters follow the activations' layout, (K, R, S, C/groups) in memory when channels-last.
  Layout layout = Layout::NCHW;
  // Whether the layer computes on a copy of the master rather than on the master itself.
  bool mirrored() const { return dtype != DType::F32 || layout != Layout::NCHW; }
};

// A learnable parameter bound by the net: views into the net's flat buffers. data/diff are what the
// layer computes with (spec.dtype); master/master_diff are the f32 copies the solver, the gradient
// exchange and checkpoints use. For an f32 parameter they are the same views.
struct Param {
  ParamSpec spec;
  Tensor data;
  Tensor diff;
  Tensor master;
  Tensor master_diff;
};

// Non-learned tensors that belong in checkpoints (batch norm running statistics).
struct StateSpec {
  std::string name;
  Shape shape;
  float init = 0.0f;
};

// Per-sample cost of a layer, for netinfo and GFLOPS.
struct LayerCost {
  int64_t forward_macs = 0;   // multiply-accumulates per sample
  int64_t bytes_read = 0;     // per sample, activations + parameters, at their dtypes' sizes
  int64_t bytes_written = 0;  // per sample
};

// How a layer reaches the other ranks of a data-parallel job (synchronised batch norm) without
// knowing MPI from NCCL or including the parallel layer: src/parallel implements it over the job's
// communicator and the net hands it down in LayerContext.
class RankExchange {
 public:
  virtual ~RankExchange() = default;
  virtual int ranks() const = 0;
  // Every rank's `values` (the same length on every rank), indexed by rank, with identical bits on
  // every rank. Blocks the host.
  virtual std::vector<std::vector<float>> allgather(Backend& backend, const std::vector<float>& values) = 0;
  // On the device: `all` (ranks x mine.numel(), mine's dtype) receives every rank's `mine`, rank
  // r's at r x mine.numel(), queued after the compute work so far; wait_gathers() then makes the
  // compute stream (on the CPU, the host) wait for every gather issued.
  virtual void gather_async(const Tensor& mine, const Tensor& all) = 0;
  virtual void wait_gathers() = 0;
};

struct LayerContext {
  Backend& backend;
  Phase phase = Phase::Train;
  uint64_t seed = 0;        // run seed
  uint64_t iteration = 0;   // global iteration: drives dropout masks, so resume is exact
  // The same iteration in device memory (i32 (1)), set for a step that is captured for replay:
  // layers that draw per iteration read it there instead of baking `iteration` into the capture.
  const Tensor* iteration_on_device = nullptr;
  // Loss layers multiply their gradient by this. A data-parallel rank holding n of the B samples
  // of a global batch sets n / B: its mean-over-n gradient becomes its share of the mean over B,
  // so the SUM allreduce of all ranks' gradients is the one-process gradient of the global batch.
  double loss_scale = 1.0;
  // fp16 loss scaling with the scale in device memory (f32, the scale at [0]; null: none, or folded
  // into loss_scale): loss layers multiply their gradient by it as well, on the device.
  const Tensor* grad_scale_on_device = nullptr;
  // The ranks of a data-parallel job (null in a single process); sync batch norm reduces with it.
  RankExchange* ranks = nullptr;
  // > 0 in a backward whose gradients the ranks exchange with gathering on (Net::
  // set_gradient_gathering): the rows every rank contributes (the largest share). A layer whose
  // gathers_gradients(gather_rows, ranks) holds then forms its parameter gradients from every
  // rank's rows, gathered through `ranks`: the job's gradient, the same on every rank, which the
  // allreduce then leaves out.
  int64_t gather_rows = 0;
};

// What the net passes to a layer at construction.
struct LayerConfig {
  std::string name;
  std::string type;
  std::vector<std::string> bottoms;
  std::vector<std::string> tops;
  ConfigNode node;         // the whole layer mapping (for parameters and errors)
  uint64_t layer_index = 0;  // position in the net; decorrelates per-layer random streams
  DType activation_dtype = DType::F32;  // storage of this layer's tops and their diffs
  // Memory order the net prefers for 4-d activations (activation_layout() in core/tensor.hpp says
  // which tensors actually take it): Backend::activation_layout_for, channels-last on the GPU in
  // 16 bits and TF32.
  Layout activation_layout = Layout::NCHW;
};

class Layer {
 public:
  explicit Layer(LayerConfig cfg) : cfg_(std::move(cfg)) {}
  virtual ~Layer() = default;

  const std::string& name() const { return cfg_.name; }
  const std::string& type() const { return cfg_.type; }
  const LayerConfig& config() const { return cfg_; }
  const std::vector<std::string>& bottoms() const { return cfg_.bottoms; }
  const std::vector<std::string>& tops() const { return cfg_.tops; }

  // The keys this layer accepts besides the common ones, and its bottom and top counts, are its
  // type's LayerTypeDoc (each layer class's static doc(), registered with its type); the net rejects
  // any other key and checks the counts before infer_shapes.
  std::pair<int, int> bottom_count() const;  // {min, max}
  std::pair<int, int> top_count() const;

  // Validate the inputs and return the output shapes; errors go through cfg_.node.fail(...) so
  // they name the file, line and key path. Called once, before param_specs/state_specs.
  virtual std::vector<Shape> infer_shapes(const std::vector<Shape>& bottoms) = 0;
  virtual std::vector<ParamSpec> param_specs() const { return {}; }
  virtual std::vector<StateSpec> state_specs() const { return {}; }
  virtual LayerCost cost(const std::vector<Shape>& bottoms, const std::vector<Shape>& tops) const;

  // Called by the net once params_ and state_ are bound, before the first forward.
  virtual void setup(Backend&) {}
  virtual void forward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top) = 0;
  // top_diff: gradients of the loss w.r.t. the tops. Writes bottom_diff[i] when propagate[i]
  // (overwriting, or adding where adds_bottom_diff(i)) and the diff of every parameter (overwriting).
  virtual void backward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top,
                        const std::vector<Tensor>& top_diff, const std::vector<bool>& propagate,
                        const std::vector<Tensor>& bottom_diff) = 0;
  // Loss layers produce a scalar the net differentiates from (dloss = loss_weight x ctx.loss_scale).
  virtual bool is_loss() const { return false; }
  // Weight of a loss layer's (unweighted) output in the net's total loss (YAML `loss_weight`);
  // meaningful only when is_loss(), valid after infer_shapes.
  virtual float loss_weight() const { return 1.0f; }
  // Layers that only run in one phase (Accuracy: test) say so; the net skips them otherwise.
  virtual bool has_backward() const { return true; }
  // Whether a training pass reads the other ranks' values through the host (sync batch norm's
  // statistics), which no captured step can do.
  virtual bool exchanges_on_host() const { return false; }
  // Whether, on `ranks` ranks of `rows` samples each, this layer forms its parameter gradients from
  // the gathered rows (LayerContext::gather_rows) rather than leaving them to the allreduce: where
  // that moves fewer bytes. The net, the gradient buckets and the layer's backward ask alike.
  virtual bool gathers_gradients(int64_t /*rows*/, int /*ranks*/) const { return false; }
  // Storage of top `i` and its gradient: the net's activation dtype, except where a layer's output
  // stays fp32 in every precision (losses, accuracies).
  virtual DType top_dtype(size_t /*top*/) const { return cfg_.activation_dtype; }
  // How `backend` ran this layer's work, where it chose among implementations (a convolution's
  // form and algorithm per direction; Backend::conv_implementation): `cnnscale time` shows it. Empty
  // for layers with nothing to choose, and before the first forward.
  virtual std::string implementation(const Backend& /*backend*/) const { return {}; }

  // Gradient accumulation. A blob read by several layers has one gradient: its first consumer in
  // backward order writes it, and each later one that can_add_bottom_diff adds to it, with no
  // buffer of its own to sum afterwards (the net plans this; see Net::Impl::plan_backward).
  virtual bool can_add_bottom_diff(size_t /*bottom*/) const { return false; }
  // Set by the net: per bottom, whether backward adds to bottom_diff, and the scratch (bottom_diff's
  // shape) the backend may need for that, undefined where it adds in place.
  void set_bottom_diff_adds(std::vector<bool> adds, std::vector<Tensor> scratch) {
    adds_ = std::move(adds);
    add_scratch_ = std::move(scratch);
  }
  bool adds_bottom_diff(size_t bottom) const { return bottom < adds_.size() && adds_[bottom]; }

  std::vector<Param>& params() { return params_; }
  const std::vector<Param>& params() const { return params_; }
  std::vector<Tensor>& state() { return state_; }
  const std::vector<Tensor>& state() const { return state_; }

 protected:
  LayerConfig cfg_;
  std::vector<Param> params_;  // bound by the net, in param_specs() order
  std::vector<Tensor> state_;  // bound by the net, in state_specs() order
  std::vector<bool> adds_;     // see set_bottom_diff_adds
  std::vector<Tensor> add_scratch_;
};

// What a layer type is for, the keys it takes besides the common ones (name, type, bottom, top,
// phase) and its bottom and top counts: declared once by each layer class as `static LayerTypeDoc
// doc()`, next to the parsing of those keys. The net checks layers against it and `cnnscale netinfo
// --layers` lists it.
struct LayerTypeDoc {
  std::string summary;  // one or two sentences: what the layer computes, its bottoms and tops
  std::vector<KeyDoc> keys;
  std::pair<int, int> bottoms{1, 1};  // how many bottoms and tops a layer of the type takes: {min, max}
  std::pair<int, int> tops{1, 1};
};

// Registry keyed by the YAML `type:`.
using LayerFactory = std::unique_ptr<Layer> (*)(LayerConfig);
// RuntimeError when `type` is already registered: two layers must not claim one YAML type.
void register_layer(const std::string& type, LayerFactory factory, LayerTypeDoc doc);
std::unique_ptr<Layer> create_layer(LayerConfig cfg);  // ConfigError naming the file/line if unknown
std::vector<std::string> registered_layer_types();     // sorted by name
// The registered type's doc; RuntimeError for a type that is not registered.
const LayerTypeDoc& layer_type_doc(const std::string& type);

// Registers a layer type during static initialisation; a duplicate ends the program with one line
// naming the type (there is no caller yet to catch an exception).
struct LayerRegistrar {
  LayerRegistrar(const char* type, LayerFactory factory, LayerTypeDoc (*doc)());
};

}  // namespace cnnscale

// Registration: one line at the bottom of each layer file, and nothing else to edit, e.g.
//   CNNSCALE_REGISTER_LAYER(Convolution, ConvolutionLayer)
// registers the factory and ConvolutionLayer::doc() under the type `Convolution`.
// The layers library is linked whole (CMake's WHOLE_ARCHIVE), so no layer file is dropped for
// having no referenced symbol.
#define CNNSCALE_REGISTER_LAYER(type_name, Class)                                                   \
  namespace cnnscale {                                                                              \
  namespace {                                                                                       \
  const LayerRegistrar registrar_##type_name(#type_name, [](LayerConfig c) -> std::unique_ptr<Layer> { \
    return std::make_unique<Class>(std::move(c));                                                   \
  }, &Class::doc);                                                                                  \
  }                                                                                                 \
  }
