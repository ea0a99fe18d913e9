// Batch-norm folding: the inference network's spec (which BatchNorms go into which convolutions)
// and the folded weights. The spec is produced as YAML text and loaded like any network file, so
// the folded NetSpec is built, validated and shape-inferred by the one code path that builds every
// other NetSpec, and its resolved_yaml() is the network an inference run really used.
#include "net/fold.hpp"

#include <cmath>
#include <map>
#include <set>

#include "net/net_spec_impl.hpp"

namespace cnnscale {

namespace {

// BatchNorm's eps when the layer gives none (batch_norm_layer.cpp); read as a float, as the layer
// does, so that the fold divides by exactly the value the layer's test-phase forward uses.
constexpr float kBatchNormDefaultEps = 1e-5f;

// The convolution `bn` can be folded into, if any (see fold_batch_norm in fold.hpp).
std::optional<size_t> foldable_into(const std::vector<SpecLayer>& layers, const BlobUse& use, const SpecLayer& bn) {
  if (bn.config.type != "BatchNorm" || bn.config.bottoms.size() != 1) return std::nullopt;
  // A fused ReLU (relu: true) would be lost: a convolution has none.
  if (const YAML::Node relu = bn.config.node.yaml()["relu"]; relu && relu.as<bool>()) return std::nullopt;
  const std::string& input = bn.config.bottoms[0];
  auto producer = use.producer.find(input);
  if (producer == use.producer.end()) return std::nullopt;  // a network input
  const SpecLayer& conv = layers[producer->second];
  if (conv.config.type != "Convolution" || conv.config.tops.size() != 1) return std::nullopt;
  // The convolution's output must be the BatchNorm's alone: another reader would see it changed.
  if (!use.only_reader(input)) return std::nullopt;
  // A convolution that also runs where the BatchNorm does not would compute a different function.
  if (conv.phase != bn.phase) return std::nullopt;
  return producer->second;
}

// The network as NetSpec's resolved YAML writes it (name, input after command-line overrides,
// plain layers), minus the folded BatchNorms, with each folded convolution rewired to the top of
// its BatchNorm and given a bias. Layer mappings are cloned: the trained spec's nodes stay as they are.
std::string folded_yaml(const NetSpec& trained, const std::map<size_t, size_t>& bn_of_conv,
                        const std::set<size_t>& folded_bns) {
  const auto& layers = trained.impl().layers;
  std::vector<YAML::Node> nodes;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (folded_bns.count(i)) continue;
    YAML::Node node = YAML::Clone(layers[i].config.node.yaml());
    if (auto bn = bn_of_conv.find(i); bn != bn_of_conv.end()) {
      node["top"] = YAML::Clone(layers[bn->second].config.node.yaml()["top"]);
      node["bias"] = true;
    }
    nodes.push_back(node);
  }
  return rewritten_net_yaml(trained, fmt::format("{} from {}, batch norm folded into {} convolution(s)",
                                                 trained.name(), trained.file(), folded_bns.size()),
                            nodes);
}

std::vector<float> download(Backend& backend, const Tensor& t) {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  backend.download(t, host.data());
  return host;
}

const Layer& trained_layer(const std::map<std::string, const Layer*>& by_name, const std::string& name) {
  auto it = by_name.find(name);
  if (it == by_name.end()) throw_runtime("copy_folded_weights: the trained net has no layer '{}'", name);
  return *it->second;
}

void check_same_shape(const Tensor& from, const Tensor& to, const std::string& what) {
  if (from.shape() != to.shape())
    throw_runtime("copy_folded_weights: {} is {} in the trained net but {} in the folded one", what,
                  from.shape().to_string(), to.shape().to_string());
}

// Uploads into the folded net, keeping each host copy alive until the final synchronize (an upload
// may still read its source after returning).
class Uploads {
 public:
  explicit Uploads(Backend& backend) : backend_(backend) {}
  void put(std::vector<float> values, const Tensor& dst) {
    CNNSCALE_CHECK(static_cast<int64_t>(values.size()) == dst.numel() && dst.dtype() == DType::F32,
                   "upload of {} values into {} {}", values.size(), dtype_name(dst.dtype()), dst.shape().to_string());
    staged_.push_back(std::move(values));
    backend_.upload(staged_.back().data(), dst);
  }
  void finish() {
    backend_.synchronize();
    staged_.clear();
  }

 private:
  Backend& backend_;
  std::vector<std::vector<float>> staged_;
};

// A layer that is the same in both nets: its parameter masters and state, tensor by tensor.
void copy_layer(Backend& from, const Layer& trained, const Layer& folded, Uploads& uploads) {
  if (trained.params().size() != folded.params().size() || trained.state().size() != folded.state().size())
    throw_runtime(
        "copy_folded_weights: layer '{}' has {} parameter(s) and {} state tensor(s) in the trained net, "
        "{} and {} in the folded one",
        folded.name(), trained.params().size(), trained.state().size(), folded.params().size(), folded.state().size());
  for (size_t p = 0; p < folded.params().size(); ++p) {
    const Tensor &src = trained.params()[p].master, &dst = folded.params()[p].master;
    check_same_shape(src, dst, fmt::format("parameter '{}/{}'", folded.name(), folded.params()[p].spec.name));
    uploads.put(download(from, src), dst);
  }
  for (size_t s = 0; s < folded.state().size(); ++s) {
    const Tensor &src = trained.state()[s], &dst = folded.state()[s];
    check_same_shape(src, dst, fmt::format("state {} of layer '{}'", s, folded.name()));
    uploads.put(download(from, src), dst);
  }
}

// A convolution and the BatchNorm folded into it, written into the folded convolution (weight, bias).
void fold_layer(Backend& from, const Layer& conv, const Layer& bn, const Layer& folded, Uploads& uploads) {
  const std::string& name = folded.name();
  if (conv.params().empty() || conv.params().size() > 2 || folded.params().size() != 2 || bn.params().size() != 2 ||
      bn.state().size() != 2)
    throw_runtime(
        "copy_folded_weights: '{}' + '{}' do not have the parameters of a convolution and a batch norm "
        "({} + {} parameters, {} state tensors; folded: {} parameters)",
        conv.name(), bn.name(), conv.params().size(), bn.params().size(), bn.state().size(), folded.params().size());
  const Tensor& weight = conv.params()[0].master;
  check_same_shape(weight, folded.params()[0].master, fmt::format("the weight of '{}'", name));
  const int64_t channels = weight.shape()[0];
  for (const Tensor* t :
       {&bn.params()[0].master, &bn.params()[1].master, &bn.state()[0], &bn.state()[1], &folded.params()[1].master})
    if (t->numel() != channels)
      throw_runtime(
          "copy_folded_weights: '{}' has {} output channels but a per-channel tensor of '{}' or of the "
          "folded bias has {} values",
          conv.name(), channels, bn.name(), t->numel());

  std::vector<float> w = download(from, weight);
  const std::vector<float> bias = conv.params().size() == 2 ? download(from, conv.params()[1].master)
                                                            : std::vector<float>(static_cast<size_t>(channels), 0.0f);
  const std::vector<float> scale = download(from, bn.params()[0].master), shift = download(from, bn.params()[1].master);
  const std::vector<float> mean = download(from, bn.state()[0]), var = download(from, bn.state()[1]);
  const double eps = bn.config().node.get_or<float>("eps", kBatchNormDefaultEps);

  // BatchNorm's test-phase forward (batchnorm_forward_inference) computes, in double, y = a * x + b
  // with inv_std = 1 / sqrt(running_var + eps), a = scale * inv_std, b = shift - running_mean * a,
  // from the running variance as stored (an average of unbiased batch variances, used as is at test
  // time). With x = conv + bias: y = a * conv + (bias - running_mean) * a + shift. The filter
  // (K, C / group, R, S) is k-major in the master, so output channel k owns one contiguous run of it.
  std::vector<float> folded_bias(static_cast<size_t>(channels));
  const size_t per_channel = w.size() / static_cast<size_t>(channels);
  for (size_t k = 0; k < static_cast<size_t>(channels); ++k) {
    const double inv_std = 1.0 / std::sqrt(static_cast<double>(var[k]) + eps);
    const double a = static_cast<double>(scale[k]) * inv_std;
    for (size_t j = k * per_channel; j < (k + 1) * per_channel; ++j)
      w[j] = static_cast<float>(static_cast<double>(w[j]) * a);
    folded_bias[k] = static_cast<float>((static_cast<double>(bias[k]) - static_cast<double>(mean[k])) * a +
                                        static_cast<double>(shift[k]));
  }
  uploads.put(std::move(w), folded.params()[0].master);
  uploads.put(std::move(folded_bias), folded.params()[1].master);
}

}  // namespace

FoldedSpec fold_batch_norm(const NetSpec& trained) {
  const auto& layers = trained.impl().layers;
  const BlobUse use = blob_use(layers);
  std::map<size_t, size_t> bn_of_conv;
  std::set<size_t> folded_bns;
  std::vector<FoldedPair> pairs;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::optional<size_t> conv = foldable_into(layers, use, layers[i]);
    if (!conv) continue;
    bn_of_conv[*conv] = i;
    folded_bns.insert(i);
    pairs.push_back({layers[*conv].config.name, layers[i].config.name});
  }
  const std::string label = fmt::format("{} (batch norm folded)", trained.file());
  return FoldedSpec{NetSpec::load_string(folded_yaml(trained, bn_of_conv, folded_bns), label), std::move(pairs)};
}

void copy_folded_weights(const Net& trained, const FoldedSpec& f, Net& folded) {
  const std::vector<Layer*> trained_layers = trained.layers(), folded_layers = folded.layers();
  const std::vector<LayerInfo>& spec_layers = f.spec.layers();
  // The folded net must be f.spec's, and the trained net the one f was folded from.
  bool matches_spec = folded_layers.size() == spec_layers.size();
  for (size_t i = 0; matches_spec && i < folded_layers.size(); ++i)
    matches_spec = folded_layers[i]->name() == spec_layers[i].name;
  if (!matches_spec) throw_runtime("copy_folded_weights: the folded net was not built from the folded spec");
  if (trained_layers.size() != folded_layers.size() + f.folded.size())
    throw_runtime(
        "copy_folded_weights: the trained net has {} layers, the folded one {} after folding {} batch "
        "norm(s)",
        trained_layers.size(), folded_layers.size(), f.folded.size());

  std::map<std::string, const Layer*> by_name;
  for (const Layer* l : trained_layers) by_name[l->name()] = l;
  std::map<std::string, std::string> bn_of_conv;
  for (const auto& pair : f.folded) bn_of_conv[pair.convolution] = pair.batch_norm;

  Backend& from = trained.backend();
  Uploads uploads(folded.backend());
  for (const Layer* layer : folded_layers) {
    const Layer& original = trained_layer(by_name, layer->name());
    if (original.type() != layer->type())
      throw_runtime("copy_folded_weights: layer '{}' is a {} in the trained net but a {} in the folded one",
                    layer->name(), original.type(), layer->type());
    auto bn = bn_of_conv.find(layer->name());
    if (bn == bn_of_conv.end())
      copy_layer(from, original, *layer, uploads);
    else
      fold_layer(from, original, trained_layer(by_name, bn->second), *layer, uploads);
  }
  uploads.finish();
}

}  // namespace cnnscale
