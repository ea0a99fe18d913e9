// InnerProduct (fully connected): y (N, K) = x (N, D) weight^T + bias (K), with weight (K, D).
// An (N, C, H, W) input is flattened to D = C * H * W (Caffe's axis 1). Keys: num_output, bias,
// weight_filler, bias_filler, param, relu. `relu: true` applies a ReLU to y in the same layer
// (fuse.hpp writes it for a ReLU that alone reads the layer's top): on CUDA the bias and the ReLU
// then ride in the epilogue of the one cuBLASLt matmul. `int8_input_scale: s` (net/int8_spec.hpp,
// from a calibration table) makes it an int8 layer at inference: x quantised with scale s, the
// weights per output row (max |w| / 127), the products summed in int32 (Backend::linear_forward_int8)
// and y = acc * s * s_w[k] + bias in fp32, stored in the net's precision. Where the backend has no
// int8 matmul, the first pass says so (a warning, and implementation()) and the layer keeps the net's
// precision.
#include "core/log.hpp"
#include "layers/filler.hpp"
#include "layers/int8_weights.hpp"
#include "layers/layer_params.hpp"

namespace cnnscale {

class InnerProductLayer final : public Layer {
 public:
  using Layer::Layer;

  static LayerTypeDoc doc() {
    return {"Fully connected: y (N, num_output) = x W^T + bias, an (N, C, H, W) bottom read as (N, C * H * W).",
            joined_keys(
                {{"num_output", "integer >= 1", "required", "the outputs per sample"}}, weighted_key_docs("weights"),
                {{"int8_input_scale", "number > 0", "none",
                  "inference in int8: the input is quantised with this scale, the weights per output row (written "
                  "from a calibration table)"}})};
  }

  std::vector<Shape> infer_shapes(const std::vector<Shape>& bottoms) override {
    parse();
    const Shape& x = bottoms.at(0);
    if (x.rank() < 2) cfg_.node.fail(fmt::format("expected an (N, ...) input of rank >= 2, got {}", x.to_string()));
    in_features_ = x.sample_numel();
    return {Shape{x.n(), num_output_}};
  }

  std::vector<ParamSpec> param_specs() const override {
    std::vector<ParamSpec> specs{ParamSpec{"weight", Shape{num_output_, in_features_}, w_.weight_filler,
                                           w_.mults[0].lr_mult, w_.mults[0].decay_mult, in_features_, num_output_}};
    if (w_.bias)
      specs.push_back(
          ParamSpec{"bias", Shape{num_output_}, w_.bias_filler, w_.mults[1].lr_mult, w_.mults[1].decay_mult, 1, 1});
    for (auto& s : specs) s.dtype = cfg_.activation_dtype;  // compute copies in the activations' dtype
    return specs;
  }

  LayerCost cost(const std::vector<Shape>& bottoms, const std::vector<Shape>& tops) const override {
    LayerCost c = Layer::cost(bottoms, tops);
    c.forward_macs = num_output_ * in_features_;
    return c;
  }

  void forward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top) override {
    if (w_.int8_input_scale > 0 && forward_int8(ctx, bottom[0], top[0])) return;
    // y (N, K) = x (N, D) * W^T (D, K), D in (C, H, W) order: a channels-last input is reordered.
    ctx.backend.linear_forward(nchw_input(ctx.backend, bottom[0]), params_[0].data,
                               w_.bias ? params_[1].data : Tensor(), w_.relu, top[0]);
  }

  std::string implementation(const Backend& /*backend*/) const override {
    if (int8_.ran) return fmt::format("int8 (input scale {:.4g}, int32 sums)", w_.int8_input_scale);
    return int8_.unavailable ? fmt::format("not int8 ({})", int8_.why) : std::string();
  }

  // The allreduce of dW and db moves about 2 (R - 1) / R x K (D + 1) values per rank; gathering the
  // other ranks' x and dy moves (R - 1) x rows x (D + K). Gathered where that is at most half, which
  // leaves room for the gathered matmul (R times the rows) and the wait for the gather inside
  // backward: CaffeNet's fc6 at 64 rows on 4 ranks moves 2.6 M values instead of 57 M.
  bool gathers_gradients(int64_t rows, int ranks) const override {
    if (ranks < 2 || rows < 1 || w_.int8_input_scale > 0) return false;
    const double allreduce = 2.0 * (ranks - 1) / ranks * static_cast<double>(num_output_) * (in_features_ + 1);
    const double gather = static_cast<double>(ranks - 1) * rows * static_cast<double>(in_features_ + num_output_);
    return 2 * gather <= allreduce;
  }

  void backward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top,
                const std::vector<Tensor>& top_diff, const std::vector<bool>& propagate,
                const std::vector<Tensor>& bottom_diff) override {
    const int64_t batch = bottom[0].shape().n();
    // The ReLU's backward in place: the top gradient is this layer's alone (its consumers' sum).
    if (w_.relu) ctx.backend.relu_backward(top[0], top_diff[0], top_diff[0]);
    // dW (K, D) = dy^T (K, N) * x (N, D) and db; a channels-last x is still in nchw_ from forward.
    const Tensor x = bottom[0].layout() == Layout::NCHW ? bottom[0] : nchw_;
    const bool gather = ctx.gather_rows > 0;
    if (gather) {
      start_gather(ctx, x.reshape(Shape{batch, in_features_}), top_diff[0]);
    } else {
      ctx.backend.linear_backward_params(x, top_diff[0], params_[0].diff, w_.bias ? params_[1].diff : Tensor());
    }
    // dx (N, D) = dy (N, K) * W (K, D): beside the gather, when there is one.
    if (propagate[0]) input_gradient(ctx, batch, top_diff[0], bottom_diff[0]);
    if (gather) {
      // Every rank's rows, in rank order: the job's global batch (zero rows pad a smaller share and
      // add nothing), so dW and db are the job's gradients, the same bits on every rank.
      ctx.ranks->wait_gathers();
      ctx.backend.linear_backward_params(gather_.x_all, gather_.dy_all, params_[0].diff,
                                         w_.bias ? params_[1].diff : Tensor());
    }
  }

 private:
  // Gathering (LayerContext::gather_rows): each rank's x (rows, D) and dy (rows, K), zero-padded
  // to `rows`, and every rank's, (R x rows, D) and (R x rows, K).
  struct Gathered {
    Tensor x_mine, dy_mine, x_all, dy_all;
  };
  Gathered gather_;

  void start_gather(LayerContext& ctx, const Tensor& x, const Tensor& dy) {
    Backend& b = ctx.backend;
    const int64_t rows = ctx.gather_rows, n = x.shape()[0];
    const int ranks = ctx.ranks->ranks();
    CNNSCALE_CHECK(n <= rows, "layer {}: {} rows to gather, more than the {} every rank sends", name(), n, rows);
    const DType dt = x.dtype();
    if (!gather_.x_all.defined() || gather_.x_all.shape()[0] != ranks * rows || gather_.x_all.dtype() != dt) {
      gather_.x_mine = b.alloc(Shape{rows, in_features_}, dt);
      gather_.dy_mine = b.alloc(Shape{rows, num_output_}, dy.dtype());
      gather_.x_all = b.alloc(Shape{ranks * rows, in_features_}, dt);
      gather_.dy_all = b.alloc(Shape{ranks * rows, num_output_}, dy.dtype());
    }
    auto send = [&](const Tensor& t, const Tensor& buffer) {
      if (n == rows) return t;  // sent as it is
      const int64_t width = t.shape()[1];
      b.copy(t, buffer.view(0, t.shape()));
      // Zero padding rows, however many this rank's share left before.
      b.fill(buffer.view(n * width, Shape{(rows - n) * width}), 0.0f);
      return buffer;
    };
    ctx.ranks->gather_async(send(x, gather_.x_mine), gather_.x_all);
    ctx.ranks->gather_async(send(dy, gather_.dy_mine), gather_.dy_all);
  }

  void input_gradient(LayerContext& ctx, int64_t batch, const Tensor& dy, const Tensor& dx) {
    if (dx.layout() == Layout::NCHW) {
      ctx.backend.matmul(false, false, batch, in_features_, num_output_, 1.0f, dy, params_[0].data, 0.0f, dx);
      return;
    }
    ctx.backend.matmul(false, false, batch, in_features_, num_output_, 1.0f, dy, params_[0].data, 0.0f, nchw_diff_);
    ctx.backend.convert(nchw_diff_, dx);
  }

  // x itself, or (channels-last x) its NCHW copy in nchw_, with nchw_diff_ beside it for backward.
  const Tensor& nchw_input(Backend& backend, const Tensor& x) {
    if (x.layout() == Layout::NCHW) return x;
    if (!nchw_.defined() || nchw_.shape() != x.shape() || nchw_.dtype() != x.dtype()) {
      nchw_ = backend.alloc(x.shape(), x.dtype());
      nchw_diff_ = backend.alloc(x.shape(), x.dtype());
    }
    backend.convert(x, nchw_);
    return nchw_;
  }

  // The int8 forward; false where the backend has none (then the caller runs the net's precision).
  bool forward_int8(LayerContext& ctx, const Tensor& x_any, const Tensor& y) {
    if (ctx.phase != Phase::Test) throw_runtime("layer {}: an int8 fully connected layer runs inference only", name());
    if (int8_.unavailable) return false;
    Backend& b = ctx.backend;
    const bool gpu = !x_any.device().is_cpu();
    if (!int8_.wq.defined()) prepare_int8(b, gpu);
    const int64_t n = x_any.shape().n();
    const Tensor x = nchw_input(b, x_any).reshape(Shape{n, in_features_});
    if (!int8_.xq.defined() || int8_.xq.shape()[0] != n) int8_.xq = b.alloc(Shape{n, int8_.wq.shape()[1]}, DType::I8);
    b.quantize_int8(x, static_cast<float>(w_.int8_input_scale), int8_.xq);
    try {
      b.linear_forward_int8(int8_.xq, int8_.wq, int8_.scale, int8_.bias, w_.relu, y);
    } catch (const RuntimeError& e) {
      if (int8_.ran) throw;
      int8_.unavailable = true;
      int8_.why = e.what();
      log::warn("layer {}: no int8 matmul ({}); it runs in the network's precision", name(), int8_.why);
      return false;
    }
    int8_.ran = true;
    return true;
  }

  // The weights quantised per output row as calibration's table has them; on a GPU the rows and
  // columns padded with zeros to multiples of 16 (cuBLASLt's int8 matmuls want multiples of 4). The
  // dequantising scale s_x * s_w[k] and the bias, fp32.
  void prepare_int8(Backend& b, bool gpu) {
    const int64_t k = num_output_, d = in_features_;
    const int64_t kp = gpu ? (k + 15) / 16 * 16 : k, dp = gpu ? (d + 15) / 16 * 16 : d;
    std::vector<float> w(static_cast<size_t>(k * d)), bias(static_cast<size_t>(k), 0.0f), scale(static_cast<size_t>(k));
    b.download(params_[0].master, w.data());
    if (w_.bias) b.download(params_[1].master, bias.data());
    std::vector<int8_t> q(static_cast<size_t>(kp * dp), 0);
    const std::vector<float> sw = quantize_weight_rows(w, k, d, q, [&](int64_t o, int64_t i) { return o * dp + i; });
    for (int64_t o = 0; o < k; ++o)
      scale[static_cast<size_t>(o)] = static_cast<float>(w_.int8_input_scale * sw[static_cast<size_t>(o)]);
    int8_.wq = b.alloc(Shape{kp, dp}, DType::I8);
    int8_.scale = b.alloc(Shape{k});
    int8_.bias = b.alloc(Shape{k});
    b.upload(q.data(), int8_.wq);
    b.upload(scale.data(), int8_.scale);
    b.upload(bias.data(), int8_.bias);
    b.synchronize();  // the host vectors go out of scope
  }

  void parse() {
    const ConfigNode& node = cfg_.node;
    num_output_ = parse_required_int_at_least(node, "num_output", 1);
    w_ = parse_weighted_keys(node);
  }

  int64_t num_output_ = 0;
  int64_t in_features_ = 0;  // D = C * H * W
  WeightedKeys w_;           // bias, fillers, multipliers, fused ReLU, int8 input scale
  Tensor nchw_, nchw_diff_;
  struct Int8State {
    Tensor wq, scale, bias, xq;  // quantised weights (K', D'), s_x * s_w and bias (f32), the quantised input
    bool ran = false, unavailable = false;
    std::string why;
  } int8_;
};

}  // namespace cnnscale

CNNSCALE_REGISTER_LAYER(InnerProduct, InnerProductLayer)
