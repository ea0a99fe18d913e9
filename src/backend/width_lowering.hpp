// Width lowering of a convolution: its kernel's S columns moved into the channels, so that an
// (R x S) convolution over C channels becomes an (R x 1) convolution over S*C channels. The geometry
// here is shared by the CUDA backend (which runs the form) and the tests that check it on the CPU.
#pragma once
#include <cstdint>
#include <optional>

#include "backend/backend.hpp"

namespace cnnscale {

// An (R x S) convolution, stride (sh, sw), padding (ph, pw), dilation (dh, dw), of x (N, C, H, W)
// with w (K, C, R, S) equals the (R x 1) convolution, stride (sh, 1), padding (ph, 0), dilation
// (dh, 1), of the lowered input xl (N, Cl, H, Q) with the lowered filter wl (K, Cl, R, 1), where Q is
// the output width and
//   xl[n, s*C + c, h, q] = x[n, c, h, q*sw + s*dw - pw]   (zero where that column is padding),
//   wl[k, s*C + c, r, 0] = w[k, c, r, s],
// and channels from S*C up to Cl are zero in both (Cl: S*C rounded up to `channel_quantum`, so that
// channels-last pixels fill whole 16-byte vectors). The sums are the convolution's own products,
// with zeros added. Channels-last, xl's rows are contiguous runs of x's row (dw = 1), and wl's KRSC
// bytes are w's KRSC bytes with each (k, r) row padded from S*C to Cl.
//
// Why: cuDNN's tensor-core kernels serve a first convolution badly (few channels, not whole 16-byte
// pixels: the gait nets' 50 flow channels under a 7x7 kernel). Lowered by width, the same
// convolution has hundreds of aligned channels, where those kernels are at home, at the price of an
// input S/sw times larger (7 times there), where the full im2col's is R*S/(sh*sw) times (49).
struct WidthLowering {
  ConvParams params;  // the (R x 1) convolution's
  Shape x;            // (N, Cl, H, Q)
  Shape w;            // (K, Cl, R, 1)
  int64_t field = 0;  // S * C: the lowered channels before the zero padding
};

// The width lowering of p over x (N, C, H, W) and w (K, C, R, S), or nullopt where it does not
// apply: grouped convolutions (the channels of one group would interleave with another's), a kernel
// one column wide (nothing to lower), or an input with no output column.
inline std::optional<WidthLowering> width_lowering(const ConvParams& p, const Shape& x, const Shape& w,
                                                   int64_t channel_quantum) {
  if (p.groups != 1 || p.kernel_w <= 1 || x.rank() != 4 || w.rank() != 4 || channel_quantum < 1) return std::nullopt;
  const int64_t q = conv_output_dim(x.w(), p.kernel_w, p.stride_w, p.pad_w, p.dilation_w);
  if (q < 1) return std::nullopt;
  WidthLowering l;
  l.field = x.c() * p.kernel_w;
  const int64_t channels = (l.field + channel_quantum - 1) / channel_quantum * channel_quantum;
  l.params = p;
  l.params.kernel_w = 1;
  l.params.stride_w = 1;
  l.params.pad_w = 0;
  l.params.dilation_w = 1;
  l.x = Shape{x.n(), channels, x.h(), q};
  l.w = Shape{w.n(), channels, p.kernel_h, 1};
  return l;
}

}  // namespace cnnscale
