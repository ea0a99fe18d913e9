// LRN (AlexNet/CaffeNet): y = x / (k + alpha / local_size * sum of x^2 over local_size neighbouring
// channels) ^ beta. Keys: local_size (5, odd), alpha (1e-4), beta (0.75), k (1), norm_region
// (across_channels only).
#include "layers/layer_params.hpp"

namespace cnnscale {

class LRNLayer final : public Layer {
 public:
  using Layer::Layer;

  static LayerTypeDoc doc() {
    return {"Local response normalisation across channels (AlexNet, CaffeNet): y = x / (k + alpha / n * "
            "sum of x^2 over the n = local_size channels centred on x)^beta, on an (N, C, H, W) bottom.",
            {{"local_size", "odd integer >= 1", "5", "n, the channels each window spans"},
             {"alpha", "number >= 0", "0.0001", "the scale of the sum of squares"},
             {"beta", "number", "0.75", "the exponent"},
             {"k", "number > 0", "1", "the constant added before the exponent"},
             {"norm_region", "across_channels", "across_channels",
              "the window's direction; within_channel is not supported"}}};
  }

  std::vector<Shape> infer_shapes(const std::vector<Shape>& bottoms) override {
    parse();
    require_rank(cfg_.node, bottoms.at(0), 4, "an (N, C, H, W)");
    return {bottoms.at(0)};
  }

  void forward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top) override {
    ctx.backend.lrn_forward(lrn_, bottom[0], top[0]);
  }

  void backward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top,
                const std::vector<Tensor>& top_diff, const std::vector<bool>& propagate,
                const std::vector<Tensor>& bottom_diff) override {
    if (propagate[0]) ctx.backend.lrn_backward(lrn_, bottom[0], top[0], top_diff[0], bottom_diff[0]);
  }

 private:
  void parse() {
    const ConfigNode& node = cfg_.node;
    std::string region = node.get_or<std::string>("norm_region", "across_channels");
    if (region == "within_channel" || region == "WITHIN_CHANNEL")
      node["norm_region"].fail("within_channel LRN is not supported (only across_channels, as in AlexNet/CaffeNet)");
    if (region != "across_channels" && region != "ACROSS_CHANNELS")
      node["norm_region"].fail(fmt::format("unknown norm_region '{}' (expected across_channels)", region));
    lrn_.local_size = parse_int_at_least(node, "local_size", 5, 1);
    // Caffe accepts only odd sizes: the window is then centred on the channel.
    if (lrn_.local_size % 2 == 0) node["local_size"].fail(fmt::format("must be odd, got {}", lrn_.local_size));
    lrn_.alpha = node.get_or<float>("alpha", 1e-4f);
    lrn_.beta = node.get_or<float>("beta", 0.75f);
    lrn_.k = node.get_or<float>("k", 1.0f);
    if (!(lrn_.k > 0.0f)) node["k"].fail(fmt::format("must be > 0, got {}", lrn_.k));
    if (lrn_.alpha < 0.0f) node["alpha"].fail(fmt::format("must be >= 0, got {}", lrn_.alpha));
  }

  LrnParams lrn_;
};

}  // namespace cnnscale

CNNSCALE_REGISTER_LAYER(LRN, LRNLayer)
