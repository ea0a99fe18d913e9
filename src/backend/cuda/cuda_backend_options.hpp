// How a CudaBackend is made (CudaBackendOptions): its precision and determinism rules, its
// workspace, and which convolution forms (lowered, channel-padded, channels-first, width-lowered)
// and kernels it may run.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/backend.hpp"

namespace cnnscale {

// Whether channels-last convolutions also run lowered (im2col, then a GEMM; CudaBackendOptions).
enum class ConvLowering {
  Measured,  // timed against cuDNN's choice at each shape's first call, per direction; the faster runs
  Always,    // wherever the lowered form applies (tests)
  Never,
};

// Whether a 16-bit channels-last convolution whose input channels are not a multiple of 8 runs on
// copies of x and w zero-padded to the next multiple of 8 (ConvPlan::padded).
enum class ConvChannelPadding {
  Measured,  // the algorithm search times both and keeps the faster, per direction
  Always,
  Never,
};

// Whether a channels-last convolution whose input channels do not fill 16-byte pixels (the padding
// rule's convolutions: a net's first) may run channels-first, on NCHW copies of its operands
// (ConvPlan::channels_first).
enum class ConvChannelsFirst {
  Measured,  // timed against the channels-last form, copies included, per direction; the faster runs
  Always,    // tests
  Never,
};

// Whether a channels-last convolution whose input channels do not fill 16-byte pixels may run
// lowered by width (backend/width_lowering.hpp: its kernel's columns moved into the channels, an
// (R x 1) convolution over S*C channels; ConvPlan::width_lowered).
enum class ConvWidthLowering {
  Measured,  // timed against the form that runs otherwise, copies included, per direction; the faster runs
  Always,    // tests
  Never,
};

struct CudaBackendOptions {
  // fp32 convolutions and GEMMs run without TF32 by default: the study compares fp32 against
  // PyTorch with allow_tf32 = False. true lets cuDNN/cuBLAS use TF32 tensor cores.
  bool allow_tf32 = false;
  // Only bitwise-reproducible cuDNN convolution algorithms and max pooling, and each convolution's
  // algorithm (and channel padding) chosen by cuDNN's heuristic ranking instead of by timing, so
  // that every process chooses alike: a run resumed in a new process continues bit for bit.
  bool deterministic = false;
  // Upper bound on the workspace a convolution algorithm may use (also capped at half the
  // device memory free when the shape is first seen). 1 GiB was too small: the gait 2D-CNN's
  // conv1 backward-filter FFT needs 1.45 GiB at batch 256 and is much faster than the
  // zero-workspace algorithms (docs/measurements/2026-11-25-convolution-choices.md);
  // PyTorch's benchmark mode likewise offers most free memory.
  size_t max_workspace_bytes = size_t{8} << 30;
  // SMs of a green-context partition the backend is confined to (rounded up by the driver; see
  // granted_sms()); 0, or the device's SM count, is the whole GPU.
  int sm_count = 0;
  // cuDNN's tensor-core kernels for channels-last 16-bit data need C % 8 == 0 (16-byte pixels);
  // other channel counts get slower kernels: the gait nets' 50 flow channels made conv1 two thirds
  // of the 2D-CNN's bf16 step (docs/measurements/2026-11-25-convolution-choices.md). Zero channels
  // change no sum, so padding x and w gives the same convolution; whether it pays (RGB's 3 channels
  // become 8) is measured.
  ConvChannelPadding channel_padding = ConvChannelPadding::Measured;
  // How many of cuDNN's graph-API engine configurations (cudnn_graph.hpp) each convolution
  // direction's search times beside the legacy algorithms, for 16-bit and TF32 convolutions; 0:
  // legacy algorithms only. Strict fp32 keeps the legacy FMA algorithms whatever this says.
  int conv_graph_plans = 8;
  // Also time each channels-last, ungrouped 16-bit or TF32 convolution's forward and filter gradient
  // lowered: im2col into a row per output pixel, then one GEMM (the forward a cuBLASLt matmul with
  // the bias and ReLU in its epilogue, the filter gradient a cuBLAS GEMM), and run whichever is
  // faster. It wins where cuDNN's implicit GEMM idles on few input channels with a large, strided
  // kernel (CaffeNet's conv1: RGB, 11x11, stride 4), whose lowered input is only a few times the
  // input. Never with --conv-search legacy; Measured needs timing, so deterministic runs never lower.
  ConvLowering conv_lowering = ConvLowering::Measured;
  // Also time such a first convolution channels-first, its reorders included (the channels-last
  // side's padding copies, made once before, are left out as the padding search leaves them out,
  // so a near tie goes to channels-last). cuDNN's NCHW kernels can beat its NHWC ones there even
  // with the reordering copies (the gait 2D-CNN's conv1, 50 flow channels, 7x7, in TF32:
  // docs/measurements/2026-11-25-convolution-choices.md). Measured needs timing, so deterministic
  // runs stay channels-last.
  ConvChannelsFirst channels_first = ConvChannelsFirst::Measured;
  // Also time such a first convolution's forward and filter gradient lowered by width: x copied so
  // that each output pixel's S kernel columns of C channels lie side by side (one im2col pass with
  // a kernel one row high, S/stride_w times the input), the filter's KRSC rows padded to match,
  // then cuDNN's (R x 1) convolution over the S*C channels, whose tensor-core kernels are at home
  // there (the gait nets' 7x7 conv1 over 50 flow channels becomes a 7x1 one over 352). Forward and
  // filter gradient only: a first convolution has no data gradient to compute. Strict fp32 stays
  // on cuDNN's own forms, as with lowering; Measured needs timing, so deterministic runs never
  // lower by width. It took the gait 2D-CNN's bf16 step at batch 256 from 5.31 to 4.42 ms
  // (docs/measurements/2026-11-25-convolution-choices.md); where it loses the trial keeps the other
  // form. --conv-search no-width and legacy set Never.
  ConvWidthLowering width_lowering = ConvWidthLowering::Measured;
  // Auto: activation_layout_for's rule; NCHW or NHWC: that order in every precision (--layout).
  LayoutChoice layout = LayoutChoice::Auto;
  // Whose kernels run channels-last training batch norm (--batchnorm; backend.hpp's BatchNormKernels,
  // own_batchnorm()).
  BatchNormKernels batchnorm = BatchNormKernels::Auto;
  // Batch-1 fully connected forwards as cuBLAS GEMV (the bias and ReLU after it) or as the matmul
  // (AlgorithmChoice::fc_gemv, backend.hpp's FcGemv).
  FcGemv fc_gemv = FcGemv::Auto;
};

}  // namespace cnnscale
