// Dropout: in training, zero each element with probability `ratio` and scale the rest by
// 1 / (1 - ratio); identity in the test phase. Key: ratio (0.5). The mask is a pure function of
// (run seed, iteration, layer index), so CPU and GPU agree and a resumed run draws the same masks.
#include "core/rng.hpp"
#include "layers/layer.hpp"

namespace cnnscale {

class DropoutLayer final : public Layer {
 public:
  using Layer::Layer;

  static LayerTypeDoc doc() {
    return {"In training, zeroes each element with probability `ratio` and scales the others by 1 / (1 - ratio); "
            "the identity in the test phase. The mask follows from the run seed, the iteration and the layer's "
            "position, so a resumed run and every device draw the same masks.",
            {{"ratio", "number in [0, 1)", "0.5", "the probability of zeroing an element (Caffe's dropout_ratio)"}}};
  }

  std::vector<Shape> infer_shapes(const std::vector<Shape>& bottoms) override {
    ratio_ = cfg_.node.get_or<float>("ratio", 0.5f);
    if (!(ratio_ >= 0.0f && ratio_ < 1.0f)) cfg_.node["ratio"].fail(fmt::format("must be in [0, 1), got {}", ratio_));
    return {bottoms.at(0)};
  }

  void forward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top) override {
    if (ctx.phase == Phase::Test) {
      ctx.backend.copy(bottom[0], top[0]);
      return;
    }
    if (ctx.iteration_on_device)
      ctx.backend.dropout_forward_at(ratio_, ctx.seed, *ctx.iteration_on_device, layer(), bottom[0], top[0]);
    else
      ctx.backend.dropout_forward(ratio_, ctx.seed, dropout_stream(ctx.iteration, layer()), bottom[0], top[0]);
  }

  void backward(LayerContext& ctx, const std::vector<Tensor>&, const std::vector<Tensor>&,
                const std::vector<Tensor>& top_diff, const std::vector<bool>& propagate,
                const std::vector<Tensor>& bottom_diff) override {
    if (!propagate[0]) return;
    if (ctx.phase == Phase::Test) {
      ctx.backend.copy(top_diff[0], bottom_diff[0]);
      return;
    }
    if (ctx.iteration_on_device)
      ctx.backend.dropout_backward_at(ratio_, ctx.seed, *ctx.iteration_on_device, layer(), top_diff[0],
                                      bottom_diff[0]);
    else
      ctx.backend.dropout_backward(ratio_, ctx.seed, dropout_stream(ctx.iteration, layer()), top_diff[0],
                                   bottom_diff[0]);
  }

 private:
  uint64_t layer() const { return static_cast<uint64_t>(cfg_.layer_index); }

  float ratio_ = 0.5f;
};

}  // namespace cnnscale

CNNSCALE_REGISTER_LAYER(Dropout, DropoutLayer)
