// Layer test harness (see layer_harness.hpp).
#include "layer_harness.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include "core/config.hpp"
#include "layers/filler.hpp"
#include "net/net.hpp"

namespace cnnscale::testing {

namespace {

std::vector<std::string> names_or_default(const ConfigNode& node, const std::string& key, size_t count,
                                          const std::string& prefix) {
  if (auto c = node.child(key)) return c->as_list<std::string>();
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

}  // namespace

LayerHarness make_layer(Backend& backend, const std::string& yaml, const std::vector<Shape>& bottom_shapes,
                        uint64_t seed, const std::vector<DType>& bottom_dtypes, DType compute) {
  ConfigNode root = ConfigNode::load_string(yaml, "test_layer.yaml");
  ConfigNode node(root.yaml(), root.file(), "layers[0]");
  node.require_map();

  LayerConfig cfg;
  cfg.type = node.get<std::string>("type");
  cfg.name = node.get_or<std::string>("name", "layer");
  cfg.bottoms = names_or_default(node, "bottom", bottom_shapes.size(), "bottom");
  cfg.tops = names_or_default(node, "top", 1, "top");
  cfg.node = node;
  cfg.layer_index = 3;  // arbitrary but fixed: decorrelates from a layer at index 0
  cfg.activation_dtype = compute;
  // The net's rules: the backend's memory order for this compute dtype (channels-last on a GPU in
  // 16 bits and TF32) for 4-d tensors of the compute dtype.
  const Layout layout = backend.activation_layout_for(compute);
  cfg.activation_layout = layout;
  auto activation = [&](const Shape& s, DType dtype) {
    return backend.alloc(s, dtype).as_layout(activation_layout(layout, s, dtype, compute));
  };

  LayerHarness h;
  h.backend = &backend;
  h.seed = seed;
  h.layer = create_layer(cfg);
  Layer& layer = *h.layer;

  // The net's checks, in the net's order: keys, then bottom/top counts, then shapes.
  std::set<std::string> allowed = key_names(common_layer_keys());
  for (const auto& k : layer_type_doc(cfg.type).keys) allowed.insert(k.name);
  node.check_keys(allowed);
  auto [bmin, bmax] = layer.bottom_count();
  auto [tmin, tmax] = layer.top_count();
  auto nb = static_cast<int>(cfg.bottoms.size()), nt = static_cast<int>(cfg.tops.size());
  if (nb != static_cast<int>(bottom_shapes.size()))
    node.fail(fmt::format("harness: {} bottom names for {} shapes", nb, bottom_shapes.size()));
  if (nb < bmin || nb > bmax) node.fail(fmt::format("expected {}..{} bottoms, got {}", bmin, bmax, nb));
  if (nt < tmin || nt > tmax) node.fail(fmt::format("expected {}..{} tops, got {}", tmin, tmax, nt));

  h.bottom_shapes = bottom_shapes;
  h.top_shapes = layer.infer_shapes(bottom_shapes);
  CNNSCALE_CHECK(h.top_shapes.size() == cfg.tops.size(), "{} top shapes for {} tops", h.top_shapes.size(),
                 cfg.tops.size());

  // Parameters: one flat data and one flat diff buffer with per-parameter views, like the net.
  std::vector<ParamSpec> specs = layer.param_specs();
  int64_t total = 0;
  for (const auto& s : specs) total += s.shape.numel();
  h.flat_params = backend.alloc(Shape{total});
  h.flat_grads = backend.alloc(Shape{total});
  std::mt19937_64 rng(seed);
  int64_t offset = 0;
  for (const auto& s : specs) {
    Tensor master = h.flat_params.view(offset, s.shape), master_diff = h.flat_grads.view(offset, s.shape);
    Param p{s, master, master_diff, master, master_diff};
    if (s.mirrored()) {  // a 16-bit or channels-last compute copy beside the f32 master, as the net keeps
      p.data = backend.alloc(s.shape, s.dtype).as_layout(s.layout);
      p.diff = backend.alloc(s.shape, s.dtype).as_layout(s.layout);
    }
    std::vector<float> host(static_cast<size_t>(s.shape.numel()));
    fill_param(s, rng, host.data());
    from_host(backend, p.master, host);
    if (s.mirrored()) from_host(backend, p.data, host);
    layer.params().push_back(p);
    offset += s.shape.numel();
  }
  for (const auto& s : layer.state_specs()) {
    Tensor t = backend.alloc(s.shape);
    backend.fill(t, s.init);
    layer.state().push_back(t);
  }

  for (size_t i = 0; i < bottom_shapes.size(); ++i) {
    // bottom_dtypes says float (F32) or labels (I32); floats take the compute dtype.
    DType dtype = i < bottom_dtypes.size() && bottom_dtypes[i] == DType::I32 ? DType::I32 : compute;
    h.bottoms.push_back(activation(bottom_shapes[i], dtype));
    if (dtype != DType::I32) {
      fill_uniform(backend, h.bottoms.back(), seed * 1000 + i, -1.0f, 1.0f);
      h.bottom_diffs.push_back(activation(bottom_shapes[i], dtype));
    } else {
      h.bottom_diffs.emplace_back();
    }
  }
  for (size_t i = 0; i < h.top_shapes.size(); ++i) {
    h.tops.push_back(activation(h.top_shapes[i], layer.top_dtype(i)));
    h.top_diffs.push_back(activation(h.top_shapes[i], layer.top_dtype(i)));
  }
  layer.setup(backend);
  return h;
}

void LayerHarness::forward(Phase phase) {
  LayerContext ctx{*backend, phase, seed, iteration};
  layer->forward(ctx, bottoms, tops);
}

void LayerHarness::backward(Phase phase) {
  LayerContext ctx{*backend, phase, seed, iteration};
  std::vector<bool> propagate;
  for (const auto& b : bottoms) propagate.push_back(b.dtype() != DType::I32);
  layer->backward(ctx, bottoms, tops, top_diffs, propagate, bottom_diffs);
}

std::vector<float> to_host(Backend& backend, const Tensor& t) {
  CNNSCALE_CHECK(t.dtype() != DType::I32, "to_host: tensor is {}", dtype_name(t.dtype()));
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::F32 && t.layout() == Layout::NCHW) {
    backend.download(t, out.data());
  } else {  // 16-bit or channels-last: widened exactly into NCHW f32 on the backend first
    Tensor wide = backend.alloc(t.shape());
    backend.convert(t, wide);
    backend.download(wide, out.data());
  }
  return out;
}

void from_host(Backend& backend, const Tensor& t, const std::vector<float>& values) {
  CNNSCALE_CHECK(t.dtype() != DType::I32 && static_cast<int64_t>(values.size()) == t.numel(),
                 "from_host: {} values for {} {}", values.size(), dtype_name(t.dtype()), t.shape().to_string());
  if (t.dtype() == DType::F32 && t.layout() == Layout::NCHW) {
    backend.upload(values.data(), t);
  } else {  // 16-bit or channels-last: rounded to nearest even and/or permuted by the backend
    Tensor wide = backend.alloc(t.shape());
    backend.upload(values.data(), wide);
    backend.convert(wide, t);
  }
  backend.synchronize();  // the host vector dies after this call
}

void set_labels(Backend& backend, const Tensor& t, const std::vector<int32_t>& labels) {
  CNNSCALE_CHECK(t.dtype() == DType::I32 && static_cast<int64_t>(labels.size()) == t.numel(),
                 "set_labels: {} labels for {} {}", labels.size(), dtype_name(t.dtype()), t.shape().to_string());
  backend.upload(labels.data(), t);
  backend.synchronize();
}

void fill_uniform(Backend& backend, const Tensor& t, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (auto& x : v) x = dist(rng);
  from_host(backend, t, v);
}

void fill_distinct(Backend& backend, const Tensor& t, uint64_t seed, float spacing) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  const float center = static_cast<float>(v.size() - 1) * spacing / 2.0f;
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * spacing - center;
  std::mt19937_64 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  from_host(backend, t, v);
}

}  // namespace cnnscale::testing
