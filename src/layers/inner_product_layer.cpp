// InnerProduct (fully connected): y (N, K) = x (N, D) weight^T + bias (K), with weight (K, D).
// An (N, C, H, W) input is flattened to D = C * H * W (Caffe's axis 1). Keys: num_output, bias,
// weight_filler, bias_filler, param, relu. `relu: true` applies a ReLU to y in the same layer
// (fuse.hpp writes it for a ReLU that alone reads the layer's top): on CUDA the bias and the ReLU
// then ride in the epilogue of the one cuBLASLt matmul.
#include "layers/filler.hpp"
#include "layers/layer_params.hpp"

namespace cnnscale {

class InnerProductLayer final : public Layer {
 public:
  using Layer::Layer;

  std::vector<std::string> param_keys() const override {
    return {"num_output", "bias", "weight_filler", "bias_filler", "param", "relu"};
  }

  std::vector<Shape> infer_shapes(const std::vector<Shape>& bottoms) override {
    parse();
    const Shape& x = bottoms.at(0);
    if (x.rank() < 2) cfg_.node.fail(fmt::format("expected an (N, ...) input of rank >= 2, got {}", x.to_string()));
    in_features_ = x.sample_numel();
    return {Shape{x.n(), num_output_}};
  }

  std::vector<ParamSpec> param_specs() const override {
    std::vector<ParamSpec> specs{ParamSpec{"weight", Shape{num_output_, in_features_}, weight_filler_,
                                           mults_[0].lr_mult, mults_[0].decay_mult, in_features_, num_output_}};
    if (bias_)
      specs.push_back(
          ParamSpec{"bias", Shape{num_output_}, bias_filler_, mults_[1].lr_mult, mults_[1].decay_mult, 1, 1});
    for (auto& s : specs) s.dtype = cfg_.activation_dtype;  // compute copies in the activations' dtype
    return specs;
  }

  LayerCost cost(const std::vector<Shape>& bottoms, const std::vector<Shape>& tops) const override {
    LayerCost c = Layer::cost(bottoms, tops);
    c.forward_macs = num_output_ * in_features_;
    return c;
  }

  void forward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top) override {
    // y (N, K) = x (N, D) * W^T (D, K), D in (C, H, W) order: a channels-last input is reordered.
    ctx.backend.linear_forward(nchw_input(ctx.backend, bottom[0]), params_[0].data,
                               bias_ ? params_[1].data : Tensor(), relu_, top[0]);
  }

  void backward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top,
                const std::vector<Tensor>& top_diff, const std::vector<bool>& propagate,
                const std::vector<Tensor>& bottom_diff) override {
    const int64_t batch = bottom[0].shape().n();
    // The ReLU's backward in place: the top gradient is this layer's alone (its consumers' sum).
    if (relu_) ctx.backend.relu_backward(top[0], top_diff[0], top_diff[0]);
    // dW (K, D) = dy^T (K, N) * x (N, D) and db; a channels-last x is still in nchw_ from forward.
    const Tensor x = bottom[0].layout() == Layout::NCHW ? bottom[0] : nchw_;
    ctx.backend.linear_backward_params(x, top_diff[0], params_[0].diff, bias_ ? params_[1].diff : Tensor());
    // dx (N, D) = dy (N, K) * W (K, D)
    if (!propagate[0]) return;
    if (bottom_diff[0].layout() == Layout::NCHW) {
      ctx.backend.matmul(false, false, batch, in_features_, num_output_, 1.0f, top_diff[0], params_[0].data, 0.0f,
                         bottom_diff[0]);
      return;
    }
    ctx.backend.matmul(false, false, batch, in_features_, num_output_, 1.0f, top_diff[0], params_[0].data, 0.0f,
                       nchw_diff_);
    ctx.backend.convert(nchw_diff_, bottom_diff[0]);
  }

 private:
  // x itself, or (channels-last x) its NCHW copy in nchw_, with nchw_diff_ beside it for backward.
  const Tensor& nchw_input(Backend& backend, const Tensor& x) {
    if (x.layout() == Layout::NCHW) return x;
    if (!nchw_.defined() || nchw_.shape() != x.shape() || nchw_.dtype() != x.dtype()) {
      nchw_ = backend.alloc(x.shape(), x.dtype());
      nchw_diff_ = backend.alloc(x.shape(), x.dtype());
    }
    backend.convert(x, nchw_);
    return nchw_;
  }

  void parse() {
    const ConfigNode& node = cfg_.node;
    num_output_ = parse_required_int_at_least(node, "num_output", 1);
    bias_ = node.get_or<bool>("bias", true);
    relu_ = node.get_or<bool>("relu", false);
    Filler xavier;
    xavier.type = "xavier";  // Caffe's constant-0 default cannot train
    weight_filler_ = parse_filler_or(node, "weight_filler", xavier);
    bias_filler_ = parse_filler_or(node, "bias_filler", constant_filler(0.0f));
    mults_ = parse_param_mults(node, bias_ ? 2 : 1);
    mults_.resize(2);
  }

  int64_t num_output_ = 0;
  int64_t in_features_ = 0;  // D = C * H * W
  bool bias_ = true;
  bool relu_ = false;
  Filler weight_filler_, bias_filler_;
  std::vector<ParamMults> mults_;
  Tensor nchw_, nchw_diff_;
};

}  // namespace cnnscale

CNNSCALE_REGISTER_LAYER(InnerProduct, InnerProductLayer)
