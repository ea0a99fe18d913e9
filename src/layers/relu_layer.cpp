// ReLU: y = max(x, 0). Element-wise, so running in place (top == bottom) is safe: backward reads
// only y and dy.
#include "layers/layer.hpp"

namespace cnnscale {

class ReLULayer final : public Layer {
 public:
  using Layer::Layer;

  static LayerTypeDoc doc() { return {"y = max(x, 0), element-wise.", {}}; }

  std::vector<Shape> infer_shapes(const std::vector<Shape>& bottoms) override { return {bottoms.at(0)}; }

  void forward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top) override {
    ctx.backend.relu_forward(bottom[0], top[0]);
  }

  void backward(LayerContext& ctx, const std::vector<Tensor>&, const std::vector<Tensor>& top,
                const std::vector<Tensor>& top_diff, const std::vector<bool>& propagate,
                const std::vector<Tensor>& bottom_diff) override {
    if (propagate[0]) ctx.backend.relu_backward(top[0], top_diff[0], bottom_diff[0]);
  }
};

}  // namespace cnnscale

CNNSCALE_REGISTER_LAYER(ReLU, ReLULayer)
