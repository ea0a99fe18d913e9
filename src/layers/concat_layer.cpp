// Concat along channels (axis 1): tops (N, C1 + C2 + ..., H, W) from bottoms (N, Ci, H, W)
// (GoogLeNet inception outputs). Key: axis (1 only).
#include <climits>

#include "core/checked_math.hpp"
#include "layers/layer_params.hpp"

namespace cnnscale {

class ConcatLayer final : public Layer {
 public:
  using Layer::Layer;

  static LayerTypeDoc doc() {
    return {"Concatenates its bottoms along the channels: (N, C1 + C2 + ..., H, W) from bottoms (N, Ci, H, W) "
            "alike in every other extent (GoogLeNet's inception outputs).",
            {{"axis", "1", "1", "the axis to concatenate along; only the channels (1) are supported (Caffe's "
                                 "concat_dim is axis)"}},
            {1, INT_MAX}};
  }

  std::vector<Shape> infer_shapes(const std::vector<Shape>& bottoms) override {
    const ConfigNode& node = cfg_.node;
    if (auto axis = node.child("axis"); axis && axis->as<int>() != 1)
      axis->fail(fmt::format("only axis 1 (channels) is supported, got {}", axis->as<int>()));
    const Shape& first = bottoms.at(0);
    if (first.rank() < 2) node.fail(fmt::format("expected inputs of rank >= 2, got {}", first.to_string()));
    Shape out = first;
    out[1] = 0;
    for (size_t i = 0; i < bottoms.size(); ++i) {
      Shape probe = bottoms[i];
      bool compatible = probe.rank() == first.rank();
      if (compatible) {
        probe[1] = first[1];
        compatible = probe == first;
      }
      if (!compatible)
        node.fail(fmt::format("bottoms must agree in every dimension but channels: '{}' is {} but '{}' is {}",
                              cfg_.bottoms.at(0), first.to_string(), cfg_.bottoms.at(i), bottoms[i].to_string()));
      const auto channels = checked_add(out[1], bottoms[i][1]);
      if (!channels || *channels > kMaxExtent)
        node.fail(fmt::format("the bottoms' channels add up to more than {} (a 32-bit extent)", kMaxExtent));
      out[1] = *channels;
    }
    return {out};
  }

  void forward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top) override {
    int64_t offset = 0;
    for (const Tensor& b : bottom) {
      ctx.backend.copy_channels(b, 0, top[0], offset, b.shape().c());
      offset += b.shape().c();
    }
  }

  void backward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>&,
                const std::vector<Tensor>& top_diff, const std::vector<bool>& propagate,
                const std::vector<Tensor>& bottom_diff) override {
    int64_t offset = 0;
    for (size_t i = 0; i < bottom.size(); ++i) {
      const int64_t channels = bottom[i].shape().c();
      if (propagate[i]) ctx.backend.copy_channels(top_diff[0], offset, bottom_diff[i], 0, channels);
      offset += channels;
    }
  }
};

}  // namespace cnnscale

CNNSCALE_REGISTER_LAYER(Concat, ConcatLayer)
