// Conversions into HDF5 shards (cnnscale data ...): Fashion-MNIST's IDX files here; image lists
// and optical-flow volumes in shard_convert_opencv.cpp when OpenCV is present at configure time.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "data/shards.hpp"

namespace cnnscale {

struct ShardConvertOptions {
  int64_t shard_samples = 10000;  // samples per shard file
  int64_t chunk_samples = 0;      // samples per HDF5 chunk; 0: about 1 MiB a chunk
};

// Writes a shard folder at `out` through `write(tmp)`, which fills the folder `tmp` (manifest
// included); `tmp` is renamed to `out` only when complete, so `out` is never half-written. `out`
// must not exist yet (ConfigError naming it); on failure `tmp` is removed.
void publish_shard_folder(const std::string& out, const std::function<void(const std::string& tmp)>& write);

// Fashion-MNIST's train and test splits from the IDX files in `idx_dir`, with the IDX reader's
// mean and standard deviation, so the shard path and the IDX path give identical batches.
ShardManifest convert_fashion_mnist(const std::string& idx_dir, const std::string& out, const ShardConvertOptions& o);

// Running per-channel mean and standard deviation of x / 255 over the bytes of (C, H, W) samples,
// in double: a conversion's normalisation.
class ChannelStats {
 public:
  explicit ChannelStats(std::vector<int64_t> sample_shape);
  void add(const uint8_t* sample);
  std::vector<float> mean() const;
  std::vector<float> stddev() const;  // population; 1 where a channel is constant

 private:
  std::vector<int64_t> shape_;
  std::vector<double> sum_, sum_sq_;
  int64_t count_ = 0;
};

}  // namespace cnnscale
