// cuDNN graph API convolutions (see cudnn_graph.hpp). The backend descriptors are plain C handles;
// each is owned by a shared_ptr so that the plans of one operation graph keep alive what they were
// built from (tensors, convolution, operation, graph), as the API requires of a plan's inputs.
#include "backend/cuda/cudnn_graph.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <utility>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/cudnn_descriptors.hpp"
#include "core/log.hpp"

namespace cnnscale::cuda {
namespace {

using Desc = std::shared_ptr<void>;

// The operands' ids in every variant pack; the bias and the virtual intermediates of a bias_relu
// graph (conv(x, w), then conv + bias) after them, then a residual graph's addend and its
// intermediate (conv + bias + addend).
constexpr int64_t kUidX = 1, kUidW = 2, kUidY = 3, kUidBias = 4, kUidConv = 5, kUidBiased = 6, kUidAddend = 7,
                  kUidSummed = 8, kUidScale = 9, kUidScaled = 10, kUidAddendScale = 11, kUidAddendScaled = 12;
// Every operand is promised 16-byte aligned: allocations come from the memory pool (256-byte
// aligned) and parameter views start at kParamAlignment elements; execute() checks it per call.
constexpr int64_t kAlignment = 16;

Desc make_desc(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d = nullptr;
  CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d));
  return Desc(d, [](void* p) { cudnnBackendDestroyDescriptor(static_cast<cudnnBackendDescriptor_t>(p)); });
}

void set(const Desc& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
         const void* value) {
  CUDNN_CHECK(cudnnBackendSetAttribute(d.get(), name, type, count, value));
}
void set_desc(const Desc& d, cudnnBackendAttributeName_t name, const Desc& value) {
  void* v = value.get();
  set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

Desc tensor(int64_t uid, const GraphTensor& t, cudnnDataType_t type, bool is_virtual = false) {
  Desc d = make_desc(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  if (is_virtual) set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t.dims.data());
  set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t.strides.data());
  set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kAlignment);
  CUDNN_CHECK(cudnnBackendFinalize(d.get()));
  return d;
}

Desc convolution(const ConvGraphSpec& s) {
  Desc d = make_desc(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  // fp32 accumulation in every floating-point precision; int8 products sum exactly in int32.
  const cudnnDataType_t compute = s.int8 ? CUDNN_DATA_INT32 : CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t spatial = 2;
  set(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  set(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  set(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial);
  set(d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, s.dilation.data());
  set(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, s.stride.data());
  set(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, s.pad.data());
  set(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, s.pad.data());
  CUDNN_CHECK(cudnnBackendFinalize(d.get()));
  return d;
}

// The operation node of the spec's direction over tensors x, w, y (dx, dw, dy where they are outputs
// or gradients), with alpha 1 and beta 0: outputs are overwritten, as the legacy calls do.
Desc operation(const ConvGraphSpec& s, const Desc& conv, const Desc& x, const Desc& w, const Desc& y) {
  struct Names {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
  };
  static constexpr Names kForward{CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
  static constexpr Names kData{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
  static constexpr Names kFilter{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                                 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                                 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                                 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                                 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                                 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                                 CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  const Names& n = s.direction == ConvDirection::Forward        ? kForward
                   : s.direction == ConvDirection::BackwardData ? kData
                                                                : kFilter;
  Desc d = make_desc(n.type);
  set_desc(d, n.x, x);
  set_desc(d, n.w, w);
  set_desc(d, n.y, y);
  set_desc(d, n.conv, conv);
  const float alpha = 1.0f, beta = s.accumulate ? 1.0f : 0.0f;
  set(d, n.alpha, CUDNN_TYPE_FLOAT, 1, &alpha);
  set(d, n.beta, CUDNN_TYPE_FLOAT, 1, &beta);
  CUDNN_CHECK(cudnnBackendFinalize(d.get()));
  return d;
}

// A pointwise operation out = mode(in) (RELU_FWD) or out = in + b (ADD), in fp32.
Desc pointwise(cudnnPointwiseMode_t mode, const Desc& in, const Desc* b, const Desc& out) {
  Desc pw = make_desc(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
  set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision);
  CUDNN_CHECK(cudnnBackendFinalize(pw.get()));
  Desc op = make_desc(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
  set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, in);
  if (b) set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, out);
  CUDNN_CHECK(cudnnBackendFinalize(op.get()));
  return op;
}

// The engine configurations one heuristics mode proposes, best first; none if the mode has
// nothing for this graph.
std::vector<Desc> heuristic_configs(const Desc& graph, cudnnBackendHeurMode_t mode) {
  Desc heur = make_desc(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) return {};
  int64_t count = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                               nullptr) != CUDNN_STATUS_SUCCESS ||
      count <= 0)
    return {};
  std::vector<Desc> configs;
  std::vector<void*> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.push_back(make_desc(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs.back().get());
  }
  int64_t got = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                               raw.data()) != CUDNN_STATUS_SUCCESS)
    return {};
  configs.resize(static_cast<size_t>(std::clamp<int64_t>(got, 0, count)));
  return configs;
}

// What an engine configuration is: its engine's index, knob choices and notes.
struct ConfigFacts {
  std::string name;
  std::vector<cudnnBackendNumericalNote_t> numerical;
  std::vector<cudnnBackendBehaviorNote_t> behavior;
};

bool config_facts(const Desc& config, ConfigFacts& facts) {
  Desc engine = make_desc(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  void* e = engine.get();
  int64_t n = 0;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) !=
      CUDNN_STATUS_SUCCESS)
    return false;
  int64_t index = -1;
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index) !=
      CUDNN_STATUS_SUCCESS)
    return false;
  facts.name = fmt::format("eng{}", index);
  cudnnBackendNumericalNote_t numerical[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, numerical) != CUDNN_STATUS_SUCCESS)
    return false;
  facts.numerical.assign(numerical, numerical + std::clamp<int64_t>(n, 0, CUDNN_NUMERICAL_NOTE_TYPE_COUNT));
  cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, behavior) != CUDNN_STATUS_SUCCESS)
    return false;
  facts.behavior.assign(behavior, behavior + std::clamp<int64_t>(n, 0, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT));
  // Knob choices complete the name: one engine with other tile sizes is another candidate.
  std::vector<Desc> knobs;
  std::vector<void*> raw;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; ++i) {
    knobs.push_back(make_desc(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR));
    raw.push_back(knobs.back().get());
  }
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               CUDNN_KNOB_TYPE_COUNTS, &n, raw.data()) != CUDNN_STATUS_SUCCESS)
    return false;
  for (int64_t i = 0; i < std::clamp<int64_t>(n, 0, CUDNN_KNOB_TYPE_COUNTS); ++i) {
    cudnnBackendKnobType_t type{};
    int64_t value = 0, got = 0;
    if (cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &got, &type) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &got, &value) !=
            CUDNN_STATUS_SUCCESS)
      return false;
    facts.name += fmt::format("_k{}={}", static_cast<int>(type), value);
  }
  return true;
}

// Which engines a run may use. Accumulation stays fp32 in every precision (no reduced-precision
// reduction); f32 data uses tensor cores (TF32, which down-converts the inputs) only where TF32 is
// allowed, as in the legacy path; engines that need reordered int8 filters or biases cannot take
// our operands. (Deterministic runs use no graph plans: their choice must not depend on timing.)
const char* refusal(const ConvGraphSpec& s, const ConfigFacts& f) {
  auto has = [](const auto& notes, auto note) { return std::find(notes.begin(), notes.end(), note) != notes.end(); };
  if (has(f.numerical, CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)) return "reduced-precision reduction";
  const bool tf32 = has(f.numerical, CUDNN_NUMERICAL_NOTE_TENSOR_CORE) ||
                    has(f.numerical, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS);
  if (s.data_type == CUDNN_DATA_FLOAT && !s.allow_tf32 && tf32)
    return "TF32 not allowed";
  if (has(f.behavior, CUDNN_BEHAVIOR_NOTE_REQUIRES_FILTER_INT8x32_REORDER) ||
      has(f.behavior, CUDNN_BEHAVIOR_NOTE_REQUIRES_BIAS_INT8x32_REORDER))
    return "needs int8 reordering";
  return nullptr;
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kAlignment == 0; }

}  // namespace

ConvGraphPlan::~ConvGraphPlan() = default;

GraphTensor graph_tensor(const Shape& s, Layout layout) {
  GraphTensor t;
  t.dims = {s[0], s[1], s[2], s[3]};
  if (layout == Layout::NHWC)
    t.strides = {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
  else
    t.strides = {s[1] * s[2] * s[3], s[2] * s[3], s[3], 1};
  return t;
}

ConvGraphSpec conv_bias_relu_graph_spec(DType dtype, Layout layout, const Shape& x, const Shape& w, const Shape& y,
                                        const ConvParams& p, bool allow_tf32) {
  ConvGraphSpec spec = conv_graph_spec(ConvDirection::Forward, dtype, layout, x, w, y, p, allow_tf32);
  spec.bias_relu = true;
  return spec;
}

ConvGraphSpec conv_bias_graph_spec(DType dtype, Layout layout, const Shape& x, const Shape& w, const Shape& y,
                                   const ConvParams& p, bool allow_tf32) {
  ConvGraphSpec spec = conv_bias_relu_graph_spec(dtype, layout, x, w, y, p, allow_tf32);
  spec.relu = false;
  return spec;
}

ConvGraphSpec conv_int8_graph_spec(const Shape& x, const Shape& w, const Shape& y, const ConvParams& p, DType y_dtype,
                                   std::optional<DType> addend, bool addend_scaled, bool relu) {
  ConvGraphSpec spec = conv_bias_relu_graph_spec(DType::I8, Layout::NHWC, x, w, y, p, false);
  spec.int8 = true;
  spec.y_type = cudnn_type(y_dtype);
  spec.addend = addend.has_value();
  spec.z_type = addend ? cudnn_type(*addend) : spec.y_type;
  spec.z_scaled = addend.has_value() && addend_scaled;
  spec.relu = relu;
  return spec;
}

ConvGraphSpec conv_residual_graph_spec(DType dtype, Layout layout, const Shape& x, const Shape& w, const Shape& y,
                                       const ConvParams& p, bool allow_tf32) {
  ConvGraphSpec spec = conv_bias_relu_graph_spec(dtype, layout, x, w, y, p, allow_tf32);
  spec.addend = true;
  return spec;
}

ConvGraphSpec conv_graph_spec(ConvDirection direction, DType dtype, Layout layout, const Shape& x, const Shape& w,
                              const Shape& y, const ConvParams& p, bool allow_tf32) {
  ConvGraphSpec spec;
  spec.direction = direction;
  spec.data_type = cudnn_type(dtype);
  spec.x = graph_tensor(x, layout);
  spec.w = graph_tensor(w, layout);
  spec.y = graph_tensor(y, layout);
  spec.pad = {p.pad_h, p.pad_w};
  spec.stride = {p.stride_h, p.stride_w};
  spec.dilation = {p.dilation_h, p.dilation_w};
  spec.allow_tf32 = allow_tf32;
  return spec;
}

cudnnStatus_t ConvGraphPlan::execute(cudnnHandle_t handle, void* x, void* w, void* y, void* workspace, void* bias,
                                     void* addend, void* scale, void* addend_scale) const {
  if (!aligned(x) || !aligned(w) || !aligned(y) || (workspace_bytes_ > 0 && !aligned(workspace)) ||
      (bias != nullptr) != bias_relu_ || (bias && !aligned(bias)) || (addend != nullptr) != addend_ ||
      (addend && !aligned(addend)) || (scale != nullptr) != int8_ || (scale && !aligned(scale)) ||
      (addend_scale != nullptr) != z_scaled_ || (addend_scale && !aligned(addend_scale)))
    return CUDNN_STATUS_BAD_PARAM;
  // A variant pack per distinct set of pointers: a training step calls each convolution with the
  // same buffers every iteration, so building it once per call site saves host time op by op.
  const std::array<void*, 8> key{x, w, y, workspace, bias, addend, scale, addend_scale};
  if (!pack_ || key != pack_key_) {
    Desc pack = make_desc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    std::vector<int64_t> uids{kUidX, kUidW, kUidY};
    std::vector<void*> pointers{x, w, y};
    for (const auto& [uid, p] :
         {std::pair{kUidBias, bias}, {kUidAddend, addend}, {kUidScale, scale}, {kUidAddendScale, addend_scale}})
      if (p) {
        uids.push_back(uid);
        pointers.push_back(p);
      }
    const auto n = static_cast<int64_t>(uids.size());
    set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data());
    set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, pointers.data());
    set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    const cudnnStatus_t st = cudnnBackendFinalize(pack.get());
    if (st != CUDNN_STATUS_SUCCESS) return st;
    pack_ = std::move(pack);
    pack_key_ = key;
  }
  return cudnnBackendExecute(handle, plan_.get(), pack_.get());
}

std::vector<std::unique_ptr<ConvGraphPlan>> conv_graph_plans(cudnnHandle_t handle, const ConvGraphSpec& spec,
                                                             size_t max_workspace, int max_plans,
                                                             const std::string* only_engine) {
  std::vector<std::unique_ptr<ConvGraphPlan>> plans;
  if (max_plans <= 0) return plans;
  // y (and a residual addend) of their own type in an int8 graph, of the operands' otherwise.
  const cudnnDataType_t y_type = spec.int8 ? spec.y_type : spec.data_type;
  std::vector<Desc> base{tensor(kUidX, spec.x, spec.data_type), tensor(kUidW, spec.w, spec.data_type),
                         tensor(kUidY, spec.y, y_type), convolution(spec)};
  std::vector<Desc> nodes;
  if (!spec.bias_relu) {
    nodes.push_back(operation(spec, base[3], base[0], base[1], base[2]));
  } else if (spec.accumulate) {
    return plans;  // an epilogue's output is written, not added to
  } else {
    if (spec.direction != ConvDirection::Forward) return plans;
    // conv(x, w), conv + bias (+ z) stay in fp32 inside the fused kernel: each pointwise node writes
    // a virtual fp32 tensor, and the last one y.
    const int64_t k = spec.y.dims[1];
    const GraphTensor bias_t{{1, k, 1, 1}, {k, 1, 1, 1}};
    base.push_back(tensor(kUidBias, bias_t, spec.int8 ? CUDNN_DATA_FLOAT : spec.data_type));          // [4]
    base.push_back(tensor(kUidConv, spec.y, spec.int8 ? CUDNN_DATA_INT32 : CUDNN_DATA_FLOAT, true));  // [5]
    nodes.push_back(operation(spec, base[3], base[0], base[1], base[5]));
    auto output = [&](int64_t uid, bool last) {
      if (last) return size_t{2};  // y
      base.push_back(tensor(uid, spec.y, CUDNN_DATA_FLOAT, true));
      return base.size() - 1;
    };
    size_t in = 5;
    if (spec.int8) {  // acc * scale: the int32 sums back in the input's and filters' units
      base.push_back(tensor(kUidScale, bias_t, CUDNN_DATA_FLOAT));
      const size_t scale = base.size() - 1;
      const size_t scaled = output(kUidScaled, false);
      nodes.push_back(pointwise(CUDNN_POINTWISE_MUL, base[in], &base[scale], base[scaled]));
      in = scaled;
    }
    size_t out = output(kUidBiased, !spec.addend && !spec.relu);
    nodes.push_back(pointwise(CUDNN_POINTWISE_ADD, base[in], &base[4], base[out]));
    in = out;
    if (spec.addend) {
      base.push_back(tensor(kUidAddend, spec.y, spec.int8 ? spec.z_type : y_type));
      size_t z = base.size() - 1;
      if (spec.z_scaled) {  // an addend in other units (int8, or y's scaled): z * z_scale
        base.push_back(tensor(kUidAddendScale, bias_t, CUDNN_DATA_FLOAT));
        const size_t z_scale = base.size() - 1;
        const size_t scaled = output(kUidAddendScaled, false);
        nodes.push_back(pointwise(CUDNN_POINTWISE_MUL, base[z], &base[z_scale], base[scaled]));
        z = scaled;
      }
      out = output(kUidSummed, !spec.relu);
      nodes.push_back(pointwise(CUDNN_POINTWISE_ADD, base[in], &base[z], base[out]));
      in = out;
    }
    if (spec.relu) nodes.push_back(pointwise(CUDNN_POINTWISE_RELU_FWD, base[in], nullptr, base[2]));
  }
  Desc graph = make_desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<void*> ops;
  for (const Desc& n : nodes) ops.push_back(n.get());
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops.size()),
      ops.data());
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  if (cudnnBackendFinalize(graph.get()) != CUDNN_STATUS_SUCCESS) return plans;

  std::set<std::string> seen;
  std::string refused;
  // Mode A's list, then mode B's where it adds engines: for CaffeNet's conv4 forward mode A alone
  // proposed one engine, about twice as slow as one mode B adds
  // (docs/measurements/2026-11-25-convolution-choices.md).
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_FALLBACK}) {
    // The fallback list only where the others have nothing: its engines are general but slow (one
    // took thousands of times as long as mode A's engines:
    // docs/measurements/2026-11-25-convolution-choices.md).
    if (mode == CUDNN_HEUR_MODE_FALLBACK && !plans.empty()) break;
    for (const Desc& config : heuristic_configs(graph, mode)) {
      if (static_cast<int>(plans.size()) >= max_plans) break;
      ConfigFacts facts;
      if (!config_facts(config, facts) || !seen.insert(facts.name).second) continue;
      if (only_engine && facts.name != *only_engine) continue;
      if (const char* why = refusal(spec, facts)) {
        refused += fmt::format(" {} ({})", facts.name, why);
        continue;
      }
      Desc plan = make_desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      set_desc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config);
      if (cudnnBackendFinalize(plan.get()) != CUDNN_STATUS_SUCCESS) continue;  // not for this device or shape
      int64_t workspace = 0, n = 0;
      if (cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                   &workspace) != CUDNN_STATUS_SUCCESS ||
          workspace < 0 || static_cast<size_t>(workspace) > max_workspace)
        continue;
      auto p = std::unique_ptr<ConvGraphPlan>(new ConvGraphPlan());
      p->owned_ = base;
      p->owned_.insert(p->owned_.end(), nodes.begin(), nodes.end());
      p->owned_.push_back(graph);
      p->owned_.push_back(config);
      p->plan_ = std::move(plan);
      p->workspace_bytes_ = static_cast<size_t>(workspace);
      p->name_ = std::move(facts.name);
      p->bias_relu_ = spec.bias_relu;
      p->addend_ = spec.addend;
      p->int8_ = spec.int8;
      p->z_scaled_ = spec.z_scaled;
      plans.push_back(std::move(p));
    }
  }
  if (!refused.empty()) log::debug("cuDNN graph engines refused:{}", refused);
  return plans;
}

}  // namespace cnnscale::cuda
