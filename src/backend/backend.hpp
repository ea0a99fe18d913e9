// The Backend interface: memory and every op a layer needs. Two implementations: cpu/ (reference,
// always built; OpenBLAS GEMM) and cuda/ (cuDNN, cuBLAS, own kernels only where no library call
// exists). This header includes no CUDA header so everything above it builds without the toolkit.
//
// Conventions for every op:
//  - tensors are NCHW float32 unless stated; activations (N, C, H, W), fully-connected (N, C);
//  - mixed precision: the CUDA backend also runs every op on activations, their gradients and the
//    weights' compute copies in bf16 or f16 (the tensors of one call share that dtype; batch-norm
//    scale, shift and statistics, softmax probabilities, losses and the SGD state stay f32), always
//    accumulating in fp32. The CPU backend is the f32 reference: it stores 16-bit tensors (convert)
//    but refuses to compute on them;
//  - channels-last: the CUDA backend takes 4-d activations in NHWC memory order (Tensor::layout;
//    the shape stays (N, C, H, W)); the tensors of one call share a layout, except that tensors of
//    one pixel are the same bytes in both. The CPU backend computes in NCHW only;
//  - ops run in the backend's stream order and never synchronise with the host, except
//    download() and synchronize(); CPU ops run immediately;
//  - outputs are overwritten (no accumulation) unless the op says otherwise;
//  - an op a backend cannot run throws an Error naming the op and the backend (no silent fallback).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/kernel_trace.hpp"
#include "backend/op_params.hpp"
#include "core/precision.hpp"
#include "core/tensor.hpp"

namespace cnnscale {

// A point in the backend's stream order for timing (CUDA: a timing-enabled event on the compute
// stream; CPU: a host steady-clock reading). Opaque so that this header needs no CUDA header.
class TimingEvent {
 public:
  virtual ~TimingEvent() = default;
};

// A sequence of backend work recorded once and replayed as one launch (CUDA: a CUDA graph). The
// work's kernel arguments and buffers are fixed at capture; what changes from one replay to the
// next is read from device memory (the *_at ops below). Timing points recorded during the capture
// (Backend::capture_timing_point) are recorded again by each replay, into events launch() returns.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  // Timing points recorded during the capture, in capture order.
  virtual size_t timing_points() const = 0;
  // Whether launch() may be called now. Work captured with event nodes (CaptureOptions) replays a
  // copy whose events are fixed: it is ready once everyone who took the next copy's events from an
  // earlier launch (a phase timer, a communicator's busy brackets) has let them go.
  virtual bool ready() const = 0;
  // Queues one replay; returns the timing_points() events it records, in capture order.
  virtual std::vector<std::shared_ptr<TimingEvent>> launch() = 0;
  // False once the backend has reallocated a buffer of its own that the captured work uses (a
  // workspace or staging buffer grown by other work since): the capture must be made again.
  virtual bool valid() const = 0;
};

// How captured work keeps its timing points.
// - Segments: each point ends one graph and begins the next; a replay launches the graphs in turn
//   with an event record between them, into fresh events, so any number of replays may be queued.
//   Work that forks another stream must have joined it again at every point.
// - Nodes: one graph whose points are event-record nodes, for work whose other stream runs across
//   a point (the bucketed gradient exchange runs on the communication stream past backward's end).
//   A node's event is fixed when it is captured, so the work is captured `copies` times and the
//   replays take the copies in turn (CapturedWork::ready()).
struct CaptureOptions {
  enum class Points { Segments, Nodes };
  Points points = Points::Segments;
  int copies = 1;  // Nodes: how many replays may be unread at once
};

// Device memory a backend holds: the bytes of its tensors (alloc) and of its own workspaces (CUDA:
// the convolution workspace), by its own count of what it asked for, not the allocator's (a caching
// pool may keep more). Pinned host buffers (alloc_host) are not counted.
struct MemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;  // the most held at once since construction or reset_peak_memory()
};

// conv_backward_data_add's scratch where the backend needs one: dx's shape, dtype and layout. Throws
// otherwise, naming `who` (the backend or engine).
void check_add_scratch(const std::string& who, const Tensor& dx, const Tensor& scratch);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu" or "cuda"
  virtual Device device() const = 0;
  virtual std::string description() const = 0;  // device name and library versions, for logs/results
  // SMs of the GPU partition this backend is confined to, as granted (the driver may round the
  // request up); 0 for the whole device or the CPU.
  virtual int granted_sms() const { return 0; }
  // The memory order a net computing in `compute` keeps its 4-d activations and filters in: NCHW
  // here (the CPU reference); the CUDA backend answers channels-last where its tensor-core kernels
  // want it.
  virtual Layout activation_layout_for(DType compute) const {
    (void)compute;
    return Layout::NCHW;
  }

  // ---- memory -------------------------------------------------------------------------------
  virtual Tensor alloc(const Shape& shape, DType dtype = DType::F32) = 0;  // zero-filled
  // Tensors may be freed on any thread (their storage's last owner), so both are thread-safe. The
  // defaults count nothing, for backends without an account of their memory.
  virtual MemoryStats memory_stats() const { return {}; }
  virtual void reset_peak_memory() {}  // the peak restarts at what is held now
  // Host memory suited to fast uploads (pinned on CUDA). Uploads from it are asynchronous: do
  // not overwrite it before the stream has passed the upload (synchronize or a later download).
  virtual std::shared_ptr<Storage> alloc_host(size_t bytes) = 0;
  virtual void upload(const void* host, const Tensor& dst) = 0;  // dst.bytes() bytes
  virtual void download(const Tensor& src, void* host) = 0;      // waits for pending work first
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;   // same dtype and numel
  virtual void fill(const Tensor& t, float value) = 0;           // f32 or i32 (CUDA: also bf16, f16)
  virtual void fill_i32(const Tensor& t, int32_t value) = 0;     // i32, any value exactly (no float on the way)
  // dst = scale * src, converting between f32, bf16 and f16 (same numel; rounds to nearest even) and,
  // for 4-d tensors of one shape, between the NCHW and NHWC memory orders.
  virtual void convert(const Tensor& src, const Tensor& dst, float scale = 1.0f) = 0;
  // The same with the scale read from device memory (scale[0], f32): for a captured step whose
  // scale moves between replays (fp16 loss scaling). In place allowed in one memory order. The
  // default reads the scale back and calls convert().
  virtual void convert_scaled_at(const Tensor& src, const Tensor& dst, const Tensor& scale);
  // convert() of the elements in [ranges[2k], ranges[2k+1]) only, for every k, in one op: `src` and
  // `dst` are 1-d of one numel, `ranges` i32 (2S) ascending, disjoint and within it; the elements
  // between the ranges are left as they are. For many small tensors at fixed places of one buffer
  // (the unmirrored parameters' gradients of a bucket, rounded into their slots before its
  // exchange), where a convert each would cost a launch each. The default reads the ranges back and
  // converts each view.
  virtual void convert_segments(const Tensor& src, const Tensor& dst, const Tensor& ranges);
  virtual void synchronize() = 0;

  // ---- timing: never synchronises when recording ------------------------------------------------
  // Records a timing point behind the work queued so far. The default (CPU, where ops run
  // immediately) is a host steady-clock reading; CUDA records an event on the compute stream.
  virtual std::shared_ptr<TimingEvent> record_timing_event();
  // Whether the stream has passed `e` (never blocks). Host readings are always complete.
  virtual bool timing_event_done(const TimingEvent& e);
  // Milliseconds from `a` to `b` (both from this backend). Waits for `b` if it is not yet complete,
  // so callers that must not stall check timing_event_done() first or read after a synchronisation.
  virtual double elapsed_ms(const TimingEvent& a, const TimingEvent& b);

  // ---- capture: record `work` (which queues backend ops) once and return it for replays ----------
  // Nothing of `work` runs during the capture. Its ops must not allocate buffers that outlive it or
  // read anything back to the host; run it once uncaptured first, so every algorithm search,
  // workspace and cached buffer is in place. Backends that cannot capture return false here and
  // throw from capture().
  virtual bool can_capture() const { return false; }
  virtual std::unique_ptr<CapturedWork> capture(const std::function<void()>& work, const CaptureOptions& options = {});
  // Inside capture()'s work: a timing point at this place of the compute stream (a replay records
  // it); returns its index among the capture's points. record_timing_event() is for uncaptured work.
  virtual size_t capture_timing_point();

  // The kernel-level view (backend/kernel_trace.hpp). Where it cannot be had (no GPU, a build
  // without CUPTI, counters the driver does not permit) these throw ConfigError with the reason, so
  // that a command refuses before its work starts. One tracer or profiler per process at a time.
  virtual std::unique_ptr<KernelTracer> trace_kernels();
  virtual std::unique_ptr<KernelMetricProfiler> kernel_metric_profiler();

  // ---- BLAS-like ----------------------------------------------------------------------------
  // Row-major C (m, n) = alpha * op(A) * op(B) + beta * C; op(A) is (m, k), op(B) is (k, n).
  virtual void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    const float* b, float beta, float* c) = 0;
  // gemm on tensors of one dtype (f32, or on CUDA bf16/f16 with fp32 accumulation): a (m x k or k x m
  // with trans_a), b likewise, c (m, n). The default runs f32 through gemm() and refuses the rest.
  virtual void matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const Tensor& a,
                      const Tensor& b, float beta, const Tensor& c);
  virtual void axpby(float alpha, const Tensor& x, float beta, const Tensor& y) = 0;  // y = a x + b y
  // axpby on f32 scalars x, y (1) unless skip (i32 (1), or undefined: never) is non-zero: fp16 runs
  // leave the steps their loss scale skipped out of the running loss sums and the last step's loss.
  // The default reads skip back.
  virtual void axpby_unless(float alpha, const Tensor& x, float beta, const Tensor& y, const Tensor& skip);
  // y[n, c, ...] += bias[c] for y of shape (N, C) or (N, C, H, W).
  virtual void bias_add(const Tensor& bias, const Tensor& y) = 0;
  // dbias[c] = sum over n (and h, w) of dy[n, c, ...].
  virtual void bias_backward(const Tensor& dy, const Tensor& dbias) = 0;
  // A fully connected layer: y (N, K) = x (N, D) w^T + bias, then max(0, y) with `relu`; w (K, D);
  // `bias` undefined: none. CUDA runs it as one cuBLASLt matmul with the bias and ReLU in its
  // epilogue (tensor-core precisions); here, matmul, bias_add and relu_forward in turn.
  virtual void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu, const Tensor& y);
  // Its parameter gradients: dw (K, D) = dy^T x and, when defined, dbias (K) = the column sums of dy.
  // CUDA forms dbias in the epilogue of the dw matmul where cuBLASLt offers it; here, two ops.
  virtual void linear_backward_params(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& dbias);

  // ---- convolution: x (N, C, H, W), w (K, C / groups, R, S), y (N, K, P, Q) -------------------
  virtual void conv_forward(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& y) = 0;
  virtual void conv_backward_data(const ConvParams& p, const Tensor& w, const Tensor& dy, const Tensor& dx) = 0;
  // dx += the data gradient: a blob's later consumers in backward add to what its first one wrote
  // (Layer::set_bottom_diff_adds), instead of each writing a buffer of its own that a separate pass
  // then sums. `scratch` (dx's shape, dtype and layout) is where a backend that cannot add in place
  // forms the gradient before adding it, as this default does.
  virtual void conv_backward_data_add(const ConvParams& p, const Tensor& w, const Tensor& dy, const Tensor& dx,
                                      const Tensor& scratch);
  // Whether conv_backward_data_add never needs its scratch (then the net passes none; otherwise
  // check_add_scratch says what it must be).
  virtual bool adds_gradients_in_place() const { return false; }
  // x as the last forward of this convolution on x's buffer saw it, where one ran (backprop's order):
  // a backend may reuse what that forward derived from x (CUDA's lowered and width-lowered inputs).
  virtual void conv_backward_filter(const ConvParams& p, const Tensor& x, const Tensor& dy, const Tensor& dw) = 0;
  // y = max(0, conv(x, w) + bias): a convolution with its bias and ReLU as one op where the backend
  // has one (CUDA: a cuDNN graph-API plan fusing the three, where it measures faster than them
  // apart); here, the three ops in turn.
  virtual void conv_forward_bias_relu(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                                      const Tensor& y) {
    conv_forward(p, x, w, y);
    bias_add(bias, y);
    relu_forward(y, y);
  }
  // y = conv(x, w) + bias: a convolution with a bias and no ReLU (a residual block's projection
  // shortcut once its batch norm is folded) as one op where the backend has one (CUDA: a cuDNN
  // graph-API plan where it measures faster); here, the two ops in turn.
  virtual void conv_forward_bias(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                                 const Tensor& y) {
    conv_forward(p, x, w, y);
    bias_add(bias, y);
  }
  // y = max(0, conv(x, w) + bias + addend), `addend` of y's shape, dtype and memory order: a residual
  // block's last convolution with its (folded) batch norm, shortcut sum and ReLU, as an inference
  // network runs it (CUDA: one cuDNN graph-API plan where it measures faster than the ops apart);
  // here, the four ops in turn.
  virtual void conv_forward_residual(const ConvParams& p, const Tensor& x, const Tensor& w, const Tensor& bias,
                                     const Tensor& addend, const Tensor& y) {
    conv_forward(p, x, w, y);
    bias_add(bias, y);
    axpby(1.0f, addend, 1.0f, y);
    relu_forward(y, y);
  }
  // ---- int8 inference --------------------------------------------------------------------------
  // q = round(x / scale), ties to even, clamped to [-127, 127], NaN to 0 (core/int8.hpp): x f32 (or
  // on a GPU bf16/f16), q i8 of x's shape and memory order, except that q may have more channels
  // (channels-last, or rows of an (N, C) tensor), which are written 0: cuDNN's int8 convolutions
  // want channel counts that are multiples of 4 or 16. The default refuses (no int8 kernels).
  virtual void quantize_int8(const Tensor& x, float scale, const Tensor& q);
  // An int8 convolution summing in int32: acc[n, k, .] = sum over c, r, s of xq * wq, exactly;
  // then in fp32 v = acc * scale[k] + bias[k] (+ addend * addend_scale[k], the scale 1 where it is
  // undefined, which only a floating-point addend may leave it) (then max(0, v) with `relu`), stored
  // to y rounded once: y f32 (or on a GPU bf16/f16),
  // or y i8 holding round(v) to nearest (ties to even on the CPU), at most 127 -- an int8 activation
  // for the next int8 convolution, whose scale the caller has folded into scale, bias and
  // addend_scale; y i8 needs `relu` (int8 activations are ReLU outputs, in [0, 127]). xq (N, C, H,
  // W) and wq (K, C / groups, R, S) i8, channels-last on a GPU; scale, bias and addend_scale f32
  // (K), scale[k] the input's scale times filter k's; addend of y's shape and order, of y's dtype
  // or i8, or undefined. The default refuses.
  virtual void conv_forward_int8(const ConvParams& p, const Tensor& xq, const Tensor& wq, const Tensor& scale,
                                 const Tensor& bias, const Tensor& addend, const Tensor& addend_scale, bool relu,
                                 const Tensor& y);
  // An int8 fully connected layer: acc[n, k] = sum over c of xq[n, c] * wq[k, c] in int32, exactly;
  // then v = acc * scale[k] + bias[k] (then max(0, v) with `relu`) in fp32, stored to y (N, K) (f32,
  // or on a GPU bf16/f16). xq (N, C) i8; wq (K', C) i8 with K' >= K rows, the rows past K ignored
  // (cuBLASLt's int8 matmuls want dimensions that are multiples of 4; callers pad C and K to 16).
  // scale and bias f32 (K). The default refuses.
  virtual void linear_forward_int8(const Tensor& xq, const Tensor& wq, const Tensor& scale, const Tensor& bias,
                                   bool relu, const Tensor& y);

  // How this backend ran the convolution of `call` in each direction it ran (`cnnscale time`
  // shows it beside the layer's time): the form and the algorithm, one "; "-separated part per
  // direction; empty where it ran none.
  virtual std::string conv_implementation(const ConvSignature& call) const = 0;

  // ---- pooling --------------------------------------------------------------------------------
  // `saved`: where a training forward may leave what its backward would otherwise recompute from x
  // (each max window's argmax); pool_saved_bytes says how many bytes it takes for x of `shape`,
  // `dtype` and `layout` (0: nothing to save, and `saved` may be left undefined). A layer passes the
  // same tensor to a training forward and to the backward that follows it; an inference forward,
  // and a backward whose forward was given none, pass an undefined tensor. The backend decides from
  // x, y and `saved` alone whether to use it, the same way in both calls: not where it is smaller
  // than x needs (a batch larger than it was sized for), and the backward then finds the argmax again.
  virtual int64_t pool_saved_bytes(const PoolParams& /*p*/, const Shape& /*shape*/, DType /*dtype*/,
                                   Layout /*layout*/) const {
    return 0;
  }
  virtual void pool_forward(const PoolParams& p, const Tensor& x, const Tensor& y, const Tensor& saved = Tensor()) = 0;
  virtual void pool_backward(const PoolParams& p, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                             const Tensor& saved = Tensor()) = 0;

  // ---- activation -----------------------------------------------------------------------------
  virtual void relu_forward(const Tensor& x, const Tensor& y) = 0;
  virtual void relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) = 0;

  // ---- dropout: element i is kept when counter_uniform(seed, stream, i) >= ratio; kept elements
  // are scaled by 1 / (1 - ratio). The mask is recomputed in backward, never stored.
  virtual void dropout_forward(float ratio, uint64_t seed, uint64_t stream, const Tensor& x, const Tensor& y) = 0;
  virtual void dropout_backward(float ratio, uint64_t seed, uint64_t stream, const Tensor& dy, const Tensor& dx) = 0;
  // The same masks with stream = dropout_stream(iteration[0], layer) (core/rng.hpp), the iteration
  // read from device memory (i32 (1)) so a captured step draws each replay's own masks. The
  // default reads the iteration back and calls the ops above.
  virtual void dropout_forward_at(float ratio, uint64_t seed, const Tensor& iteration, uint64_t layer, const Tensor& x,
                                  const Tensor& y);
  virtual void dropout_backward_at(float ratio, uint64_t seed, const Tensor& iteration, uint64_t layer,
                                   const Tensor& dy, const Tensor& dx);

  // ---- local response normalisation across channels --------------------------------------------
  virtual void lrn_forward(const LrnParams& p, const Tensor& x, const Tensor& y) = 0;
  virtual void lrn_backward(const LrnParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                            const Tensor& dx) = 0;

  // ---- batch norm: scale, shift, running_*, save_* are (C); save_inv_std = 1 / sqrt(var + eps) ----
  // With p.relu or fused.z, the fused epilogue (BatchNormParams); backward then gates dy by the
  // ReLU, writes that gated gradient to fused.dz if given, and back-propagates it through bn.
  virtual void batchnorm_forward_train(const BatchNormParams& p, const Tensor& x, const Tensor& scale,
                                       const Tensor& shift, const Tensor& running_mean, const Tensor& running_var,
                                       const Tensor& y, const Tensor& save_mean, const Tensor& save_inv_std,
                                       const BatchNormFused& fused = {}) = 0;
  virtual void batchnorm_forward_inference(const BatchNormParams& p, const Tensor& x, const Tensor& scale,
                                           const Tensor& shift, const Tensor& running_mean, const Tensor& running_var,
                                           const Tensor& y, const BatchNormFused& fused = {}) = 0;
  virtual void batchnorm_backward(const BatchNormParams& p, const Tensor& x, const Tensor& dy, const Tensor& scale,
                                  const Tensor& save_mean, const Tensor& save_inv_std, const Tensor& dx,
                                  const Tensor& dscale, const Tensor& dshift, const BatchNormFused& fused = {}) = 0;

  // ---- softmax and loss: scores/prob (N, C), labels (N) i32 ----------------------------------
  virtual void softmax_forward(const Tensor& x, const Tensor& prob) = 0;
  // loss (1) = -1/N * sum_n log(max(prob[n, label[n]], FLT_MIN)).
  virtual void cross_entropy_loss(const Tensor& prob, const Tensor& labels, const Tensor& loss) = 0;
  // dx = scale * (prob - onehot(labels)).
  virtual void softmax_cross_entropy_backward(const Tensor& prob, const Tensor& labels, float scale,
                                              const Tensor& dx) = 0;
  // out[j] = fraction of samples whose label scores among the top ks[j] (ties count against).
  // scores may be 16-bit on CUDA (the loss layer's input in mixed precision); out is f32.
  virtual void accuracy_topk(const Tensor& scores, const Tensor& labels, const std::vector<int>& ks,
                             const Tensor& out) = 0;

  // ---- input: a batch of byte samples (u8, N, C, H, W as stored) to the network's f32 NCHW input
  // of the same shape: out = byte_to_input(byte, affine[c], affine[C + c]) (core/byte_input.hpp),
  // each sample moved and mirrored by its draw when `draws` (i32, N x kDrawInts) is defined, 0 where
  // the draw reads outside the image. What Dataset::fill and augment_sample give on the host.
  // `affine` may hold a third block of C values (ByteAffine::mirror_negates, an optical-flow
  // volume's): in a mirrored sample a channel whose value is non-zero reads negated_flow_byte(byte),
  // as the host's flow augmentation does (drawn_input, one rule for all three).
  virtual void decode_bytes(const Tensor& bytes, const Tensor& draws, const Tensor& affine, const Tensor& out) = 0;

  // ---- concat support: copy `channels` channels of src (N, Cs, H, W) from src_c into dst
  // (N, Cd, H, W) at dst_c. Used in both directions by Concat.
  virtual void copy_channels(const Tensor& src, int64_t src_c, const Tensor& dst, int64_t dst_c, int64_t channels) = 0;

  // ---- solver: Caffe's SGD: history = momentum * history + lr * (dw + weight_decay * w); w -= history.
  virtual void sgd_update(const Tensor& w, const Tensor& dw, const Tensor& history, float lr, float momentum,
                          float weight_decay) = 0;
  // The same rule for many parameters in one call: w, dw and history are flat (P) f32 buffers with
  // the same offsets; segment k covers elements [ranges[2k], ranges[2k+1]) with learning rate
  // lr * mults[2k] and weight decay weight_decay * mults[2k+1]. Elements outside every segment
  // (alignment gaps, frozen parameters) are left alone. ranges (2S) i32 ascending and disjoint,
  // mults (2S) f32. The default reads the table back and calls sgd_update per segment.
  // `mirrors`, where defined, also receives each updated segment's compute copy (SgdMirrors), so
  // the next forward need not convert the masters again: one pass over w instead of two.
  virtual void sgd_update_segments(const Tensor& w, const Tensor& dw, const Tensor& history, const Tensor& ranges,
                                   const Tensor& mults, float lr, float momentum, float weight_decay,
                                   const SgdMirrors& mirrors = SgdMirrors());
  // The same with the learning rate read from device memory (f32 (1)), for a captured step whose
  // schedule moves between replays; `skip` (i32 (1), or undefined: never) non-zero leaves w and
  // history untouched (a step skipped by fp16 loss scaling). The default reads both back and calls
  // the op above.
  // `check`, where defined (never with `skip`), flags non-finite gradients read by the update; the
  // default runs flag_nonfinite_at over dw before the update.
  virtual void sgd_update_segments_at(const Tensor& w, const Tensor& dw, const Tensor& history, const Tensor& ranges,
                                      const Tensor& mults, const Tensor& lr, float momentum, float weight_decay,
                                      const Tensor& skip = Tensor(), const SgdMirrors& mirrors = SgdMirrors(),
                                      const GradCheck& check = GradCheck());
  // Whether the segmented updates read SgdMirrors::grads (the default ones do not).
  virtual bool sgd_reads_mirror_grads() const { return false; }

  // ---- fp16 dynamic loss scaling, PyTorch GradScaler's rule, on device values only (capturable).
  // scale (f32 (2)): the loss scale and its inverse; state (i32 (3)): clean steps in a row, skipped
  // steps so far, and whether this step is skipped. found_inf (i32 (1)) non-zero: this step's
  // gradients overflowed. Then the scale halves and the step is skipped, unless the scale is below
  // 2: then nothing is left to halve, the step is not skipped and `nonfinite` (i32 (1)) takes `tag`
  // (i32 (1)) if it is 0, as the divergence check would. Otherwise `growth_interval` clean steps in
  // a row double the scale, up to max_scale. The default runs the rule on values read back.
  virtual void update_loss_scale(const Tensor& found_inf, const Tensor& scale, const Tensor& state, const Tensor& tag,
                                 const Tensor& nonfinite, int64_t growth_interval, float max_scale);

  // ---- divergence check: when flag (1, i32) is 0 and any element of x (f32) is NaN or +-inf,
  // flag[0] = tag (> 0). Accumulates across calls: the first tag set stays. No host sync; the host
  // reads the flag when it reads anything anyway.
  virtual void flag_nonfinite(const Tensor& x, int32_t tag, const Tensor& flag) = 0;
  // The same with the tag read from device memory (i32 (1), > 0). The default reads it back.
  virtual void flag_nonfinite_at(const Tensor& x, const Tensor& tag, const Tensor& flag);
};

// "cpu", "gpu", "gpu:N" (also "cuda:N"). Throws ConfigError for unknown specs and RuntimeError
// when a GPU is asked for but this build has no CUDA backend or the device is missing.
// sm_count > 0 confines a GPU backend to a partition of at least that many of its SMs (see
// granted_sms()); ConfigError on the CPU, or for a count the GPU cannot partition to.
// `precision` sets what fp32 math may do (tf32: TF32 tensor cores); every precision but fp32 is
// a ConfigError on the CPU, which stays the fp32 reference the GPU precisions are tested against.
// Which convolution implementations a GPU backend's per-shape search may choose from (the CPU has
// one): All, cuDNN's legacy algorithms, its graph-API engines, the lowered (im2col + GEMM) form and,
// for a first convolution, the width-lowered form (an (R x 1) convolution over S*C channels,
// backend/width_lowering.hpp), the fastest measured; Legacy, the legacy algorithms only
// (--conv-search legacy: what everything else gains, measured); NoWidth, All but the width-lowered
// form (--conv-search no-width: what that form gains, measured).
enum class ConvSearch { All, Legacy, NoWidth };
// From --conv-search's value, which the command line has checked to be "all", "legacy" or
// "no-width".
inline ConvSearch conv_search_from_name(const std::string& s) {
  return s == "legacy" ? ConvSearch::Legacy : s == "no-width" ? ConvSearch::NoWidth : ConvSearch::All;
}
// The memory order of a net's 4-d activations (--layout): Auto, the backend's choice for the
// precision (Backend::activation_layout_for: channels-last on a GPU in 16 bits and TF32); NCHW or
// NHWC forced on a GPU, to measure what the order costs. The CPU computes in NCHW only.
enum class LayoutChoice { Auto, NCHW, NHWC };
// From --layout's value, which the command line has checked to be "auto", "nchw" or "nhwc".
inline LayoutChoice layout_choice_from_name(const std::string& s) {
  return s == "nchw" ? LayoutChoice::NCHW : s == "nhwc" ? LayoutChoice::NHWC : LayoutChoice::Auto;
}
// Which kernels run a GPU's channels-last training batch norm (--batchnorm): Auto, cuDNN's
// persistent kernels on a whole GPU and cnnscale's own on an SM partition, where cuDNN's persistent
// kernels fail and its other channels-last ones are some 20x slower
// (docs/measurements/2026-11-25-cuda-kernel-choices.md); Cudnn, cuDNN's on a partition too (to
// measure that); Cnnscale, cnnscale's own everywhere (to compare them on a whole GPU).
// Channels-first batch norm is cuDNN's whatever this says; the CPU has one implementation.
enum class BatchNormKernels { Auto, Cudnn, Cnnscale };
// From --batchnorm's value, which the command line has checked to be "auto", "cudnn" or "cnnscale".
inline BatchNormKernels batchnorm_kernels_from_name(const std::string& s) {
  return s == "cudnn" ? BatchNormKernels::Cudnn : s == "cnnscale" ? BatchNormKernels::Cnnscale : BatchNormKernels::Auto;
}
// A fully connected layer's forward at batch 1 on a GPU (--fc-gemv): Auto, cuBLAS's matrix-vector
// product (GEMV) or the cuBLASLt matmul of every other batch size (its bias and ReLU in the
// epilogue), whichever measures faster at its first call for the shape; On, GEMV always; Off, the
// matmul always (On against Off measures what GEMV gains). The CPU has one path.
enum class FcGemv { Auto, On, Off };
// From --fc-gemv's value, which the command line has checked to be "auto", "on" or "off".
inline FcGemv fc_gemv_from_name(const std::string& s) {
  return s == "on" ? FcGemv::On : s == "off" ? FcGemv::Off : FcGemv::Auto;
}
// How a GPU backend chooses its algorithms and memory order.
struct AlgorithmChoice {
  ConvSearch conv_search = ConvSearch::All;
  // Deterministic algorithms only, and chosen by cuDNN's heuristics instead of by timing them, so
  // that every process makes the same choice and a resumed run continues bit for bit
  // (--deterministic; convolutions then choose among the legacy algorithms, whatever conv_search).
  bool deterministic = false;
  LayoutChoice layout = LayoutChoice::Auto;
  BatchNormKernels batchnorm = BatchNormKernels::Auto;
  FcGemv fc_gemv = FcGemv::Auto;
};
std::unique_ptr<Backend> make_backend(const std::string& spec, int sm_count = 0, Precision precision = Precision::FP32,
                                      AlgorithmChoice algorithms = {});
// make_backend's precision rule alone, for callers that check their flags before loading anything.
void check_backend_precision(const std::string& spec, Precision precision);
// Number of usable GPUs; 0 when the build has no CUDA backend or the driver reports any error.
int cuda_device_count();
// Threads of the CPU backend's BLAS (OpenBLAS) pool in this process.
int cpu_blas_threads();

}  // namespace cnnscale
