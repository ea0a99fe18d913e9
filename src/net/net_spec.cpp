// NetSpec: parse a network file, expand blocks and variables, validate the DAG (blobs, names,
// phases, bottom/top counts, unknown keys), create each layer and infer shapes at batch 1.
// No memory is allocated here: netinfo and the shape tests use NetSpec alone.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/checked_math.hpp"
#include "core/text_file.hpp"
#include "net/blocks.hpp"
#include "net/net_spec_impl.hpp"
#include "net/variables.hpp"

namespace cnnscale {

namespace {

// Variables every network file may use; `vars:` cannot redefine them.
const std::set<std::string> kReservedVars = {"classes", "channels", "height", "width", "in", "last", "index"};

struct BlobRecord {
  Shape shape;                 // batch 1
  std::string producer;        // layer name, empty for the network inputs
  std::optional<Phase> phase;  // phase of the producing layer
};

std::string phase_name(const std::optional<Phase>& p) {
  return !p ? "both phases" : *p == Phase::Train ? "phase train" : "phase test";
}

std::vector<std::string> as_names(const std::vector<ConfigNode>& nodes) {
  std::vector<std::string> out;
  for (const auto& n : nodes) out.push_back(n.as<std::string>());
  return out;
}

void check_count(const ConfigNode& layer, const std::string& key, const std::string& type, size_t got,
                 std::pair<int, int> range) {
  if (static_cast<int>(got) >= range.first && static_cast<int>(got) <= range.second) return;
  std::string want = range.first == range.second ? std::to_string(range.first)
                                                 : fmt::format("{} to {}", range.first, range.second);
  auto c = layer.child(key);
  (c ? *c : layer).fail(fmt::format("{} takes {} {}(s), got {}", type, want, key, got));
}

class SpecBuilder {
 public:
  SpecBuilder(NetSpec::Impl& impl) : impl_(impl) {}

  void build(const std::string& source, const std::string& file, const NetOptions& options) {
    const std::string text = net::protect_references(source);
    ConfigNode root = ConfigNode::load_string(text, file);
    root.require_map();
    root.check_keys(key_names(network_file_keys()));
    impl_.file = file;
    impl_.name = root.get_or<std::string>("name", std::filesystem::path(file).stem().string());
    read_input(root, options);
    net::VarScope scope = global_scope(root);
    auto expanded = net::expand_layers(root, text, scope);
    blobs_["data"] = {Shape({1, impl_.input_shape[0], impl_.input_shape[1], impl_.input_shape[2]}), "", {}};
    blobs_["label"] = {Shape({1}), "", {}};
    for (size_t i = 0; i < expanded.size(); ++i) {
      try {
        add_layer(expanded[i].node, i, expanded[i].origin);
      } catch (const ConfigError& e) {
        net::rethrow_with_origin(e, expanded[i].origin);
      }
    }
    impl_.resolved_yaml = emit_resolved();
  }

 private:
  void read_input(const ConfigNode& root, const NetOptions& options) {
    ConfigNode input = root["input"];
    input.require_map();
    input.check_keys(key_names(network_input_keys()));
    ConfigNode shape = input["shape"];
    impl_.input_shape = shape.as_list<int64_t>();
    if (impl_.input_shape.size() != 3) shape.fail("expected [channels, height, width]");
    for (int64_t d : impl_.input_shape)
      if (d <= 0) shape.fail("every input dimension must be positive");
    if (const std::string why = tensor_size_problem(Shape(impl_.input_shape)); !why.empty())
      shape.fail("a sample " + why);
    impl_.classes = input.get<int64_t>("classes");
    if (impl_.classes <= 0) input["classes"].fail("expected a positive number of classes");
    if (options.input_shape) {
      if (options.input_shape->size() != 3)
        throw_config("--input-shape: expected C,H,W (3 values), got {}", options.input_shape->size());
      for (int64_t d : *options.input_shape)
        if (d <= 0) throw_config("--input-shape: every dimension must be positive");
      if (const std::string why = tensor_size_problem(Shape(*options.input_shape)); !why.empty())
        throw_config("--input-shape: a sample {}", why);
      impl_.input_shape = *options.input_shape;
    }
    if (options.classes) {
      if (*options.classes <= 0) throw_config("--classes: expected a positive number, got {}", *options.classes);
      impl_.classes = *options.classes;
    }
    // Per sample: the input and its label.
    impl_.values_per_sample = impl_.input_shape[0] * impl_.input_shape[1] * impl_.input_shape[2] + 1;
  }

  net::VarScope global_scope(const ConfigNode& root) const {
    net::VarScope scope;
    scope.set("classes", std::to_string(impl_.classes));
    scope.set("channels", std::to_string(impl_.input_shape[0]));
    scope.set("height", std::to_string(impl_.input_shape[1]));
    scope.set("width", std::to_string(impl_.input_shape[2]));
    if (auto vars = root.child("vars")) {
      vars->require_map();
      // In file order, so a variable may use the ones defined before it.
      for (const auto& key : vars->keys()) {
        ConfigNode value = (*vars)[key];
        if (kReservedVars.count(key)) value.fail(fmt::format("'{}' is a built-in variable and cannot be redefined", key));
        if (!value.is_scalar()) value.fail("a variable must be a scalar");
        scope.set(key, net::substitute(value.as<std::string>(), scope, value));
      }
    }
    return scope;
  }

  // Layer names become HDF5 paths in checkpoints and run.h5 ("<layer>/<param>"): a layer named
  // after another plus '/' ("x" and "x/weight") would make one's array the other's group, and an
  // empty, "." or ".." part is no group of its own. Refused here, not when the first file is written.
  void check_layer_path(const std::string& name, const ConfigNode& name_node) const {
    auto nested = [&](const std::string& outer, const std::string& other_name, const ConfigNode& other) {
      name_node.fail(fmt::format("layer '{}' and layer '{}' (defined at {}) would share the HDF5 group '{}' in "
                                 "checkpoints and results; rename one",
                                 name, other_name, other.where(), outer));
    };
    for (size_t start = 0;;) {
      const size_t end = name.find('/', start);
      const std::string part = name.substr(start, end == std::string::npos ? std::string::npos : end - start);
      if (part.empty() || part == "." || part == "..")
        name_node.fail(fmt::format("layer name '{}': '/' separates non-empty parts other than . and ..", name));
      if (end == std::string::npos) break;
      if (auto it = layer_nodes_.find(name.substr(0, end)); it != layer_nodes_.end())
        nested(it->first, it->first, it->second);
      start = end + 1;
    }
    if (auto it = layer_nodes_.lower_bound(name + "/"); it != layer_nodes_.end() && it->first.starts_with(name + "/"))
      nested(name, it->first, it->second);
  }

  void add_layer(const ConfigNode& node, size_t index, const std::string& origin) {
    ConfigNode name_node = node["name"];
    std::string name = name_node.as<std::string>();
    std::string type = node.get<std::string>("type");
    if (auto it = layer_nodes_.find(name); it != layer_nodes_.end())
      name_node.fail(fmt::format("duplicate layer name '{}' (first defined at {})", name, it->second.where()));
    check_layer_path(name, name_node);
    layer_nodes_.emplace(name, name_node);

    SpecLayer spec;
    spec.origin = origin;
    if (auto p = node.child("phase")) {
      std::string v = p->as<std::string>();
      if (v != "train" && v != "test") p->fail(fmt::format("expected train or test, got '{}'", v));
      spec.phase = v == "train" ? Phase::Train : Phase::Test;
    }
    node["top"];  // every layer produces something; fails with the path when missing
    std::vector<ConfigNode> bottom_nodes = net::blob_name_nodes(node, "bottom");
    std::vector<ConfigNode> top_nodes = net::blob_name_nodes(node, "top");
    spec.config = LayerConfig{name, type, as_names(bottom_nodes), as_names(top_nodes), node, index};

    std::unique_ptr<Layer> layer = create_layer(spec.config);
    std::set<std::string> allowed = key_names(common_layer_keys());
    for (const auto& k : layer_type_doc(type).keys) allowed.insert(k.name);
    node.check_keys(allowed);
    check_count(node, "bottom", type, bottom_nodes.size(), layer->bottom_count());
    check_count(node, "top", type, top_nodes.size(), layer->top_count());

    std::vector<Shape> bottom_shapes;
    for (const auto& b : bottom_nodes) bottom_shapes.push_back(bottom_shape(b, spec.phase));
    for (size_t i = 0; i < top_nodes.size(); ++i) {
      std::string top = top_nodes[i].as<std::string>();
      if (auto it = blobs_.find(top); it != blobs_.end())
        top_nodes[i].fail(it->second.producer.empty()
                              ? fmt::format("blob '{}' is a network input and cannot be a top", top)
                              : fmt::format("blob '{}' is already produced by layer '{}' (tops must be unique; "
                                            "in-place layers are not supported)",
                                            top, it->second.producer));
      for (size_t j = 0; j < i; ++j)
        if (top_nodes[j].as<std::string>() == top) top_nodes[i].fail(fmt::format("blob '{}' listed twice", top));
    }

    std::vector<Shape> top_shapes = layer->infer_shapes(bottom_shapes);
    CNNSCALE_CHECK(top_shapes.size() == top_nodes.size(), "layer '{}' ({}) inferred {} top shapes for {} tops", name,
                   type, top_shapes.size(), top_nodes.size());
    for (size_t i = 0; i < top_nodes.size(); ++i) {
      // Every size later code multiplies (a batch of this blob, a kernel over it) starts bounded here.
      if (const std::string why = tensor_size_problem(top_shapes[i]); !why.empty())
        top_nodes[i].fail(fmt::format("blob '{}' {}", top_nodes[i].as<std::string>(), why));
      blobs_[top_nodes[i].as<std::string>()] = {top_shapes[i], name, spec.phase};
      add_bounded(impl_.values_per_sample, top_shapes[i].numel(), node, "activation values per sample");
    }

    LayerInfo info;
    info.name = name;
    info.type = type;
    info.bottom_shapes = bottom_shapes;
    info.top_shapes = top_shapes;
    for (const auto& p : layer->param_specs()) {
      if (const std::string why = tensor_size_problem(p.shape); !why.empty())
        node.fail(fmt::format("parameter '{}' {}", p.name, why));
      info.params += p.shape.numel();
    }
    // All parameters live in one flat buffer (and its gradient): they share the one-tensor bound.
    add_bounded(params_, info.params, node, "parameters");
    info.cost = layer->cost(bottom_shapes, top_shapes);  // after the bounds: its products stay in range
    macs_ = checked_add(macs_, info.cost.forward_macs).value_or(-1);
    if (macs_ < 0) node.fail("the network's forward multiply-accumulates per sample overflow 64 bits");
    if (layer->is_loss()) spec.loss_weight = layer->loss_weight();  // valid after infer_shapes
    impl_.layers.push_back(std::move(spec));
    impl_.infos.push_back(std::move(info));
  }

  // total += n, failing at `node` when the sum passes kMaxElements.
  static void add_bounded(int64_t& total, int64_t n, const ConfigNode& node, const std::string& what) {
    const auto sum = checked_add(total, n);
    if (!sum || *sum > kMaxElements) node.fail(fmt::format("the network's {} add up to more than 2^40", what));
    total = *sum;
  }

  // The shape of an existing blob that a layer running in `phase` may read.
  Shape bottom_shape(const ConfigNode& bottom, const std::optional<Phase>& phase) const {
    std::string name = bottom.as<std::string>();
    auto it = blobs_.find(name);
    if (it == blobs_.end())
      bottom.fail(fmt::format("blob '{}' does not exist (a bottom must be data, label or a top of an earlier layer)",
                              name));
    // A layer may only read blobs that are fresh whenever it runs.
    const auto& producer_phase = it->second.phase;
    if (producer_phase && producer_phase != phase)
      bottom.fail(fmt::format("blob '{}' is produced only in {} (layer '{}') but this layer runs in {}", name,
                              phase_name(producer_phase), it->second.producer, phase_name(phase)));
    return it->second.shape;
  }

  std::string emit_resolved() const {
    YAML::Emitter out;
    out << YAML::Comment(fmt::format("{} expanded by cnnscale from {}: blocks and variables resolved", impl_.name,
                                     impl_.file));
    out << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value << impl_.name;
    out << YAML::Key << "input" << YAML::Value << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "shape" << YAML::Value << YAML::Flow << impl_.input_shape;
    out << YAML::Key << "classes" << YAML::Value << impl_.classes << YAML::EndMap;
    out << YAML::Key << "layers" << YAML::Value << YAML::BeginSeq;
    for (const auto& l : impl_.layers) out << l.config.node.yaml();
    out << YAML::EndSeq << YAML::EndMap;
    return std::string(out.c_str()) + "\n";
  }

  NetSpec::Impl& impl_;
  std::map<std::string, BlobRecord> blobs_;
  std::map<std::string, ConfigNode> layer_nodes_;
  int64_t params_ = 0, macs_ = 0;  // running totals, checked as each layer adds to them
};

}  // namespace

const std::vector<KeyDoc>& network_file_keys() {
  static const std::string built_in = [] {
    std::string names;
    for (const auto& v : kReservedVars) names += (names.empty() ? "" : ", ") + v;
    return names;
  }();
  static const std::vector<KeyDoc> k = {
      {"name", "string", "the file's name without .yaml", "the network's name in tables and results"},
      {"input", "mapping", "required", "one sample and the number of classes (keys below)"},
      {"vars", "mapping of scalars", "none",
       "variables for `${...}` references, evaluated in order; the built-in names (" + built_in +
           ") cannot be redefined"},
      {"blocks", "mapping of block name to block", "none", "reusable lists of layers, instantiated by `repeat`"},
      {"layers", "non-empty list", "required",
       "the layers in the order they run; an item is a layer mapping or `{repeat: {...}}`"},
  };
  return k;
}

const std::vector<KeyDoc>& network_input_keys() {
  static const std::vector<KeyDoc> k = {
      {"shape", "[channels, height, width]", "required",
       "one sample: blob `data` is (N, C, H, W) f32 (`--input-shape C,H,W` overrides it)"},
      {"classes", "integer >= 1", "required", "the number of classes: blob `label` is (N) i32 (`--classes K`)"},
  };
  return k;
}

const std::vector<KeyDoc>& common_layer_keys() {
  static const std::vector<KeyDoc> k = {
      {"name", "string", "required", "unique in the network; part of the HDF5 paths of its parameters"},
      {"type", "a layer type", "required", "one of the layer types below"},
      {"bottom", "blob name or list", "none",
       "the blobs read: data, label or a top of an earlier layer; how many depends on the type"},
      {"top", "blob name or list", "required", "the blobs produced, each new (no in-place layers)"},
      {"phase", "train | test", "both", "run only in this phase (Accuracy: `phase: test`)"},
  };
  return k;
}

NetSpec::NetSpec() : impl_(std::make_unique<Impl>()) {}
NetSpec::NetSpec(NetSpec&&) noexcept = default;
NetSpec& NetSpec::operator=(NetSpec&&) noexcept = default;
NetSpec::~NetSpec() = default;

NetSpec NetSpec::load(const std::string& file, const NetOptions& options) {
  return load_string(read_config_text(file, "network file"), file, options);
}

void check_batch_fits(const NetSpec::Impl& spec, int64_t batch) {
  // Activations only: their gradients and the parameters come on top, so this is a lower bound of
  // what the net would ask for, enough to refuse a batch that cannot be allocated at all.
  const auto values = checked_mul(spec.values_per_sample, batch);
  if (!values || *values > kMaxElements)
    throw_config("batch {}: {} ({}) holds {} activation values per sample: {} samples are more than 2^40 values",
                 batch, spec.name, spec.file, spec.values_per_sample, batch);
}

NetSpec NetSpec::load_string(const std::string& yaml, const std::string& name, const NetOptions& options) {
  NetSpec spec;
  SpecBuilder(*spec.impl_).build(yaml, name, options);
  return spec;
}

const std::string& NetSpec::name() const { return impl_->name; }
const std::string& NetSpec::file() const { return impl_->file; }
const std::vector<int64_t>& NetSpec::input_shape() const { return impl_->input_shape; }
int64_t NetSpec::classes() const { return impl_->classes; }
const std::vector<LayerInfo>& NetSpec::layers() const { return impl_->infos; }
std::string NetSpec::resolved_yaml() const { return impl_->resolved_yaml; }

int64_t NetSpec::total_params() const {
  int64_t n = 0;
  for (const auto& l : impl_->infos) n += l.params;
  return n;
}

int64_t NetSpec::forward_macs() const {
  int64_t n = 0;
  for (const auto& l : impl_->infos) n += l.cost.forward_macs;
  return n;
}

std::string rewritten_net_yaml(const NetSpec& from, const std::string& comment,
                               const std::vector<YAML::Node>& layers) {
  YAML::Emitter out;
  out << YAML::Comment(comment);
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << from.name();
  out << YAML::Key << "input" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "shape" << YAML::Value << YAML::Flow << from.input_shape();
  out << YAML::Key << "classes" << YAML::Value << from.classes() << YAML::EndMap;
  out << YAML::Key << "layers" << YAML::Value << YAML::BeginSeq;
  for (const YAML::Node& layer : layers) out << layer;
  out << YAML::EndSeq << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace cnnscale
