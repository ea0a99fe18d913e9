// The int8 form of a layer's weights, as calibration's table has them (core/int8.hpp): each output
// row (a convolution's filter, a fully connected layer's row) quantised with its own scale, the
// largest |w| of the row / 127. Shared by the int8 convolution and fully connected layers, which
// differ only in where each quantised weight goes (channels-last, padded rows or columns).
#pragma once
#include <cstdint>
#include <vector>

#include "core/int8.hpp"

namespace cnnscale {

// `w`: `rows` rows of `row_len` weights, row-major. Element j of row r is stored at out[at(r, j)];
// `out` keeps whatever it holds elsewhere (zeros for padding). Returns each row's scale.
template <typename At>
std::vector<float> quantize_weight_rows(const std::vector<float>& w, int64_t rows, int64_t row_len,
                                        std::vector<int8_t>& out, At at) {
  std::vector<float> scales(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w.data() + r * row_len;
    const float s = int8_weight_scale(row, row_len);
    scales[static_cast<size_t>(r)] = s;
    for (int64_t j = 0; j < row_len; ++j) out[static_cast<size_t>(at(r, j))] = quantize_int8_value(row[j], s);
  }
  return scales;
}

}  // namespace cnnscale
