// Flatten: (N, C, H, W) -> (N, C * H * W) in (C, H, W) order. Forward and backward are plain copies,
// or reorderings from and to a channels-last input.
#include "layers/layer.hpp"

namespace cnnscale {

class FlattenLayer final : public Layer {
 public:
  using Layer::Layer;

  static LayerTypeDoc doc() {
    return {"(N, C, H, W) to (N, C * H * W) in (C, H, W) order (InnerProduct flattens its input itself).", {}};
  }

  std::vector<Shape> infer_shapes(const std::vector<Shape>& bottoms) override {
    const Shape& x = bottoms.at(0);
    if (x.rank() < 1) cfg_.node.fail("expected an input with a batch dimension, got a scalar");
    return {Shape{x.n(), x.sample_numel()}};
  }

  void forward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top) override {
    if (bottom[0].layout() == Layout::NCHW)
      ctx.backend.copy(bottom[0], top[0]);
    else
      ctx.backend.convert(bottom[0], top[0].reshape(bottom[0].shape()));
  }

  void backward(LayerContext& ctx, const std::vector<Tensor>&, const std::vector<Tensor>&,
                const std::vector<Tensor>& top_diff, const std::vector<bool>& propagate,
                const std::vector<Tensor>& bottom_diff) override {
    if (!propagate[0]) return;
    if (bottom_diff[0].layout() == Layout::NCHW)
      ctx.backend.copy(top_diff[0], bottom_diff[0]);
    else
      ctx.backend.convert(top_diff[0].reshape(bottom_diff[0].shape()), bottom_diff[0]);
  }
};

}  // namespace cnnscale

CNNSCALE_REGISTER_LAYER(Flatten, FlattenLayer)
