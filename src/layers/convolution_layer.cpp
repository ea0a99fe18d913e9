// Convolution: y (N, K, P, Q) = conv(x (N, C, H, W), weight (K, C / group, R, S)) + bias (K).
// Keys: num_output, kernel, stride, pad, dilation, group, bias, weight_filler, bias_filler, param,
// relu. `relu: true` applies a ReLU to y in the same layer (fuse.hpp writes it for a ReLU that is
// the convolution's only reader): on the GPU the convolution, its bias and the ReLU can then run as
// one fused cuDNN op, and backward gates the top gradient in place before the convolution's own.
// A second bottom (with `relu: true` and a bias) is a residual addend of y's shape added before the
// ReLU: y = max(0, conv(x) + bias + addend), a residual block's last convolution once its batch
// norm is folded (fuse.hpp writes it for the shortcut sum and ReLU that alone read the output); the
// addend's gradient is the gated top gradient. A bias without ReLU runs as conv_forward_bias (on the
// GPU one fused plan where it measures faster than the convolution and bias apart).
// `int8_input_scale: s` (written by net/int8_spec.hpp from a calibration table) makes it an int8
// convolution at inference: x quantised with scale s, the filters per output channel (max |w| /
// 127, as calibration's weight scales), the products summed in int32 (Backend::conv_forward_int8),
// then bias, addend and ReLU in fp32 and y stored in the net's precision. `int8_output_scale: s_y`
// (with relu) makes the output itself int8, round(y / s_y), for int8 convolutions that read it with
// that input scale: the requantisation rides in the epilogue and the next layer reads a quarter of
// the bytes and quantises nothing; `int8_addend_scale: s_z` says the addend is such an int8 tensor.
// Where the backend has no int8 engine for its shape, the first pass says so (a warning, and
// implementation()) and the layer runs in the net's precision from then on -- unless an operand is
// int8, which nothing else reads: then it is an error.
#include <array>
#include <optional>

#include "core/checked_math.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "layers/filler.hpp"
#include "layers/int8_weights.hpp"
#include "layers/layer_params.hpp"

namespace cnnscale {

class ConvolutionLayer final : public Layer {
 public:
  using Layer::Layer;

  static LayerTypeDoc doc() {
    return {
        "2-d convolution of an (N, C, H, W) bottom with (num_output, C / group, kernel) filters, plus a "
        "bias. An optional second bottom is a residual addend of the output's shape, added before the ReLU "
        "(needs `relu: true` and a bias).",
        joined_keys(
            {{"num_output", "integer >= 1", "required", "the output channels (filters)"},
             {"kernel", "integer >= 1 or [height, width]", "required",
              "the filter extent (Caffe's kernel_size, kernel_h/kernel_w)"},
             {"stride", "integer >= 1 or [height, width]", "1", "the filter's step (Caffe's stride_h/stride_w)"},
             {"pad", "integer >= 0 or [height, width]", "0", "zero padding on each side (Caffe's pad_h/pad_w)"},
             {"dilation", "integer >= 1 or [height, width]", "1", "the spacing of the filter's taps"},
             {"group", "integer >= 1 dividing C and num_output", "1",
              "channel groups: each filter sees C / group input channels"}},
            weighted_key_docs("filters"),
            {{"int8_input_scale", "number > 0", "none",
              "inference in int8: the input is quantised with this scale, the filters per output channel "
              "(written from a calibration table; needs group 1)"},
             {"int8_output_scale", "number > 0", "none",
              "with int8_input_scale and relu: the output is stored in int8, round(y / scale)"},
             {"int8_addend_scale", "number > 0", "none",
              "with int8_input_scale and a second bottom: the addend is an int8 tensor of this scale"}}),
        {1, 2}};
  }

  std::vector<Shape> infer_shapes(const std::vector<Shape>& bottoms) override {
    parse();
    const ConfigNode& node = cfg_.node;
    const Shape& x = bottoms.at(0);
    addend_ = bottoms.size() > 1;
    if (addend_ && !(w_.relu && w_.bias))
      node.fail(
          fmt::format("a second bottom (the residual addend '{}') needs `relu: true` and a bias", cfg_.bottoms.at(1)));
    if (int8_addend_scale_ > 0 && !addend_)
      node["int8_addend_scale"].fail("an addend scale needs the addend (a second bottom)");
    require_rank(node, x, 4, "an (N, C, H, W)");
    if (x.c() % conv_.groups != 0)
      node["group"].fail(
          fmt::format("group {} does not divide the {} input channels of {}", conv_.groups, x.c(), x.to_string()));
    if (num_output_ % conv_.groups != 0)
      node["num_output"].fail(fmt::format("num_output {} is not a multiple of group {}", num_output_, conv_.groups));
    in_channels_ = x.c();
    int64_t out_h = conv_output_dim(x.h(), conv_.kernel_h, conv_.stride_h, conv_.pad_h, conv_.dilation_h);
    int64_t out_w = conv_output_dim(x.w(), conv_.kernel_w, conv_.stride_w, conv_.pad_w, conv_.dilation_w);
    if (out_h <= 0 || out_w <= 0)
      node["kernel"].fail(fmt::format("kernel {}x{} (dilation {}x{}, pad {}x{}) does not fit input {}: output {}x{}",
                                      conv_.kernel_h, conv_.kernel_w, conv_.dilation_h, conv_.dilation_w, conv_.pad_h,
                                      conv_.pad_w, x.to_string(), out_h, out_w));
    require_output_extents(node, "pad", out_h, out_w,
                           fmt::format("pad {}x{} (kernel {}x{}, stride {}x{}, dilation {}x{}) on input {}",
                                       conv_.pad_h, conv_.pad_w, conv_.kernel_h, conv_.kernel_w, conv_.stride_h,
                                       conv_.stride_w, conv_.dilation_h, conv_.dilation_w, x.to_string()));
    const Shape y{x.n(), num_output_, out_h, out_w};
    if (addend_ && bottoms[1] != y)
      node.fail(fmt::format("the addend '{}' is {} but the output is {}", cfg_.bottoms.at(1), bottoms[1].to_string(),
                            y.to_string()));
    return {y};
  }

  DType top_dtype(size_t /*top*/) const override { return int8_output_scale_ > 0 ? DType::I8 : cfg_.activation_dtype; }

  std::vector<ParamSpec> param_specs() const override {
    const int64_t group_channels = in_channels_ / conv_.groups;
    const int64_t window = static_cast<int64_t>(conv_.kernel_h) * conv_.kernel_w;
    ParamSpec weight{"weight",
                     Shape{num_output_, group_channels, conv_.kernel_h, conv_.kernel_w},
                     w_.weight_filler,
                     w_.mults[0].lr_mult,
                     w_.mults[0].decay_mult,
                     group_channels * window,
                     num_output_ / conv_.groups * window};
    std::vector<ParamSpec> specs{weight};
    if (w_.bias)
      specs.push_back(
          ParamSpec{"bias", Shape{num_output_}, w_.bias_filler, w_.mults[1].lr_mult, w_.mults[1].decay_mult, 1, 1});
    for (auto& s : specs) s.dtype = cfg_.activation_dtype;  // compute copies in the activations' dtype
    specs[0].layout = activation_layout(cfg_.activation_layout, specs[0].shape, specs[0].dtype,
                                        cfg_.activation_dtype);  // KRSC filters
    return specs;
  }

  LayerCost cost(const std::vector<Shape>& bottoms, const std::vector<Shape>& tops) const override {
    LayerCost c = Layer::cost(bottoms, tops);
    const Shape& y = tops.at(0);
    // Output values times the products each sums: two bounded counts whose product may still wrap.
    const auto macs = bounded_product(
        std::array<int64_t, 6>{y.c(), y.h(), y.w(), in_channels_ / conv_.groups, conv_.kernel_h, conv_.kernel_w});
    if (!macs) cfg_.node.fail(fmt::format("{} multiply-accumulates per sample overflow 64 bits", y.to_string()));
    c.forward_macs = *macs;
    return c;
  }

  void forward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top) override {
    if (w_.int8_input_scale > 0 && forward_int8(ctx, bottom, top)) return;
    const Tensor& x = bottom[0];
    const Tensor& w = params_[0].data;
    // Remembered for implementation(); made anew only when the call changes (a reshaped batch), so
    // the steady step allocates nothing for it.
    const Layout layout = conv_call_layout(x, w, top[0]);
    if (!ran_ || ran_->x != x.shape() || ran_->dtype != x.dtype() || ran_->layout != layout)
      ran_ = ConvSignature{conv_,   x.shape(),          w.shape(), x.dtype(),           layout,
                           w_.relu && w_.bias, addend_, w_.bias && !w_.relu, adds_bottom_diff(0)};
    if (addend_) return ctx.backend.conv_forward_residual(conv_, x, w, params_[1].data, bottom[1], top[0]);
    if (w_.bias && !w_.relu) return ctx.backend.conv_forward_bias(conv_, x, w, params_[1].data, top[0]);
    if (w_.relu && w_.bias) return ctx.backend.conv_forward_bias_relu(conv_, x, w, params_[1].data, top[0]);
    ctx.backend.conv_forward(conv_, x, w, top[0]);  // no bias
    if (w_.relu) ctx.backend.relu_forward(top[0], top[0]);
  }

  std::string implementation(const Backend& backend) const override {
    if (int8_.ran)
      return fmt::format("int8 (input scale {:.4g}, int32 sums{})", w_.int8_input_scale,
                         int8_output_scale_ > 0 ? fmt::format(", int8 output scale {:.4g}", int8_output_scale_) : "");
    const std::string how = ran_ ? backend.conv_implementation(*ran_) : std::string();
    return int8_.unavailable ? fmt::format("not int8 ({}); {}", int8_.why, how) : how;
  }

  void backward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top,
                const std::vector<Tensor>& top_diff, const std::vector<bool>& propagate,
                const std::vector<Tensor>& bottom_diff) override {
    // The ReLU's backward in place: the top gradient is this layer's alone (its consumers' sum).
    if (w_.relu) ctx.backend.relu_backward(top[0], top_diff[0], top_diff[0]);
    if (addend_ && propagate[1]) ctx.backend.copy(top_diff[0], bottom_diff[1]);
    ctx.backend.conv_backward_filter(conv_, bottom[0], top_diff[0], params_[0].diff);
    if (w_.bias) ctx.backend.bias_backward(top_diff[0], params_[1].diff);
    if (!propagate[0]) return;
    if (adds_bottom_diff(0))
      ctx.backend.conv_backward_data_add(conv_, params_[0].data, top_diff[0], bottom_diff[0], add_scratch_[0]);
    else
      ctx.backend.conv_backward_data(conv_, params_[0].data, top_diff[0], bottom_diff[0]);
  }

  // The data gradient adds to what the blob's other consumers wrote (Backend::conv_backward_data_add).
  bool can_add_bottom_diff(size_t bottom) const override { return bottom == 0; }

 private:
  // The int8 forward; false where it cannot run (then the caller runs the net's precision).
  bool forward_int8(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top) {
    if (ctx.phase != Phase::Test) throw_runtime("layer {}: an int8 convolution runs inference only", name());
    if (int8_.unavailable) return false;
    Backend& b = ctx.backend;
    const Tensor& x = bottom[0];
    const Tensor z = addend_ ? bottom[1] : Tensor();
    // An int8 operand (an int8 activation in or out) leaves no precision to fall back to.
    const bool int8_io = x.dtype() == DType::I8 || top[0].dtype() == DType::I8 || (addend_ && z.dtype() == DType::I8);
    const bool gpu = !x.device().is_cpu();
    const bool one_pixel = x.shape().h() * x.shape().w() == 1;
    if (gpu && x.layout() != Layout::NHWC && !one_pixel) {
      const std::string why = "a GPU runs int8 convolutions channels-last, and this net's activations are NCHW";
      if (int8_io) throw_runtime("layer {}: {}", name(), why);
      unavailable(why);
      return false;
    }
    if (!int8_.wq.defined()) prepare_int8(b, gpu);
    const Shape& s = x.shape();
    const Layout order = gpu ? Layout::NHWC : Layout::NCHW;
    // One pixel: NCHW and NHWC are the same bytes.
    auto in_order = [&](const Tensor& t) { return t.layout() == order ? t : t.as_layout(order); };
    Tensor xq;
    if (x.dtype() == DType::I8) {  // quantised by the layer before, with this layer's input scale
      if (s.c() != int8_.wq.shape()[1])
        throw_runtime("layer {}: an int8 input of {} channels, where the filters take {}", name(), s.c(),
                      int8_.wq.shape()[1]);
      xq = in_order(x);
    } else {
      const Shape qs{s.n(), int8_.wq.shape()[1], s.h(), s.w()};
      if (!int8_.xq.defined() || int8_.xq.shape() != qs) int8_.xq = b.alloc(qs, DType::I8).as_layout(order);
      b.quantize_int8(in_order(x), static_cast<float>(w_.int8_input_scale), int8_.xq);
      xq = int8_.xq;
    }
    const bool z_i8 = addend_ && z.dtype() == DType::I8;
    if (z_i8 != (int8_addend_scale_ > 0))
      throw_runtime("layer {}: the addend is {} but the layer {}", name(), dtype_name(z.dtype()),
                    z_i8 ? "has no int8 addend scale" : "has an int8 addend scale");
    try {
      b.conv_forward_int8(conv_, xq, int8_.wq, int8_.scale, int8_.bias, addend_ ? in_order(z) : Tensor(),
                          int8_.addend_scale, w_.relu, in_order(top[0]));
    } catch (const RuntimeError& e) {
      if (int8_.ran || int8_io) throw;
      unavailable(e.what());
      return false;
    }
    int8_.ran = true;
    return true;
  }

  void unavailable(const std::string& why) {
    int8_.unavailable = true;
    int8_.why = why;
    log::warn("layer {}: no int8 convolution ({}); it runs in the network's precision", name(), why);
  }

  // The filters quantised per output channel (core/int8.hpp's weight scale, as calibration's table),
  // channels-last (KRSC, C padded with zeros to a multiple of 16, as cuDNN's int8 engines want) on a
  // GPU; the dequantising scale s_x * s_w[k] and the bias, both fp32, each divided by the output's
  // scale s_y where the output is int8 (1 otherwise), and the addend's multiplier (s_z / s_y).
  void prepare_int8(Backend& b, bool gpu) {
    const int64_t k = num_output_, c = in_channels_, rs = int64_t{conv_.kernel_h} * conv_.kernel_w;
    const int64_t cp = gpu ? (c + 15) / 16 * 16 : c;
    const double out = int8_output_scale_ > 0 ? int8_output_scale_ : 1.0;
    std::vector<float> w(static_cast<size_t>(k * c * rs)), bias(static_cast<size_t>(k), 0.0f),
        scale(static_cast<size_t>(k)),
        addend_scale(static_cast<size_t>(k),
                     static_cast<float>((int8_addend_scale_ > 0 ? int8_addend_scale_ : 1.0) / out));
    b.download(params_[0].master, w.data());
    if (w_.bias) b.download(params_[1].master, bias.data());
    for (float& v : bias) v = static_cast<float>(v / out);
    std::vector<int8_t> q(static_cast<size_t>(k * cp * rs), 0);
    // Element j = (ci, i) of filter o: KRSC with cp channels on a GPU, KCRS on the CPU.
    const std::vector<float> sw = quantize_weight_rows(w, k, c * rs, q, [&](int64_t o, int64_t j) {
      const int64_t ci = j / rs, i = j % rs;
      return gpu ? (o * rs + i) * cp + ci : (o * cp + ci) * rs + i;
    });
    for (int64_t o = 0; o < k; ++o)
      scale[static_cast<size_t>(o)] = static_cast<float>(w_.int8_input_scale * sw[static_cast<size_t>(o)] / out);
    int8_.wq =
        b.alloc(Shape{k, cp, conv_.kernel_h, conv_.kernel_w}, DType::I8).as_layout(gpu ? Layout::NHWC : Layout::NCHW);
    int8_.scale = b.alloc(Shape{k});
    int8_.bias = b.alloc(Shape{k});
    b.upload(q.data(), int8_.wq);
    b.upload(scale.data(), int8_.scale);
    b.upload(bias.data(), int8_.bias);
    // The addend in the epilogue's units: an int8 one times s_z / s_y, a floating-point one beside an
    // int8 output times 1 / s_y, any other as it is.
    if (addend_ && (int8_addend_scale_ > 0 || int8_output_scale_ > 0)) {
      int8_.addend_scale = b.alloc(Shape{k});
      b.upload(addend_scale.data(), int8_.addend_scale);
    }
    b.synchronize();  // the host vectors go out of scope
  }

  void parse() {
    const ConfigNode& node = cfg_.node;
    num_output_ = parse_required_int_at_least(node, "num_output", 1);
    Extent2 kernel = parse_extent2(node, "kernel", std::nullopt, 1);
    Extent2 stride = parse_extent2(node, "stride", Extent2{1, 1}, 1);
    Extent2 pad = parse_extent2(node, "pad", Extent2{0, 0}, 0);
    Extent2 dilation = parse_extent2(node, "dilation", Extent2{1, 1}, 1);
    conv_ = ConvParams{kernel.h, kernel.w, stride.h, stride.w, pad.h, pad.w, dilation.h, dilation.w, 1};
    conv_.groups = parse_int_at_least(node, "group", 1, 1);
    w_ = parse_weighted_keys(node);
    if (w_.int8_input_scale > 0 && conv_.groups != 1)
      node["int8_input_scale"].fail("int8 convolutions are ungrouped (group 1)");
    int8_output_scale_ = node.get_or<double>("int8_output_scale", 0.0);
    int8_addend_scale_ = node.get_or<double>("int8_addend_scale", 0.0);
    for (const auto& [key, v] :
         {std::pair{"int8_output_scale", int8_output_scale_}, {"int8_addend_scale", int8_addend_scale_}})
      if (node.has(key)) {
        if (!(v > 0)) node[key].fail(fmt::format("a scale is positive, got {}", v));
        if (!(w_.int8_input_scale > 0))
          node[key].fail("an int8 output or addend belongs to an int8 convolution (int8_input_scale)");
      }
    if (int8_output_scale_ > 0 && !w_.relu)
      node["int8_output_scale"].fail("an int8 output is a ReLU's (`relu: true`), in [0, 127]");
  }

  ConvParams conv_;
  int64_t num_output_ = 0;
  int64_t in_channels_ = 0;
  WeightedKeys w_;                // bias, fillers, multipliers, fused ReLU, int8 input scale
  bool addend_ = false;           // a second bottom, added before the ReLU
  double int8_output_scale_ = 0;  // > 0: the output stored int8 with this scale
  double int8_addend_scale_ = 0;  // > 0: the addend is int8 with this scale
  struct Int8State {
    // quantised filters, s_x * s_w / s_y, bias / s_y and the addend's s_z / s_y or 1 / s_y (f32, or
    // undefined: 1), the quantised input
    Tensor wq, scale, bias, addend_scale, xq;
    bool ran = false, unavailable = false;
    std::string why;
  } int8_;
  std::optional<ConvSignature> ran_;  // the last forward's call (implementation())
};

}  // namespace cnnscale

CNNSCALE_REGISTER_LAYER(Convolution, ConvolutionLayer)
