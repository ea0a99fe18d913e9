// HDF5 shards: manifest, writer and reader (see shards.hpp).
#include "data/shards.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/byte_input.hpp"
#include "core/hdf5_file.hpp"

namespace cnnscale {

namespace fs = std::filesystem;

namespace {

static_assert(std::endian::native == std::endian::little, "shard checksums assume a little-endian host");

uint32_t crc_of(uint32_t crc, const void* p, size_t n) {
  const auto* b = static_cast<const Bytef*>(p);
  while (n > 0) {  // zlib takes uInt lengths
    const uInt step = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, b, step));
    b += step;
    n -= step;
  }
  return crc;
}

// CRC-32 of a chunk: its image bytes, then its labels as little-endian int32.
uint32_t chunk_crc(const uint8_t* images, size_t image_bytes, const int32_t* labels, size_t count) {
  uint32_t c = crc_of(static_cast<uint32_t>(::crc32(0, Z_NULL, 0)), images, image_bytes);
  return crc_of(c, labels, count * sizeof(int32_t));
}

uint32_t crc_of_crcs(const std::vector<uint32_t>& crcs) {
  return crc_of(static_cast<uint32_t>(::crc32(0, Z_NULL, 0)), crcs.data(), crcs.size() * sizeof(uint32_t));
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t d : v) n *= d;
  return n;
}

// HDF5 is entered by one thread at a time: a library built without thread safety must not be
// entered twice, and a thread-safe one serialises its calls anyway. Checksums and normalisation run
// outside it, in parallel.
std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

std::string shard_file_name(const std::string& split, size_t index) {
  return fmt::format("{}-{:05d}.h5", split, index);
}

}  // namespace

// ---- manifest ----

int64_t default_chunk_samples(int64_t sample_bytes) {
  return std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(1, sample_bytes));
}

void write_shard_manifest(const std::string& dir, const ShardManifest& m) {
  nlohmann::json j;
  j["format"] = kShardFormat;
  j["version"] = kShardFormatVersion;
  j["name"] = m.name;
  j["sample_shape"] = m.sample_shape;
  j["classes"] = m.classes;
  j["mean"] = m.mean;
  j["std"] = m.stddev;
  j["chunk_samples"] = m.chunk_samples;
  j["normalisation"] = "(x / 255 - mean[c]) / std[c] per channel c";
  for (const auto& [name, split] : m.splits) {
    nlohmann::json s;
    s["samples"] = split.samples;
    s["shards"] = nlohmann::json::array();
    for (const ShardInfo& sh : split.shards)
      s["shards"].push_back({{"file", sh.file}, {"samples", sh.samples}, {"bytes", sh.bytes}, {"crc32", sh.crc32}});
    j["splits"][name] = s;
  }
  j["source"] = m.source;
  const fs::path path = fs::path(dir) / "manifest.json";
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  out.close();
  if (!out) throw_runtime("{}: cannot write the shard manifest", path.string());
}

namespace {

// A manifest key, its path named in every error.
template <typename T>
T key(const nlohmann::json& j, const std::string& file, const std::string& path, const char* name) {
  const std::string where = path.empty() ? name : path + "." + name;
  if (!j.is_object() || !j.contains(name)) throw_config("{}: missing key '{}'", file, where);
  try {
    return j.at(name).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw_config("{}: key '{}' has the wrong type ({})", file, where, j.at(name).dump());
  }
}

}  // namespace

ShardManifest read_shard_manifest(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw_config("shard folder '{}' does not exist", dir);
  const std::string file = (fs::path(dir) / "manifest.json").string();
  std::ifstream in(file);
  if (!in) throw_config("{}: cannot read the shard manifest (not a folder made by cnnscale data?)", file);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw_config("{}: not JSON at byte {}", file, e.byte);
  }
  if (key<std::string>(j, file, "", "format") != kShardFormat)
    throw_config("{}: key 'format' is not '{}'", file, kShardFormat);
  const int version = key<int>(j, file, "", "version");
  if (version != kShardFormatVersion)
    throw_config("{}: format version {} (this cnnscale reads {})", file, version, kShardFormatVersion);
  ShardManifest m;
  m.name = key<std::string>(j, file, "", "name");
  m.sample_shape = key<std::vector<int64_t>>(j, file, "", "sample_shape");
  if (m.sample_shape.size() != 3 ||
      std::any_of(m.sample_shape.begin(), m.sample_shape.end(), [](int64_t d) { return d <= 0; }))
    throw_config("{}: key 'sample_shape' must be three positive sizes (C, H, W)", file);
  m.classes = key<int64_t>(j, file, "", "classes");
  if (m.classes < 1) throw_config("{}: key 'classes' must be at least 1", file);
  m.mean = key<std::vector<float>>(j, file, "", "mean");
  m.stddev = key<std::vector<float>>(j, file, "", "std");
  const size_t channels = static_cast<size_t>(m.sample_shape[0]);
  if (m.mean.size() != channels || m.stddev.size() != channels)
    throw_config("{}: keys 'mean' and 'std' need one value per channel ({})", file, channels);
  for (float s : m.stddev)
    if (!(s > 0)) throw_config("{}: key 'std' must be positive", file);
  m.chunk_samples = key<int64_t>(j, file, "", "chunk_samples");
  if (m.chunk_samples < 1) throw_config("{}: key 'chunk_samples' must be at least 1", file);
  const nlohmann::json splits = key<nlohmann::json>(j, file, "", "splits");
  if (!splits.is_object() || splits.empty()) throw_config("{}: key 'splits' must name at least one split", file);
  for (const auto& [name, s] : splits.items()) {
    const std::string path = "splits." + name;
    ShardSplit split;
    split.samples = key<int64_t>(s, file, path, "samples");
    const nlohmann::json shards = key<nlohmann::json>(s, file, path, "shards");
    if (!shards.is_array()) throw_config("{}: key '{}.shards' must be a list", file, path);
    int64_t total = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string sp = fmt::format("{}.shards[{}]", path, i);
      ShardInfo sh;
      sh.file = key<std::string>(shards[i], file, sp, "file");
      sh.samples = key<int64_t>(shards[i], file, sp, "samples");
      sh.bytes = key<int64_t>(shards[i], file, sp, "bytes");
      sh.crc32 = key<uint32_t>(shards[i], file, sp, "crc32");
      if (sh.samples < 1) throw_config("{}: key '{}.samples' must be at least 1", file, sp);
      if (sh.file.find('/') != std::string::npos)
        throw_config("{}: key '{}.file' must be a name in the folder", file, sp);
      total += sh.samples;
      split.shards.push_back(sh);
    }
    if (total != split.samples)
      throw_config("{}: key '{}.samples' is {}, but its shards hold {}", file, path, split.samples, total);
    m.splits[name] = split;
  }
  m.source = j.value("source", nlohmann::json::object());
  return m;
}

std::vector<bool> mirror_negated_channels(const ShardManifest& m, const std::string& file) {
  const nlohmann::json& src = m.source;
  if (!src.is_object() || src.value("converter", nlohmann::json()) != kFlowConverter) return {};
  const nlohmann::json channels = src.value("channels", nlohmann::json());
  if (channels != kFlowChannels || m.sample_shape[0] % 2 != 0)
    throw_config("{}: key 'source.channels' is {} for {} channels: {} writes '{}' in an even count, so a mirror "
                 "cannot tell the x-flow channels it must negate",
                 file, channels.dump(), m.sample_shape[0], kFlowConverter, kFlowChannels);
  const nlohmann::json q = src.value("quantisation", nlohmann::json());
  if (!q.is_string() || q.get<std::string>().rfind(kFlowQuantisationStart, 0) != 0)
    throw_config("{}: key 'source.quantisation' is {}: {} writes '{}...', whose zero point 128 a mirror's "
                 "negation keeps",
                 file, q.dump(), kFlowConverter, kFlowQuantisationStart);
  std::vector<bool> negates(static_cast<size_t>(m.sample_shape[0]));
  for (size_t c = 0; c < negates.size(); c += 2) negates[c] = true;
  return negates;
}

// ---- writer ----

ShardWriter::ShardWriter(std::string dir, std::string split, std::vector<int64_t> sample_shape, int64_t shard_samples,
                         int64_t chunk_samples)
    : dir_(std::move(dir)),
      split_(std::move(split)),
      shape_(std::move(sample_shape)),
      sample_bytes_(product(shape_)),
      shard_samples_(shard_samples),
      chunk_samples_(chunk_samples) {
  CNNSCALE_CHECK(shape_.size() == 3 && sample_bytes_ > 0, "shard writer: a sample is (C, H, W)");
  CNNSCALE_CHECK(shard_samples_ >= 1 && chunk_samples_ >= 1, "shard writer: sizes must be positive");
}

void ShardWriter::add(const uint8_t* image, int32_t label) {
  images_.insert(images_.end(), image, image + sample_bytes_);
  labels_.push_back(label);
  if (static_cast<int64_t>(labels_.size()) == shard_samples_) flush();
}

void ShardWriter::flush() {
  const int64_t n = static_cast<int64_t>(labels_.size());
  if (n == 0) return;
  const std::string name = shard_file_name(split_, done_.shards.size());
  const std::string path = (fs::path(dir_) / name).string();
  const int64_t chunk = std::min(chunk_samples_, n);
  std::vector<uint32_t> crcs;
  for (int64_t first = 0; first < n; first += chunk) {
    const int64_t count = std::min(chunk, n - first);
    crcs.push_back(chunk_crc(images_.data() + first * sample_bytes_, static_cast<size_t>(count * sample_bytes_),
                             labels_.data() + first, static_cast<size_t>(count)));
  }
  {
    h5::Writer w(path, "data shard");
    const std::vector<hsize_t> dims = {static_cast<hsize_t>(n), static_cast<hsize_t>(shape_[0]),
                                       static_cast<hsize_t>(shape_[1]), static_cast<hsize_t>(shape_[2])};
    const std::vector<hsize_t> chunk_dims = {static_cast<hsize_t>(chunk), dims[1], dims[2], dims[3]};
    h5::Handle space(H5Screate_simple(4, dims.data(), nullptr), H5Sclose);
    h5::Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    if (space.get() < 0 || dcpl.get() < 0 || H5Pset_chunk(dcpl.get(), 4, chunk_dims.data()) < 0)
      throw_runtime("{}: HDF5 failed to lay out the images", path);
    h5::Handle ds(H5Dcreate2(w.root(), "images", H5T_STD_U8LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                  H5Dclose);
    if (ds.get() < 0 || H5Dwrite(ds.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, images_.data()) < 0)
      throw_runtime("{}: HDF5 failed to write the images", path);
    w.dataset(w.root(), "labels", {static_cast<hsize_t>(n)}, H5T_STD_I32LE, H5T_NATIVE_INT32, labels_.data());
    w.dataset(w.root(), "chunk_crc32", {crcs.size()}, H5T_STD_U32LE, H5T_NATIVE_UINT32, crcs.data());
    w.attr_i64(w.root(), "chunk_samples", chunk);
    w.close();
  }
  ShardInfo info;
  info.file = name;
  info.samples = n;
  info.bytes = static_cast<int64_t>(fs::file_size(path));
  info.crc32 = crc_of_crcs(crcs);
  done_.shards.push_back(info);
  done_.samples += n;
  images_.clear();
  labels_.clear();
}

ShardSplit ShardWriter::finish() {
  flush();
  return done_;
}

// ---- reader ----

struct ShardDataset::Chunk {
  std::vector<uint8_t> images;
  std::vector<int32_t> labels;
};

struct ShardDataset::Shard {
  std::string path;
  int64_t samples = 0, chunk_samples = 0;
  std::vector<uint32_t> crcs;
  std::unique_ptr<h5::Reader> file;  // open for the dataset's life
  h5::Handle images{-1, H5Dclose}, labels{-1, H5Dclose};
};

ShardDataset::ShardDataset(const std::string& dir, const std::string& split, int64_t cache_bytes)
    : dir_(dir), split_name_(split), manifest_(read_shard_manifest(dir)), cache_bytes_(cache_bytes) {
  const std::string manifest_file = (fs::path(dir) / "manifest.json").string();
  auto it = manifest_.splits.find(split);
  if (it == manifest_.splits.end()) throw_config("{}: no split '{}' (key 'splits')", manifest_file, split);
  split_ = it->second;
  name_ = fmt::format("{}/{} (shards in {})", manifest_.name, split, dir);
  sample_bytes_ = product(manifest_.sample_shape);
  // The IDX reader's formula too, so Fashion-MNIST gives identical batches either way.
  affine_ = ByteAffine::from_stats(manifest_.mean, manifest_.stddev);
  affine_.mirror_negates = mirror_negated_channels(manifest_, manifest_file);
  h5::silence_errors();
  int64_t first = 0;
  for (const ShardInfo& info : split_.shards) {
    auto sh = std::make_unique<Shard>();
    sh->path = (fs::path(dir) / info.file).string();
    std::error_code ec;
    const auto bytes = fs::file_size(sh->path, ec);
    if (ec) throw_config("{}: missing (listed in {})", sh->path, manifest_file);
    if (static_cast<int64_t>(bytes) != info.bytes)
      throw_config("{}: {} bytes, the manifest says {}: truncated or replaced; convert it again", sh->path, bytes,
                   info.bytes);
    std::lock_guard<std::mutex> hdf5(hdf5_mutex());
    sh->file = std::make_unique<h5::Reader>(sh->path, "data shard");
    const h5::Reader& r = *sh->file;
    std::vector<hsize_t> dims;
    sh->images = r.dataset(r.root(), "images", dims);
    const std::vector<hsize_t> want = {
        static_cast<hsize_t>(info.samples), static_cast<hsize_t>(manifest_.sample_shape[0]),
        static_cast<hsize_t>(manifest_.sample_shape[1]), static_cast<hsize_t>(manifest_.sample_shape[2])};
    if (dims != want)
      throw_config("{}: images are not ({}, {}, {}, {}) as the manifest says", sh->path, want[0], want[1], want[2],
                   want[3]);
    sh->labels = r.dataset(r.root(), "labels", dims);
    if (dims != std::vector<hsize_t>{want[0]}) throw_config("{}: labels are not ({})", sh->path, want[0]);
    sh->chunk_samples = r.attr_i64(r.root(), "chunk_samples");
    if (sh->chunk_samples < 1) throw_config("{}: attribute chunk_samples must be at least 1", sh->path);
    const int64_t chunks = (info.samples + sh->chunk_samples - 1) / sh->chunk_samples;
    sh->crcs = r.read<uint32_t>(r.root(), "chunk_crc32", H5T_NATIVE_UINT32);
    if (static_cast<int64_t>(sh->crcs.size()) != chunks)
      throw_config("{}: {} chunk checksums for {} chunks", sh->path, sh->crcs.size(), chunks);
    if (crc_of_crcs(sh->crcs) != info.crc32)
      throw_config("{}: its chunk checksums do not match the manifest's: a shard of another conversion?", sh->path);
    sh->samples = info.samples;
    first_sample_.push_back(first);
    first += info.samples;
    shards_.push_back(std::move(sh));
  }
}

ShardDataset::~ShardDataset() = default;

std::shared_ptr<const ShardDataset::Chunk> ShardDataset::load_chunk(size_t shard, int64_t c) const {
  const Shard& sh = *shards_[shard];
  const int64_t first = c * sh.chunk_samples;
  const int64_t count = std::min(sh.chunk_samples, sh.samples - first);
  auto chunk = std::make_shared<Chunk>();
  chunk->images.resize(static_cast<size_t>(count * sample_bytes_));
  chunk->labels.resize(static_cast<size_t>(count));
  const std::string where = fmt::format("{}: chunk {} (samples {} to {})", sh.path, c, first, first + count - 1);
  auto read = [&](hid_t ds, int rank, hid_t type, void* out) {
    h5::Handle file_space(H5Dget_space(ds), H5Sclose);
    std::vector<hsize_t> start(static_cast<size_t>(rank), 0), size(static_cast<size_t>(rank));
    start[0] = static_cast<hsize_t>(first);
    size[0] = static_cast<hsize_t>(count);
    for (int d = 1; d < rank; ++d)
      size[static_cast<size_t>(d)] = static_cast<hsize_t>(manifest_.sample_shape[static_cast<size_t>(d - 1)]);
    h5::Handle mem_space(H5Screate_simple(rank, size.data(), nullptr), H5Sclose);
    if (file_space.get() < 0 || mem_space.get() < 0 ||
        H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, size.data(), nullptr) < 0 ||
        H5Dread(ds, type, mem_space.get(), file_space.get(), H5P_DEFAULT, out) < 0)
      throw_config("{}: unreadable (the file is damaged; convert it again)", where);
  };
  {
    std::lock_guard<std::mutex> hdf5(hdf5_mutex());
    read(sh.images.get(), 4, H5T_NATIVE_UINT8, chunk->images.data());
    read(sh.labels.get(), 1, H5T_NATIVE_INT32, chunk->labels.data());
  }
  const uint32_t got =
      chunk_crc(chunk->images.data(), chunk->images.size(), chunk->labels.data(), chunk->labels.size());
  if (got != sh.crcs[static_cast<size_t>(c)])
    throw_config("{}: CRC-32 {:08x}, stored {:08x}: the chunk is damaged; convert it again", where, got,
                 sh.crcs[static_cast<size_t>(c)]);
  for (size_t i = 0; i < chunk->labels.size(); ++i)
    if (chunk->labels[i] < 0 || chunk->labels[i] >= manifest_.classes)
      throw_config("{}: label {} of sample {} is not in 0..{}", where, chunk->labels[i],
                   first + static_cast<int64_t>(i), manifest_.classes - 1);
  return chunk;
}

std::shared_ptr<const ShardDataset::Chunk> ShardDataset::chunk(size_t shard, int64_t c) const {
  const Key k{shard, c};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(k);
    if (it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return it->second.first;
    }
  }
  // Read outside the lock: two threads may read the same chunk once each, never wrongly.
  std::shared_ptr<const Chunk> loaded = load_chunk(shard, c);
  const int64_t bytes = static_cast<int64_t>(loaded->images.size() + loaded->labels.size() * sizeof(int32_t));
  std::lock_guard<std::mutex> lock(mutex_);
  if (cache_.count(k)) return cache_[k].first;
  lru_.push_front(k);
  cache_[k] = {loaded, lru_.begin()};
  cached_bytes_ += bytes;
  while (cached_bytes_ > cache_bytes_ && lru_.size() > 1) {
    const Key old = lru_.back();
    const auto& e = cache_.at(old).first;
    cached_bytes_ -= static_cast<int64_t>(e->images.size() + e->labels.size() * sizeof(int32_t));
    cache_.erase(old);
    lru_.pop_back();
  }
  return loaded;
}

std::pair<std::shared_ptr<const ShardDataset::Chunk>, int64_t> ShardDataset::locate(int64_t index) const {
  CNNSCALE_CHECK(index >= 0 && index < split_.samples, "{}: sample index {} out of range [0, {})", name_, index,
                 split_.samples);
  const size_t shard =
      static_cast<size_t>(std::upper_bound(first_sample_.begin(), first_sample_.end(), index) - first_sample_.begin()) -
      1;
  const int64_t local = index - first_sample_[shard];
  const int64_t per = shards_[shard]->chunk_samples;
  return {chunk(shard, local / per), local % per};
}

void ShardDataset::read_raw(int64_t index, uint8_t* image, int32_t* label) const {
  const auto [ch, at] = locate(index);
  std::memcpy(image, ch->images.data() + at * sample_bytes_, static_cast<size_t>(sample_bytes_));
  *label = ch->labels[static_cast<size_t>(at)];
}

void ShardDataset::fill(std::span<const int64_t> indices, float* data, int32_t* labels) const {
  const int64_t plane = manifest_.sample_shape[1] * manifest_.sample_shape[2];
  for (size_t s = 0; s < indices.size(); ++s) {
    // Normalised straight from the cached chunk's bytes.
    const auto [ch, at] = locate(indices[s]);
    labels[s] = ch->labels[static_cast<size_t>(at)];
    const uint8_t* raw = ch->images.data() + at * sample_bytes_;
    float* dst = data + static_cast<int64_t>(s) * sample_bytes_;
    for (size_t c = 0; c < affine_.scale.size(); ++c) {
      const uint8_t* src = raw + static_cast<int64_t>(c) * plane;
      float* out = dst + static_cast<int64_t>(c) * plane;
      for (int64_t i = 0; i < plane; ++i) out[i] = byte_to_input(src[i], affine_.scale[c], affine_.offset[c]);
    }
  }
}

void ShardDataset::fill_bytes(std::span<const int64_t> indices, uint8_t* data, int32_t* labels) const {
  for (size_t s = 0; s < indices.size(); ++s) {
    const auto [ch, at] = locate(indices[s]);
    labels[s] = ch->labels[static_cast<size_t>(at)];
    std::memcpy(data + static_cast<int64_t>(s) * sample_bytes_, ch->images.data() + at * sample_bytes_,
                static_cast<size_t>(sample_bytes_));
  }
}

int64_t ShardDataset::verify_all() const {
  int64_t checked = 0;
  for (size_t s = 0; s < shards_.size(); ++s) {
    const int64_t chunks = static_cast<int64_t>(shards_[s]->crcs.size());
    for (int64_t c = 0; c < chunks; ++c, ++checked) load_chunk(s, c);
  }
  return checked;
}

}  // namespace cnnscale
