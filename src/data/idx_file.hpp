// Reader for the IDX format of MNIST and Fashion-MNIST (big-endian header: magic 0x0000TTRR with
// type TT = 0x08 for unsigned bytes and RR dimensions, then RR big-endian int32 extents, then the
// data), gzip-compressed or plain (zlib reads both). Every defect is a ConfigError naming the file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace cnnscale {

struct IdxArray {
  std::vector<int64_t> dims;  // e.g. (60000, 28, 28) for images, (60000) for labels
  std::vector<uint8_t> data;  // dims' product bytes
};

// Reads an unsigned-byte IDX file with `expected_rank` dimensions. `what` names the payload in
// messages ("image", "label"): "<file>: truncated: expected 47040000 image bytes, got 1000".
IdxArray read_idx_ubyte(const std::string& file, int expected_rank, const std::string& what);

}  // namespace cnnscale
