// HDF5 shards: a dataset converted once (cnnscale data ...) and read by any number of runs.
//
// A shard folder holds manifest.json and, per split ("train", "test"), files <split>-00000.h5, ...
// Each shard file has
//   images       uint8 (count, C, H, W), chunked by `chunk_samples` samples, uncompressed, so a
//                chunk is one contiguous read and its bytes are what the checksum covers;
//   labels       int32 (count);
//   chunk_crc32  uint32 (chunks): zlib's CRC-32 of each chunk's image bytes followed by its labels
//                as little-endian int32, so a damaged chunk is named, not just the file.
// The manifest gives the sample shape, the classes, the per-channel mean and standard deviation
// (of x / 255) the reader normalises with, and each shard's file name, sample count, byte size and
// CRC-32 of its chunk checksums; a truncated or swapped shard fails at open, a damaged chunk when
// it is read (or by `cnnscale data verify`), each naming the file and the chunk.
#pragma once
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace cnnscale {

inline constexpr const char* kShardFormat = "cnnscale-shards";
inline constexpr int kShardFormatVersion = 1;

struct ShardInfo {
  std::string file;  // relative to the folder
  int64_t samples = 0;
  int64_t bytes = 0;   // file size
  uint32_t crc32 = 0;  // CRC-32 of the shard's chunk_crc32 array (little-endian)
};

struct ShardSplit {
  int64_t samples = 0;
  std::vector<ShardInfo> shards;
};

struct ShardManifest {
  std::string name;                   // "fashion-mnist", the list file's stem, ...
  std::vector<int64_t> sample_shape;  // (C, H, W)
  int64_t classes = 0;
  std::vector<float> mean, stddev;  // per channel, of x / 255
  int64_t chunk_samples = 0;
  std::map<std::string, ShardSplit> splits;
  nlohmann::json source;  // what was converted and how (parameters recorded for the reader)
};

// The manifest of a shard folder; ConfigError naming manifest.json and the key path.
ShardManifest read_shard_manifest(const std::string& dir);

// How `cnnscale data flow` marks its volumes in the manifest's `source` (every version wrote these
// keys): the converter, the channel layout (x-flow in the even channels) and the quantisation,
// whose zero point is byte 128 (core/byte_input.hpp, negated_flow_byte).
inline constexpr const char* kFlowConverter = "cnnscale data flow";
inline constexpr const char* kFlowChannels = "dx, dy of flow 0, dx, dy of flow 1, ...";
inline constexpr const char* kFlowQuantisationStart = "byte = round(128 + v * 127.5 / ";
// Per channel, whether a horizontal mirror negates it: the x-flow channels of a folder the flow
// converter made, nothing (empty) for any other. A folder that names that converter but another
// channel layout or quantisation is refused (ConfigError naming `file` and the key): a mirror could
// not tell its x-flow channels.
std::vector<bool> mirror_negated_channels(const ShardManifest& m, const std::string& file);
// Writes <dir>/manifest.json.
void write_shard_manifest(const std::string& dir, const ShardManifest& m);

// Samples per chunk for a sample of `sample_bytes`: about 1 MiB a chunk, at least one sample.
int64_t default_chunk_samples(int64_t sample_bytes);

// Writes one split's shards into `dir` (an existing folder): samples in order, a new file every
// `shard_samples`. finish() closes the last one and returns what the manifest records.
class ShardWriter {
 public:
  ShardWriter(std::string dir, std::string split, std::vector<int64_t> sample_shape, int64_t shard_samples,
              int64_t chunk_samples);
  void add(const uint8_t* image, int32_t label);
  ShardSplit finish();

 private:
  void flush();
  std::string dir_, split_;
  std::vector<int64_t> shape_;
  int64_t sample_bytes_, shard_samples_, chunk_samples_;
  std::vector<uint8_t> images_;
  std::vector<int32_t> labels_;
  ShardSplit done_;
};

// One split of a shard folder as a Dataset. Chunks are read whole, checked against their CRC-32
// the first time, and kept in a cache of at most `cache_bytes` (least recently used out): with the
// split smaller than the cache every chunk is read and checked once. fill() is thread-safe.
class ShardDataset : public Dataset {
 public:
  static constexpr int64_t kDefaultCacheBytes = int64_t{2} << 30;
  ShardDataset(const std::string& dir, const std::string& split, int64_t cache_bytes = kDefaultCacheBytes);
  ~ShardDataset() override;

  std::string name() const override { return name_; }
  int64_t size() const override { return split_.samples; }
  Shape sample_shape() const override { return Shape(manifest_.sample_shape); }
  int64_t classes() const override { return manifest_.classes; }
  void fill(std::span<const int64_t> indices, float* data, int32_t* labels) const override;
  std::optional<ByteAffine> byte_affine() const override { return affine_; }
  void fill_bytes(std::span<const int64_t> indices, uint8_t* data, int32_t* labels) const override;
  // The raw bytes and label of one sample (tests).
  void read_raw(int64_t index, uint8_t* image, int32_t* label) const;
  const ShardManifest& manifest() const { return manifest_; }

  // Reads every chunk of every shard of the split and checks its CRC-32 (cnnscale data verify);
  // returns the chunks checked. ConfigError naming the file and chunk at the first bad one.
  int64_t verify_all() const;

 private:
  struct Chunk;
  struct Shard;
  std::shared_ptr<const Chunk> chunk(size_t shard, int64_t c) const;
  std::shared_ptr<const Chunk> load_chunk(size_t shard, int64_t c) const;
  // The chunk holding sample `index` of the split, and the sample's place in it.
  std::pair<std::shared_ptr<const Chunk>, int64_t> locate(int64_t index) const;

  std::string dir_, split_name_, name_;
  ShardManifest manifest_;
  ShardSplit split_;
  std::vector<int64_t> first_sample_;  // per shard
  int64_t sample_bytes_ = 0, cache_bytes_ = 0;
  std::vector<std::unique_ptr<Shard>> shards_;
  ByteAffine affine_;  // per channel: x * scale + offset = (x / 255 - mean) / std

  mutable std::mutex mutex_;
  using Key = std::pair<size_t, int64_t>;  // shard, chunk
  mutable std::list<Key> lru_;             // most recently used first
  mutable std::map<Key, std::pair<std::shared_ptr<const Chunk>, std::list<Key>::iterator>> cache_;
  mutable int64_t cached_bytes_ = 0;
};

}  // namespace cnnscale
