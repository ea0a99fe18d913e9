// SoftmaxWithLoss: loss (1) = mean over the batch of -log softmax(scores (N, C))[label], labels
// (N) i32. The top holds the unweighted loss; loss_weight (1.0) scales the gradient and is exposed
// through Layer::loss_weight() for the net's total. Key: loss_weight. In every precision the
// softmax, the loss and the gradient are computed in fp32: 16-bit scores are widened first and the
// gradient is rounded to the scores' dtype only at the end.
#include "layers/layer_params.hpp"

namespace cnnscale {

class SoftmaxWithLossLayer final : public Layer {
 public:
  using Layer::Layer;

  static LayerTypeDoc doc() {
    return {"The mean over the batch of -log softmax(scores)[label], computed in fp32 in every precision. "
            "Reads the scores (N, C) or (N, C, 1, 1) and the labels (N); its top is the loss (1), unweighted.",
            {{"loss_weight", "number", "1", "the weight of this loss in the network's total loss and its gradient"}},
            {2, 2}};
  }
  bool is_loss() const override { return true; }
  DType top_dtype(size_t) const override { return DType::F32; }
  float loss_weight() const override { return loss_weight_; }

  std::vector<Shape> infer_shapes(const std::vector<Shape>& bottoms) override {
    const ConfigNode& node = cfg_.node;
    loss_weight_ = node.get_or<float>("loss_weight", 1.0f);
    const Shape &scores = bottoms.at(0), &labels = bottoms.at(1);
    bool flat = scores.rank() == 2 || (scores.rank() == 4 && scores.h() == 1 && scores.w() == 1);
    if (!flat) node.fail(fmt::format("expected scores (N, C) or (N, C, 1, 1), got {}", scores.to_string()));
    if (labels.numel() != scores.n())
      node.fail(fmt::format("labels {} do not match scores {}: expected (N) = ({})", labels.to_string(),
                            scores.to_string(), scores.n()));
    return {Shape{1}};
  }

  void forward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top) override {
    Tensor scores = flat_scores(bottom[0]);
    // Allocated on first use and whenever the batch size changes (the net may reshape).
    if (!prob_.defined() || prob_.shape() != scores.shape()) {
      prob_ = ctx.backend.alloc(scores.shape());
      wide_ = scores.dtype() == DType::F32 ? Tensor() : ctx.backend.alloc(scores.shape());
    }
    if (wide_.defined()) {
      ctx.backend.convert(scores, wide_);
      scores = wide_;
    }
    ctx.backend.softmax_forward(scores, prob_);
    ctx.backend.cross_entropy_loss(prob_, bottom[1], top[0]);
  }

  // d loss_weight * loss / d scores = loss_weight / N * (prob - onehot), times the context's
  // loss_scale (data parallel: n / B); top_diff is not used. Computed in double: with loss_scale 1
  // this rounds to exactly loss_weight / N in float (as before), and with n / B to loss_weight / B
  // up to double rounding, far below float precision.
  void backward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>&,
                const std::vector<Tensor>&, const std::vector<bool>& propagate,
                const std::vector<Tensor>& bottom_diff) override {
    if (!propagate[0]) return;
    const int64_t batch = bottom[0].shape().n();
    float scale = batch ? static_cast<float>(loss_weight_ * ctx.loss_scale / static_cast<double>(batch)) : 0.0f;
    const Tensor* grad_scale = ctx.grad_scale_on_device;  // a power of two: multiplying by it is exact
    if (!wide_.defined()) {
      const Tensor dx = flat_scores(bottom_diff[0]);
      ctx.backend.softmax_cross_entropy_backward(prob_, bottom[1], scale, dx);
      if (grad_scale) ctx.backend.convert_scaled_at(dx, dx, *grad_scale);
      return;
    }
    ctx.backend.softmax_cross_entropy_backward(prob_, bottom[1], scale, wide_);
    if (grad_scale)
      ctx.backend.convert_scaled_at(wide_, flat_scores(bottom_diff[0]), *grad_scale);
    else
      ctx.backend.convert(wide_, flat_scores(bottom_diff[0]));
  }

 private:
  static Tensor flat_scores(const Tensor& t) {
    const int64_t batch = t.shape().n();
    return t.reshape(Shape{batch, batch ? t.numel() / batch : 0});  // (N, C)
  }

  float loss_weight_ = 1.0f;
  Tensor prob_;  // (N, C) softmax of the last forward
  Tensor wide_;  // (N, C) f32 scores, then f32 gradient, when the scores are 16-bit
};

}  // namespace cnnscale

CNNSCALE_REGISTER_LAYER(SoftmaxWithLoss, SoftmaxWithLossLayer)
