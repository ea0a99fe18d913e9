// Data: the IDX reader on small generated gzip fixtures (values, and every defect reported as a
// ConfigError naming the file), synthetic data determinism, and the loader's order and resumable
// state depending only on the seed.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "common/temp_dir.hpp"
#include "data/fashion_mnist.hpp"
#include "data/loader.hpp"
#include "data/synthetic_dataset.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

std::vector<uint8_t> be32(uint32_t v) {
  return {static_cast<uint8_t>(v >> 24), static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 8),
          static_cast<uint8_t>(v)};
}

// IDX bytes: magic, dims, then `payload` (which may disagree with dims, to make defects).
std::vector<uint8_t> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out = be32(magic);
  for (uint32_t d : dims) {
    auto b = be32(d);
    out.insert(out.end(), b.begin(), b.end());
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}

void write_plain(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::vector<uint8_t> image_payload(int n) {
  std::vector<uint8_t> p(static_cast<size_t>(n) * 784);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>((i * 7 + 3) % 256);
  return p;
}

// A complete, valid Fashion-MNIST training split of n samples in dir.
void write_train_split(const TempDir& dir, int n) {
  write_gz(dir.file("train-images-idx3-ubyte.gz"), idx_bytes(0x803, {uint32_t(n), 28, 28}, image_payload(n)));
  std::vector<uint8_t> labels(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 3) % 10);
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes(0x801, {uint32_t(n)}, labels));
}

// Runs f, expecting a ConfigError whose message contains every one of `parts`.
template <typename F>
void expect_config_error(F f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no ConfigError thrown";
  } catch (const ConfigError& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << "\nlacks: " << p;
  }
}

TEST(FashionMnist, ReadsValuesAndNormalises) {
  TempDir dir;
  write_train_split(dir, 5);
  FashionMnistDataset ds(dir.str(), FashionMnistDataset::Split::Train);
  EXPECT_EQ(ds.size(), 5);
  EXPECT_EQ(ds.sample_shape(), Shape({1, 28, 28}));
  EXPECT_EQ(ds.classes(), 10);
  std::vector<int64_t> idx = {3, 0};
  std::vector<float> data(2 * 784);
  std::vector<int32_t> labels(2);
  ds.fill(idx, data.data(), labels.data());
  EXPECT_EQ(labels[0], 9);
  EXPECT_EQ(labels[1], 0);
  auto pixels = image_payload(5);
  for (int i : {0, 1, 100, 783}) {
    float want3 = (pixels[3 * 784 + i] / 255.0f - 0.2860f) / 0.3530f;
    float want0 = (pixels[i] / 255.0f - 0.2860f) / 0.3530f;
    EXPECT_NEAR(data[i], want3, 1e-5f);
    EXPECT_NEAR(data[784 + i], want0, 1e-5f);
  }
}

TEST(FashionMnist, ReadsUncompressedFiles) {
  TempDir dir;
  write_plain(dir.file("train-images-idx3-ubyte"), idx_bytes(0x803, {2, 28, 28}, image_payload(2)));
  write_plain(dir.file("train-labels-idx1-ubyte"), idx_bytes(0x801, {2}, {4, 5}));
  FashionMnistDataset ds(dir.str(), FashionMnistDataset::Split::Train);
  EXPECT_EQ(ds.size(), 2);
}

TEST(FashionMnist, TruncatedImagesNameTheFile) {
  TempDir dir;
  write_train_split(dir, 5);
  // The header announces 5 images, the file holds 3.
  write_gz(dir.file("train-images-idx3-ubyte.gz"), idx_bytes(0x803, {5, 28, 28}, image_payload(3)));
  expect_config_error([&] { FashionMnistDataset(dir.str(), FashionMnistDataset::Split::Train); },
                      {dir.file("train-images-idx3-ubyte.gz"), "truncated: expected 3920 image bytes, got 2352"});
}

TEST(FashionMnist, TruncatedGzipStreamNamesTheFile) {
  TempDir dir;
  write_train_split(dir, 50);
  const std::string path = dir.file("train-images-idx3-ubyte.gz");
  fs::resize_file(path, fs::file_size(path) / 2);
  expect_config_error([&] { FashionMnistDataset(dir.str(), FashionMnistDataset::Split::Train); }, {path});
}

TEST(FashionMnist, BadMagicNamesTheFile) {
  TempDir dir;
  write_train_split(dir, 2);
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes(0x803, {2}, {1, 2}));
  expect_config_error([&] { FashionMnistDataset(dir.str(), FashionMnistDataset::Split::Train); },
                      {dir.file("train-labels-idx1-ubyte.gz"), "bad magic number 0x00000803", "0x00000801"});
}

TEST(FashionMnist, WrongDimensionsAndCounts) {
  TempDir dir;
  write_train_split(dir, 2);
  write_gz(dir.file("train-images-idx3-ubyte.gz"), idx_bytes(0x803, {2, 28, 27}, std::vector<uint8_t>(2 * 28 * 27)));
  expect_config_error([&] { FashionMnistDataset(dir.str(), FashionMnistDataset::Split::Train); },
                      {dir.file("train-images-idx3-ubyte.gz"), "28x27"});
  write_train_split(dir, 2);
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes(0x801, {3}, {1, 2, 3}));
  expect_config_error([&] { FashionMnistDataset(dir.str(), FashionMnistDataset::Split::Train); },
                      {dir.file("train-labels-idx1-ubyte.gz"), "3 labels", "2 images"});
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes(0x801, {2}, {1, 2, 3}));
  expect_config_error([&] { FashionMnistDataset(dir.str(), FashionMnistDataset::Split::Train); },
                      {dir.file("train-labels-idx1-ubyte.gz"), "unexpected data"});
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes(0x801, {2}, {1, 12}));
  expect_config_error([&] { FashionMnistDataset(dir.str(), FashionMnistDataset::Split::Train); },
                      {dir.file("train-labels-idx1-ubyte.gz"), "label 12"});
}

TEST(FashionMnist, MissingFileOrDirectory) {
  TempDir dir;
  write_train_split(dir, 2);
  fs::remove(dir.file("train-labels-idx1-ubyte.gz"));
  expect_config_error([&] { FashionMnistDataset(dir.str(), FashionMnistDataset::Split::Train); },
                      {dir.file("train-labels-idx1-ubyte.gz"), "cannot open"});
  expect_config_error([&] { FashionMnistDataset(dir.file("nonexistent"), FashionMnistDataset::Split::Train); },
                      {dir.file("nonexistent"), "does not exist"});
}

// The header's extents are checked against what the file can hold before the payload is allocated:
// one claimed 65536 x 65536 image was a 4 GiB allocation (zeroed) before "truncated".
TEST(FashionMnist, HeaderLargerThanTheFileIsRefusedBeforeAllocating) {
  TempDir dir;
  const std::string images = dir.file("train-images-idx3-ubyte");
  write_plain(images, idx_bytes(0x803, {1, 65536, 65536}, image_payload(1)));
  write_plain(dir.file("train-labels-idx1-ubyte"), idx_bytes(0x801, {1}, {4}));
  expect_config_error([&] { FashionMnistDataset(dir.str(), FashionMnistDataset::Split::Train); },
                      {images, "announces 1 x 65536 x 65536 = 4294967296 image bytes", "the file holds 784"});
  // A gzip file holds at most 1032 bytes per compressed byte (deflate's largest ratio).
  fs::remove(images);
  const std::string gz = dir.file("train-images-idx3-ubyte.gz");
  write_gz(gz, idx_bytes(0x803, {1, 65536, 65536}, image_payload(1)));
  expect_config_error([&] { FashionMnistDataset(dir.str(), FashionMnistDataset::Split::Train); },
                      {gz, "announces 1 x 65536 x 65536 = 4294967296 image bytes", "gzip file can hold"});
  // 60000 of them: 2^48 bytes, past the bound of one array whatever the file.
  write_gz(gz, idx_bytes(0x803, {60000, 65536, 65536}, {}));
  expect_config_error([&] { FashionMnistDataset(dir.str(), FashionMnistDataset::Split::Train); },
                      {gz, "60000 x 65536 x 65536 image bytes are more than 2^40"});
  // Not a regular file: a FIFO would block the open.
  fs::remove(gz);
  ASSERT_EQ(::mkfifo(gz.c_str(), 0600), 0);
  expect_config_error([&] { FashionMnistDataset(dir.str(), FashionMnistDataset::Split::Train); },
                      {gz, "not a regular file"});
}

TEST(Synthetic, DeterministicPerSampleIndex) {
  SyntheticDataset a(Shape{3, 8, 8}, 7, 100, SyntheticFill::Gaussian, 42);
  SyntheticDataset b(Shape{3, 8, 8}, 7, 100, SyntheticFill::Gaussian, 42);
  SyntheticDataset c(Shape{3, 8, 8}, 7, 100, SyntheticFill::Gaussian, 43);
  const int64_t n = 192;
  std::vector<float> x1(4 * n), x2(n), x3(n);
  std::vector<int32_t> l1(4), l2(1), l3(1);
  std::vector<int64_t> batch = {5, 17, 99, 0}, one = {99};
  a.fill(batch, x1.data(), l1.data());
  b.fill(one, x2.data(), l2.data());
  c.fill(one, x3.data(), l3.data());
  // Sample 99 is the same alone or inside a batch, in another instance with the same seed.
  EXPECT_TRUE(std::equal(x2.begin(), x2.end(), x1.begin() + 2 * n));
  EXPECT_EQ(l2[0], l1[2]);
  EXPECT_FALSE(std::equal(x2.begin(), x2.end(), x3.begin()));
  for (int32_t l : l1) EXPECT_TRUE(l >= 0 && l < 7);
}

TEST(Synthetic, GaussianMomentsAndConstantFill) {
  SyntheticDataset g(Shape{1, 100, 100}, 10, 4, SyntheticFill::Gaussian, 1);
  std::vector<float> x(10000);
  std::vector<int32_t> l(1);
  std::vector<int64_t> idx = {2};
  g.fill(idx, x.data(), l.data());
  double mean = std::accumulate(x.begin(), x.end(), 0.0) / x.size(), var = 0;
  for (float v : x) var += (v - mean) * (v - mean);
  var /= x.size();
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(std::sqrt(var), 1.0, 0.05);

  SyntheticDataset k(Shape{2, 3, 3}, 10, 4, SyntheticFill::Constant, 1);
  std::vector<float> y(18, -1.0f);
  k.fill(idx, y.data(), l.data());
  for (float v : y) EXPECT_EQ(v, SyntheticDataset::kDefaultConstant);
  EXPECT_NE(SyntheticDataset::kDefaultConstant, 0.0f);
  EXPECT_THROW(parse_synthetic_fill("zeros"), ConfigError);
}

// Sample i has label i (mod 2^31), so batches reveal the order.
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(int64_t n) : n_(n) {}
  std::string name() const override { return "index"; }
  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return Shape{1, 1, 2}; }
  int64_t classes() const override { return n_; }
  void fill(std::span<const int64_t> idx, float* data, int32_t* labels) const override {
    for (size_t i = 0; i < idx.size(); ++i) {
      labels[i] = static_cast<int32_t>(idx[i]);
      data[2 * i] = data[2 * i + 1] = static_cast<float>(idx[i]);
    }
  }

 private:
  int64_t n_;
};

// The sample order of `batches` batches, releasing each.
std::vector<int64_t> drain(Loader& loader, int64_t batches) {
  std::vector<int64_t> order;
  for (int64_t b = 0; b < batches; ++b) {
    const HostBatch& hb = loader.next();
    for (int64_t i = 0; i < hb.count; ++i) {
      EXPECT_EQ(hb.data[2 * i], static_cast<float>(hb.labels[i]));
      order.push_back(hb.labels[i]);
    }
    loader.release(hb.slot);
  }
  return order;
}

TEST(Loader, OrderDependsOnlyOnSeed) {
  auto ds = std::make_shared<IndexDataset>(48);
  LoaderOptions o8;
  o8.batch = 8;
  o8.seed = 7;
  LoaderOptions o4 = o8;
  o4.batch = 4;
  o4.prefetch = false;
  o4.slots = 2;
  Loader a(ds, o8), b(ds, o4);
  auto first = drain(a, 6 * 3);  // three epochs
  auto second = drain(b, 12 * 3);
  EXPECT_EQ(first, second);
  // Each epoch is a permutation, and epochs differ.
  for (int e = 0; e < 3; ++e) {
    std::set<int64_t> seen(first.begin() + 48 * e, first.begin() + 48 * (e + 1));
    EXPECT_EQ(seen.size(), 48u);
  }
  EXPECT_FALSE(std::equal(first.begin(), first.begin() + 48, first.begin() + 48));
  LoaderOptions other = o8;
  other.seed = 8;
  Loader c(ds, other);
  EXPECT_NE(drain(c, 6), std::vector<int64_t>(first.begin(), first.begin() + 48));
}

TEST(Loader, StateRestoresTheSameContinuation) {
  auto ds = std::make_shared<IndexDataset>(30);
  LoaderOptions o;
  o.batch = 7;  // 4 batches per epoch, 2 samples dropped
  o.seed = 3;
  for (int64_t k : {0, 1, 3, 4, 9}) {
    SCOPED_TRACE(k);
    Loader full(ds, o);
    auto reference = drain(full, 12);
    Loader first(ds, o);
    drain(first, k);
    LoaderState s = first.state();
    EXPECT_EQ(s.epoch, k / 4);
    EXPECT_EQ(s.position, k % 4);
    Loader resumed(ds, o);
    resumed.restore(s);
    auto rest = drain(resumed, 12 - k);
    EXPECT_EQ(rest, std::vector<int64_t>(reference.begin() + 7 * k, reference.end()));
  }
}

TEST(Loader, SequentialWithPartialLastBatch) {
  auto ds = std::make_shared<IndexDataset>(10);
  LoaderOptions o;
  o.batch = 4;
  o.shuffle = false;
  o.drop_last = false;
  Loader l(ds, o);
  EXPECT_EQ(l.batches_per_epoch(), 3);
  std::vector<int64_t> want(10);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(drain(l, 3), want);
}

TEST(Loader, HoldingEveryBufferIsAnErrorNotAHang) {
  auto ds = std::make_shared<IndexDataset>(40);
  LoaderOptions o;
  o.batch = 4;
  o.slots = 2;
  Loader l(ds, o);
  l.next();
  l.next();
  EXPECT_THROW(l.next(), RuntimeError);
  EXPECT_THROW(Loader(ds, LoaderOptions{.batch = 41}), ConfigError);
}

}  // namespace
}  // namespace cnnscale
