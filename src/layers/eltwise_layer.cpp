// Eltwise: y = sum_i coeff_i * x_i over two or more bottoms of identical shape (ResNet shortcuts).
// Keys: operation (sum only), coeff (list, default all 1).
#include <climits>

#include "layers/layer_params.hpp"

namespace cnnscale {

class EltwiseLayer final : public Layer {
 public:
  using Layer::Layer;

  static LayerTypeDoc doc() {
    return {"Element-wise weighted sum of two or more bottoms of one shape (ResNet's shortcut sums).",
            {{"operation", "sum", "sum", "the operation; only the sum (also SUM) is supported"},
             {"coeff", "list of numbers, one per bottom", "all 1", "each bottom's weight in the sum"}},
            {2, INT_MAX}};
  }

  std::vector<Shape> infer_shapes(const std::vector<Shape>& bottoms) override {
    const ConfigNode& node = cfg_.node;
    std::string op = node.get_or<std::string>("operation", "sum");
    if (op != "sum" && op != "SUM")
      node["operation"].fail(fmt::format("operation '{}' is not supported (only sum)", op));
    coeffs_.assign(bottoms.size(), 1.0f);
    if (auto c = node.child("coeff")) {
      coeffs_ = c->as_list<float>();
      if (coeffs_.size() != bottoms.size())
        c->fail(fmt::format("{} coefficients for {} bottoms", coeffs_.size(), bottoms.size()));
    }
    for (size_t i = 1; i < bottoms.size(); ++i)
      if (bottoms[i] != bottoms[0])
        node.fail(fmt::format("Eltwise sum needs bottoms of identical shape: '{}' is {} but '{}' is {}",
                              cfg_.bottoms.at(0), bottoms[0].to_string(), cfg_.bottoms.at(i), bottoms[i].to_string()));
    return {bottoms.at(0)};
  }

  void forward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top) override {
    ctx.backend.axpby(coeffs_[0], bottom[0], 0.0f, top[0]);
    for (size_t i = 1; i < bottom.size(); ++i) ctx.backend.axpby(coeffs_[i], bottom[i], 1.0f, top[0]);
  }

  void backward(LayerContext& ctx, const std::vector<Tensor>&, const std::vector<Tensor>&,
                const std::vector<Tensor>& top_diff, const std::vector<bool>& propagate,
                const std::vector<Tensor>& bottom_diff) override {
    for (size_t i = 0; i < bottom_diff.size(); ++i)
      if (propagate[i]) ctx.backend.axpby(coeffs_[i], top_diff[0], 0.0f, bottom_diff[i]);
  }

 private:
  std::vector<float> coeffs_;
};

}  // namespace cnnscale

CNNSCALE_REGISTER_LAYER(Eltwise, EltwiseLayer)
