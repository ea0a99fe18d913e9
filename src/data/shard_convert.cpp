// Fashion-MNIST into shards, the shared publishing step and channel statistics (see shard_convert.hpp).
#include "data/shard_convert.hpp"

#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "data/fashion_mnist.hpp"

namespace cnnscale {

namespace fs = std::filesystem;

void publish_shard_folder(const std::string& out, const std::function<void(const std::string& tmp)>& write) {
  std::error_code ec;
  if (fs::exists(out, ec))
    throw_config("--out {}: exists already (cnnscale data never overwrites a shard folder)", out);
  const fs::path target = fs::absolute(out);
  if (!fs::is_directory(target.parent_path(), ec))
    throw_config("--out {}: its parent folder {} does not exist", out, target.parent_path().string());
  const fs::path tmp = target.parent_path() / fmt::format(".{}.partial-{}", target.filename().string(), ::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp);
  try {
    write(tmp.string());
    fs::rename(tmp, target);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

ShardManifest convert_fashion_mnist(const std::string& idx_dir, const std::string& out, const ShardConvertOptions& o) {
  using Split = FashionMnistDataset::Split;
  const FashionMnistDataset train(idx_dir, Split::Train), test(idx_dir, Split::Test);
  const std::vector<int64_t> shape = {1, FashionMnistDataset::kSide, FashionMnistDataset::kSide};
  ShardManifest m;
  m.name = "fashion-mnist";
  m.sample_shape = shape;
  m.classes = FashionMnistDataset::kClasses;
  m.mean = {FashionMnistDataset::kMean};
  m.stddev = {FashionMnistDataset::kStd};
  m.chunk_samples = o.chunk_samples > 0 ? o.chunk_samples : default_chunk_samples(shape[1] * shape[2]);
  m.source = {{"converter", "cnnscale data fashion-mnist"},
              {"from", fs::absolute(idx_dir).string()},
              {"files",
               {FashionMnistDataset::file_path(idx_dir, Split::Train, true),
                FashionMnistDataset::file_path(idx_dir, Split::Train, false),
                FashionMnistDataset::file_path(idx_dir, Split::Test, true),
                FashionMnistDataset::file_path(idx_dir, Split::Test, false)}},
              {"mean_std", "the IDX reader's constants (training images, x / 255)"}};
  publish_shard_folder(out, [&](const std::string& tmp) {
    for (const auto& [name, ds] :
         {std::pair<const char*, const FashionMnistDataset*>{"train", &train}, {"test", &test}}) {
      ShardWriter w(tmp, name, shape, o.shard_samples, m.chunk_samples);
      for (int64_t i = 0; i < ds->size(); ++i) w.add(ds->pixels(i), ds->label(i));
      m.splits[name] = w.finish();
    }
    write_shard_manifest(tmp, m);
  });
  return m;
}

ChannelStats::ChannelStats(std::vector<int64_t> sample_shape)
    : shape_(std::move(sample_shape)),
      sum_(static_cast<size_t>(shape_.at(0)), 0.0),
      sum_sq_(static_cast<size_t>(shape_.at(0)), 0.0) {}

void ChannelStats::add(const uint8_t* sample) {
  const int64_t plane = shape_[1] * shape_[2];
  for (size_t c = 0; c < sum_.size(); ++c) {
    // Integer sums per sample (exact), then one double addition each.
    uint64_t s = 0, q = 0;
    const uint8_t* p = sample + static_cast<int64_t>(c) * plane;
    for (int64_t i = 0; i < plane; ++i) {
      s += p[i];
      q += static_cast<uint64_t>(p[i]) * p[i];
    }
    sum_[c] += static_cast<double>(s) / 255.0;
    sum_sq_[c] += static_cast<double>(q) / (255.0 * 255.0);
  }
  ++count_;
}

std::vector<float> ChannelStats::mean() const {
  std::vector<float> m;
  const double n = static_cast<double>(count_) * static_cast<double>(shape_[1] * shape_[2]);
  for (double s : sum_) m.push_back(static_cast<float>(n > 0 ? s / n : 0.0));
  return m;
}

std::vector<float> ChannelStats::stddev() const {
  std::vector<float> out;
  const double n = static_cast<double>(count_) * static_cast<double>(shape_[1] * shape_[2]);
  for (size_t c = 0; c < sum_.size(); ++c) {
    const double mu = n > 0 ? sum_[c] / n : 0.0;
    const double var = n > 0 ? std::max(0.0, sum_sq_[c] / n - mu * mu) : 0.0;
    out.push_back(var > 0 ? static_cast<float>(std::sqrt(var)) : 1.0f);
  }
  return out;
}

}  // namespace cnnscale
