// Pooling: max or average over (kernel_h, kernel_w) windows of x (N, C, H, W), Caffe's rounding
// (ceil by default) and average divisor. Keys: pool (max | ave, also avg/average), kernel, stride,
// pad, global_pooling, round (ceil | floor).
#include "layers/layer_params.hpp"

namespace cnnscale {

class PoolingLayer final : public Layer {
 public:
  using Layer::Layer;

  static LayerTypeDoc doc() {
    return {"Max or average over windows of an (N, C, H, W) bottom, with Caffe's output extent rounding and "
            "average divisor (the window's positions inside the padded input).",
            {{"pool", "max | ave", "max", "the method; avg, average, MAX and AVE are accepted too"},
             {"kernel", "integer >= 1 or [height, width]", "required unless global_pooling",
              "the window (Caffe's kernel_size, kernel_h/kernel_w); not with global_pooling"},
             {"stride", "integer >= 1 or [height, width]", "1", "the window's step; not with global_pooling"},
             {"pad", "integer >= 0 or [height, width], < kernel", "0",
              "the padding on each side; not with global_pooling"},
             {"global_pooling", "boolean", "false", "true: one window over the whole plane (output (N, C, 1, 1))"},
             {"round", "ceil | floor", "ceil",
              "how the output extent (in - kernel + 2 pad) / stride + 1 is rounded: ceil as Caffe (a last window "
              "that would start in the padding is dropped), floor as PyTorch and cuDNN"}}};
  }

  std::vector<Shape> infer_shapes(const std::vector<Shape>& bottoms) override {
    const ConfigNode& node = cfg_.node;
    const Shape& x = bottoms.at(0);
    require_rank(node, x, 4, "an (N, C, H, W)");
    parse(x);
    x_shape_ = x;
    int64_t out_h = pool_output_dim(x.h(), pool_.kernel_h, pool_.stride_h, pool_.pad_h, pool_.ceil_mode);
    int64_t out_w = pool_output_dim(x.w(), pool_.kernel_w, pool_.stride_w, pool_.pad_w, pool_.ceil_mode);
    if (out_h <= 0 || out_w <= 0)
      node["kernel"].fail(fmt::format("kernel {}x{} (pad {}x{}) does not fit input {}", pool_.kernel_h, pool_.kernel_w,
                                      pool_.pad_h, pool_.pad_w, x.to_string()));
    require_output_extents(node, "pad", out_h, out_w,
                           fmt::format("pad {}x{} (kernel {}x{}, stride {}x{}) on input {}", pool_.pad_h, pool_.pad_w,
                                       pool_.kernel_h, pool_.kernel_w, pool_.stride_h, pool_.stride_w, x.to_string()));
    return {Shape{x.n(), x.c(), out_h, out_w}};
  }

  // What the backend's forward can leave for the backward (each max window's argmax), sized for x
  // as the net lays it out; none where the backend saves nothing. A bottom that needs more (a larger
  // batch after a reshape) runs without: the backend then leaves it unused (Backend::pool_forward).
  void setup(Backend& backend) override {
    const Layout layout =
        activation_layout(cfg_.activation_layout, x_shape_, cfg_.activation_dtype, cfg_.activation_dtype);
    const int64_t bytes = backend.pool_saved_bytes(pool_, x_shape_, cfg_.activation_dtype, layout);
    if (bytes > 0) saved_ = backend.alloc(Shape{(bytes + 3) / 4}, DType::I32);
  }

  void forward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top) override {
    // Only a training forward saves, and only for the backward that follows it: after any other
    // forward the backward finds the argmax again.
    saved_holds_last_forward_ = ctx.phase == Phase::Train && saved_.defined();
    ctx.backend.pool_forward(pool_, bottom[0], top[0], saved_holds_last_forward_ ? saved_ : Tensor());
  }

  void backward(LayerContext& ctx, const std::vector<Tensor>& bottom, const std::vector<Tensor>& top,
                const std::vector<Tensor>& top_diff, const std::vector<bool>& propagate,
                const std::vector<Tensor>& bottom_diff) override {
    if (propagate[0])
      ctx.backend.pool_backward(pool_, bottom[0], top[0], top_diff[0], bottom_diff[0],
                                saved_holds_last_forward_ ? saved_ : Tensor());
  }

 private:
  void parse(const Shape& x) {
    const ConfigNode& node = cfg_.node;
    std::string method = node.get_or<std::string>("pool", "max");
    if (method == "max" || method == "MAX") {
      pool_.mode = PoolMode::Max;
    } else if (method == "ave" || method == "avg" || method == "average" || method == "AVE") {
      pool_.mode = PoolMode::Average;
    } else {
      node["pool"].fail(fmt::format("unknown pooling method '{}' (expected max or ave)", method));
    }
    std::string round = node.get_or<std::string>("round", "ceil");
    if (round != "ceil" && round != "floor")
      node["round"].fail(fmt::format("unknown rounding '{}' (expected ceil or floor)", round));
    pool_.ceil_mode = round == "ceil";

    if (node.get_or<bool>("global_pooling", false)) {
      // Caffe: global pooling takes the whole plane; an explicit kernel would contradict it.
      for (const char* key : {"kernel", "stride", "pad"})
        if (node.has(key)) node[key].fail("not allowed together with global_pooling: true");
      pool_.kernel_h = static_cast<int>(x.h());
      pool_.kernel_w = static_cast<int>(x.w());
      pool_.stride_h = pool_.stride_w = 1;
      pool_.pad_h = pool_.pad_w = 0;
      return;
    }
    Extent2 kernel = parse_extent2(node, "kernel", std::nullopt, 1);
    Extent2 stride = parse_extent2(node, "stride", Extent2{1, 1}, 1);
    Extent2 pad = parse_extent2(node, "pad", Extent2{0, 0}, 0);
    // Caffe requires pad < kernel so that no window lies entirely in the padding.
    if (pad.h >= kernel.h || pad.w >= kernel.w)
      node["pad"].fail(fmt::format("pad {}x{} must be smaller than kernel {}x{}", pad.h, pad.w, kernel.h, kernel.w));
    pool_.kernel_h = kernel.h;
    pool_.kernel_w = kernel.w;
    pool_.stride_h = stride.h;
    pool_.stride_w = stride.w;
    pool_.pad_h = pad.h;
    pool_.pad_w = pad.w;
  }

  PoolParams pool_;
  Shape x_shape_;
  Tensor saved_;
  bool saved_holds_last_forward_ = false;  // the last forward was a training one given saved_
};

}  // namespace cnnscale

CNNSCALE_REGISTER_LAYER(Pooling, PoolingLayer)
