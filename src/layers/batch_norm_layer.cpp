// BatchNorm: per-channel y = scale * (x - mean) / sqrt(var + eps) + shift over (N, H, W). Train
// uses batch statistics and updates the running ones; Test uses the running statistics.
// Keys: eps (1e-5), momentum (0.1), scale_filler (constant 1), shift_filler (constant 0), param,
// sync (false): in a data-parallel job, statistics over the global batch instead of each rank's
// share (synchronised batch norm); without peers it changes nothing.
// relu (false): y = max(0, bn(x) [+ z]) in one op, with an optional second bottom z (a residual
// shortcut). Networks need not say it: training nets get it from fuse_epilogues
// (net/fuse.hpp), which folds a BatchNorm's following Eltwise sum and ReLU into it.
//
// Sync batch norm is built from the backend's existing ops plus small host computations, so it
// runs on every backend with no new kernel, at the price of host round trips (two per layer in
// forward and in backward): a correctness feature, not a fast path.
//  forward:  local mean/unbiased variance (batchnorm_forward_train with momentum 1 writes exactly
//            those into its running outputs) -> every rank's (count, mean, var) gathered exactly ->
//            global mean M and biased variance V in double, identical on every rank (parallel
//            variance formula, no E[x^2] - M^2 cancellation) -> y by batchnorm_forward_inference
//            with (M, V); the running statistics move toward (M, unbiased V).
//  backward: the op's dx with the global (M, V) uses the LOCAL sums of dy and dy * xhat; the
//            global-batch gradient uses the job's sums. The difference is per channel
//            alpha * xhat + beta, which batchnorm_forward_inference computes with scale alpha and
//            shift beta. dscale/dshift stay local: the gradient allreduce sums them.
#include <cmath>

#include "core/watchdog.hpp"
#include "layers/filler.hpp"
#include "layers/layer_params.hpp"

namespace cnnscale {

class BatchNormLayer final : public Layer {
 public:
  using Layer::Layer;

  static LayerTypeDoc doc() {
    return {"Per-channel y = scale * (x - mean) / sqrt(var + eps) + shift of an (N, C) or (N, C, H, W) bottom: "
            "the batch's statistics in training (updating the running ones), the running ones in the test "
            "phase. Scale and shift are part of the layer (Caffe's BatchNorm + Scale). An optional second "
            "bottom of x's shape is added before the ReLU (with `relu: true`).",
            {{"eps", "number > 0", "1e-05", "added to the variance"},
             {"momentum", "number in [0, 1]", "0.1",
              "running = (1 - momentum) * running + momentum * batch, as PyTorch (Caffe's "
              "moving_average_fraction is 1 - momentum)"},
             {"scale_filler", "filler", "{type: constant, value: 1}", "the scale's initialisation"},
             {"shift_filler", "filler", "{type: constant, value: 0}", "the shift's initialisation"},
             {"param", "list of up to 2 {lr_mult, decay_mult}", "all 1",
              "the scale's then the shift's learning-rate and weight-decay multipliers"},
             {"sync", "boolean", "false",
              "in a data-parallel job, statistics over the global batch rather than each rank's share"},
             {"relu", "boolean", "false",
              "y = max(0, bn(x) [+ second bottom]) in one op (written by the training rewrite)"}},
            {1, 2}};
  }

  bool exchanges_on_host() const override { return sync_; }

  std::vector<Shape> infer_shapes(const std::vector<Shape>& bottoms) override {
    parse();
    const Shape& x = bottoms.at(0);
    if (x.rank() != 2 && x.rank() != 4)
      cfg_.node.fail(fmt::format("expected an (N, C) or (N, C, H, W) input, got {}", x.to_string()));
    channels_ = x.c();
    if (bottoms.size() > 1 && bottoms[1] != x)
      cfg_.node.fail(fmt::format("the addend '{}' is {} but the input '{}' is {}", cfg_.bottoms.at(1),
                                 bottoms[1].to_string(), cfg_.bottoms.at(0), x.to_string()));
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
    synced_ = ctx.phase == Phase::Train && sync_ && ctx.ranks && ctx.ranks->ranks() > 1;
    if (synced_) {
      forward_sync(ctx, bottom[0], top[0], addend(bottom));
    } else if (ctx.phase == Phase::Train) {
      ctx.backend.batchnorm_forward_train(bn_, bottom[0], params_[0].data, params_[1].data, state_[0], state_[1],
                                          top[0], save_mean_, save_inv_std_, addend(bottom));
    } else {
      ctx.backend.batchnorm_forward_inference(bn_, bottom[0], params_[0].data, params_[1].data, state_[0], state_[1],
                                              top[0], addend(bottom));
    }
  }

  // Uses the batch statistics saved by the preceding Train-phase forward.
  void backward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top,
                const std::vector<Tensor>& top_diff, const std::vector<bool>& propagate,
                const std::vector<Tensor>& bottom_diff) override {
    Tensor dx = bottom_diff.size() > 0 && propagate[0] ? bottom_diff[0] : Tensor();
    // The op always produces dx; without a consumer it goes to scratch.
    if (!dx.defined()) dx = scratch(ctx.backend, scratch_dx_, bottom[0]);
    if (synced_) return backward_sync(ctx, bottom, top, top_diff, propagate, bottom_diff, dx);
    BatchNormFused fused;
    if (bn_.relu) {
      fused.y = top[0];
      fused.shift = params_[1].data;
    }
    // The addend's gradient goes to scratch when nothing wants it: the backward op then matches
    // the forward's fused op (cuDNN keys its reserve space by the op).
    if (bottom.size() > 1) fused.dz = propagate[1] ? bottom_diff[1] : scratch(ctx.backend, scratch_dz_, bottom[1]);
    ctx.backend.batchnorm_backward(bn_, bottom[0], top_diff[0], params_[0].data, save_mean_, save_inv_std_, dx,
                                   params_[0].diff, params_[1].diff, fused);
  }

 private:
  // forward_sync ran the plain op and applied the epilogue separately (batchnorm_forward_inference
  // with the job's statistics), so backward undoes them separately too: the ReLU's gate, the
  // addend's gradient, then the plain op, whose state (cuDNN's reserve space) is the plain forward's.
  void backward_sync(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top,
                     const std::vector<Tensor>& top_diff, const std::vector<bool>& propagate,
                     const std::vector<Tensor>& bottom_diff, const Tensor& dx) {
    Tensor grad = top_diff[0];
    if (bn_.relu) {
      grad = scratch(ctx.backend, scratch_gate_, top_diff[0]);
      ctx.backend.relu_backward(top[0], top_diff[0], grad);
    }
    if (bottom.size() > 1 && propagate[1]) ctx.backend.copy(grad, bottom_diff[1]);
    BatchNormParams plain = bn_;
    plain.relu = false;
    ctx.backend.batchnorm_backward(plain, bottom[0], grad, params_[0].data, save_mean_, save_inv_std_, dx,
                                   params_[0].diff, params_[1].diff);
    correct_backward_sync(ctx, bottom[0], dx);
  }

  // `held`, (re)allocated like `like` when it is not (kept across calls).
  static const Tensor& scratch(Backend& backend, Tensor& held, const Tensor& like) {
    if (!held.defined() || held.shape() != like.shape() || held.dtype() != like.dtype() ||
        held.layout() != like.layout())
      held = backend.alloc(like.shape(), like.dtype()).as_layout(like.layout());
    return held;
  }

  static BatchNormFused addend(const std::vector<Tensor>& bottom) {
    BatchNormFused f;
    if (bottom.size() > 1) f.z = bottom[1];
    return f;
  }

  // Per-channel host vector of a (C) device tensor.
  std::vector<float> to_host(Backend& backend, const Tensor& t) {
    std::vector<float> out(static_cast<size_t>(t.numel()));
    BlockingOp mark("sync batch norm download");
    backend.download(t, out.data());
    return out;
  }
  // Uploads `values` into (C) tensor `t`; the host copy stays in staging_ until the host sync that
  // ends forward_sync/correct_backward_sync (an upload may still read it after returning).
  void from_host(Backend& backend, const std::vector<double>& values, Tensor& t) {
    staging_.emplace_back(values.begin(), values.end());
    if (!t.defined()) t = backend.alloc(Shape{channels_});
    backend.upload(staging_.back().data(), t);
  }
  void finish_uploads(Backend& backend) {
    BlockingOp mark("sync batch norm host sync");
    backend.synchronize();
    staging_.clear();
  }

  void forward_sync(LayerContext& ctx, const Tensor& x, const Tensor& y, const BatchNormFused& z) {
    Backend& backend = ctx.backend;
    const size_t C = static_cast<size_t>(channels_);
    if (!local_mean_.defined()) {
      local_mean_ = backend.alloc(Shape{channels_});
      local_var_ = backend.alloc(Shape{channels_});
    }
    BatchNormParams local = bn_;
    local.momentum = 1.0f;  // running outputs := this batch's mean and unbiased variance
    local.relu = false;     // its y is replaced below
    backend.batchnorm_forward_train(local, x, params_[0].data, params_[1].data, local_mean_, local_var_, y, save_mean_,
                                    save_inv_std_);
    const double count = static_cast<double>(x.numel() / channels_);  // elements per channel here
    std::vector<float> mine = {static_cast<float>(count)};            // exact: < 2^24 per rank
    const std::vector<float> mean = to_host(backend, local_mean_), var = to_host(backend, local_var_);
    mine.insert(mine.end(), mean.begin(), mean.end());
    mine.insert(mine.end(), var.begin(), var.end());
    const auto all = ctx.ranks->allgather(backend, mine);

    std::vector<double> global_mean(C, 0.0), global_var(C, 0.0), running_var(C), inv_std(C);
    total_count_ = 0;
    for (const auto& r : all) total_count_ += r[0];
    local_count_ = count;
    for (const auto& r : all)
      for (size_t c = 0; c < C; ++c) global_mean[c] += r[0] * r[1 + c] / total_count_;
    for (const auto& r : all) {
      const double unbias = r[0] > 1 ? (r[0] - 1) / r[0] : 1.0;  // back to the biased variance
      for (size_t c = 0; c < C; ++c) {
        const double d = r[1 + c] - global_mean[c];
        global_var[c] += r[0] * (r[1 + C + c] * unbias + d * d) / total_count_;
      }
    }
    for (size_t c = 0; c < C; ++c) {
      running_var[c] = total_count_ > 1 ? global_var[c] * total_count_ / (total_count_ - 1) : global_var[c];
      inv_std[c] = 1.0 / std::sqrt(global_var[c] + bn_.eps);
    }
    inv_std_host_ = inv_std;
    from_host(backend, global_mean, global_mean_);
    from_host(backend, global_var, global_var_);
    backend.batchnorm_forward_inference(bn_, x, params_[0].data, params_[1].data, global_mean_, global_var_, y,
                                        z);
    backend.copy(global_mean_, save_mean_);
    from_host(backend, inv_std, save_inv_std_);
    backend.axpby(bn_.momentum, global_mean_, 1.0f - bn_.momentum, state_[0]);
    from_host(backend, running_var, scratch_c_);
    backend.axpby(bn_.momentum, scratch_c_, 1.0f - bn_.momentum, state_[1]);
    finish_uploads(backend);
  }

  void correct_backward_sync(LayerContext& ctx, const Tensor& x, const Tensor& dx) {
    Backend& backend = ctx.backend;
    const size_t C = static_cast<size_t>(channels_);
    const std::vector<float> dscale = to_host(backend, params_[0].diff), dshift = to_host(backend, params_[1].diff),
                             scale = to_host(backend, params_[0].data);
    std::vector<float> mine(dscale);
    mine.insert(mine.end(), dshift.begin(), dshift.end());
    const auto all = ctx.ranks->allgather(backend, mine);
    std::vector<double> alpha(C), beta(C);
    for (size_t c = 0; c < C; ++c) {
      double dscale_job = 0, dshift_job = 0;  // summed in rank order: the same on every rank
      for (const auto& r : all) {
        dscale_job += r[c];
        dshift_job += r[C + c];
      }
      const double k = scale[c] * inv_std_host_[c];
      alpha[c] = k * (dscale[c] / local_count_ - dscale_job / total_count_);
      beta[c] = k * (dshift[c] / local_count_ - dshift_job / total_count_);
    }
    from_host(backend, alpha, corr_scale_);
    from_host(backend, beta, corr_shift_);
    if (!correction_.defined() || correction_.shape() != x.shape() || correction_.dtype() != x.dtype() ||
        correction_.layout() != x.layout())
      correction_ = backend.alloc(x.shape(), x.dtype()).as_layout(x.layout());
    BatchNormParams affine = bn_;  // the correction is alpha * xhat + beta, with no epilogue
    affine.relu = false;
    backend.batchnorm_forward_inference(affine, x, corr_scale_, corr_shift_, global_mean_, global_var_, correction_);
    backend.axpby(1.0f, correction_, 1.0f, dx);
    finish_uploads(backend);
  }

  void parse() {
    const ConfigNode& node = cfg_.node;
    sync_ = node.get_or<bool>("sync", false);
    bn_.relu = node.get_or<bool>("relu", false);
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
  Tensor scratch_dx_, scratch_dz_, scratch_gate_;
  // Sync batch norm (sync: true with peers): all (C) except correction_ (x's shape).
  bool sync_ = false, synced_ = false;  // synced_: the last forward used the job's statistics
  Tensor local_mean_, local_var_, global_mean_, global_var_, scratch_c_, corr_scale_, corr_shift_, correction_;
  std::vector<double> inv_std_host_;
  std::vector<std::vector<float>> staging_;
  double local_count_ = 0, total_count_ = 0;
};

}  // namespace cnnscale

CNNSCALE_REGISTER_LAYER(BatchNorm, BatchNormLayer)
