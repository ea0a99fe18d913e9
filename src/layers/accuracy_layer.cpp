// Accuracy: fraction of samples whose label is among the top k scores, one top (1) per k
// (tops [top1, top5] with top_k: [1, 5]). Ties count against the label (see CpuBackend::accuracy_topk).
// Key: top_k (int or list, default 1).
#include "layers/layer_params.hpp"

namespace cnnscale {

class AccuracyLayer final : public Layer {
 public:
  using Layer::Layer;

  static LayerTypeDoc doc() {
    return {"Fraction of the samples whose label is among the k highest scores, one top per k; test phase "
            "only in practice (`phase: test`). Reads the scores (N, C) and the labels (N); no backward.",
            {{"top_k", "integer or list of integers in [1, classes]", "1",
              "the k of each top, in top order (`top: [top1, top5]` with `top_k: [1, 5]`)"}},
            {2, 2},
            {1, 16}};
  }
  bool has_backward() const override { return false; }
  DType top_dtype(size_t) const override { return DType::F32; }

  std::vector<Shape> infer_shapes(const std::vector<Shape>& bottoms) override {
    const ConfigNode& node = cfg_.node;
    const Shape &scores = bottoms.at(0), &labels = bottoms.at(1);
    if (scores.rank() < 2) node.fail(fmt::format("expected scores (N, C), got {}", scores.to_string()));
    const int64_t classes = scores.sample_numel();
    ks_ = {1};
    if (auto k = node.child("top_k")) {
      ks_ = k->as_list<int>();
      for (int v : ks_)
        if (v < 1 || v > classes)
          k->fail(fmt::format("each k must be in [1, {}] (the number of classes), got {}", classes, v));
    }
    if (ks_.size() != cfg_.tops.size())
      node.fail(fmt::format("{} top(s) for {} value(s) of top_k: give one top per k", cfg_.tops.size(), ks_.size()));
    if (labels.numel() != scores.n())
      node.fail(fmt::format("labels {} do not match scores {}", labels.to_string(), scores.to_string()));
    return std::vector<Shape>(ks_.size(), Shape{1});
  }

  void setup(Backend& backend) override { fractions_ = backend.alloc(Shape{static_cast<int64_t>(ks_.size())}); }

  void forward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top) override {
    const int64_t batch = bottom[0].shape().n();
    Tensor scores = bottom[0].reshape(Shape{batch, batch ? bottom[0].numel() / batch : 0});  // (N, C)
    ctx.backend.accuracy_topk(scores, bottom[1], ks_, fractions_);
    for (size_t j = 0; j < ks_.size(); ++j)
      ctx.backend.copy(fractions_.view(static_cast<int64_t>(j), Shape{1}), top[j]);
  }

  void backward(LayerContext&, const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>&,
                const std::vector<bool>&, const std::vector<Tensor>&) override {
    throw_runtime("layer '{}': Accuracy has no backward pass", name());
  }

 private:
  std::vector<int> ks_{1};
  Tensor fractions_;  // (K) one value per k, copied into the tops
};

}  // namespace cnnscale

CNNSCALE_REGISTER_LAYER(Accuracy, AccuracyLayer)
