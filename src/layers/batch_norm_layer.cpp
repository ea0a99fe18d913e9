// BatchNorm: per-channel y = scale * (x - mean) / sqrt(var + eps) + shift over (N, H, W). Train
// uses batch statistics and updates the running ones; Test uses the running statistics.
// Keys: eps (1e-5), momentum (0.1), scale_filler (constant 1), shift_filler (constant 0), param.
#include "layers/filler.hpp"
#include "layers/layer_params.hpp"

namespace cnnscale {

class BatchNormLayer final : public Layer {
 public:
  using Layer::Layer;

  std::vector<std::string> param_keys() const override {
    return {"eps", "momentum", "scale_filler", "shift_filler", "param"};
  }

  std::vector<Shape> infer_shapes(const std::vector<Shape>& bottoms) override {
    parse();
    const Shape& x = bottoms.at(0);
    if (x.rank() != 2 && x.rank() != 4)
      cfg_.node.fail(fmt::format("expected an (N, C) or (N, C, H, W) input, got {}", x.to_string()));
    channels_ = x.c();
    return {x};
  }

  std::vector<ParamSpec> param_specs() const override {
    return {ParamSpec{"scale", Shape{channels_}, scale_filler_, mults_[0].lr_mult, mults_[0].decay_mult, 1, 1},
            ParamSpec{"shift", Shape{channels_}, shift_filler_, mults_[1].lr_mult, mults_[1].decay_mult, 1, 1}};
  }

  std::vector<StateSpec> state_specs() const override {
    return {StateSpec{"running_mean", Shape{channels_}, 0.0f}, StateSpec{"running_var", Shape{channels_}, 1.0f}};
  }

  void setup(Backend& backend) override {
    save_mean_ = backend.alloc(Shape{channels_});     // (C)
    save_inv_std_ = backend.alloc(Shape{channels_});  // (C)
  }

  void forward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top) override {
    if (ctx.phase == Phase::Train) {
      ctx.backend.batchnorm_forward_train(bn_, bottom[0], params_[0].data, params_[1].data, state_[0], state_[1],
                                          top[0], save_mean_, save_inv_std_);
    } else {
      ctx.backend.batchnorm_forward_inference(bn_, bottom[0], params_[0].data, params_[1].data, state_[0], state_[1],
                                              top[0]);
    }
  }

  // Uses the batch statistics saved by the preceding Train-phase forward.
  void backward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>&,
                const std::vector<Tensor>& top_diff, const std::vector<bool>& propagate,
                const std::vector<Tensor>& bottom_diff) override {
    Tensor dx = bottom_diff.size() > 0 && propagate[0] ? bottom_diff[0] : Tensor();
    if (!dx.defined()) {
      // The op always produces dx; without a consumer it goes to scratch (kept across calls).
      if (!scratch_dx_.defined() || scratch_dx_.shape() != bottom[0].shape())
        scratch_dx_ = ctx.backend.alloc(bottom[0].shape());
      dx = scratch_dx_;
    }
    ctx.backend.batchnorm_backward(bn_, bottom[0], top_diff[0], params_[0].data, save_mean_, save_inv_std_, dx,
                                   params_[0].diff, params_[1].diff);
  }

 private:
  void parse() {
    const ConfigNode& node = cfg_.node;
    bn_.eps = node.get_or<float>("eps", 1e-5f);
    if (!(bn_.eps > 0.0f)) node["eps"].fail(fmt::format("must be > 0, got {}", bn_.eps));
    bn_.momentum = node.get_or<float>("momentum", 0.1f);
    if (!(bn_.momentum >= 0.0f && bn_.momentum <= 1.0f))
      node["momentum"].fail(fmt::format("must be in [0, 1], got {}", bn_.momentum));
    scale_filler_ = parse_filler_or(node, "scale_filler", constant_filler(1.0f));
    shift_filler_ = parse_filler_or(node, "shift_filler", constant_filler(0.0f));
    mults_ = parse_param_mults(node, 2);
  }

  BatchNormParams bn_;
  int64_t channels_ = 0;
  Filler scale_filler_, shift_filler_;
  std::vector<ParamMults> mults_;
  Tensor save_mean_, save_inv_std_;  // (C) batch statistics of the last Train forward
  Tensor scratch_dx_;
};

}  // namespace cnnscale

CNNSCALE_REGISTER_LAYER(BatchNorm, BatchNormLayer)
