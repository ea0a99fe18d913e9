// Mirroring optical-flow volumes: a horizontal flip reverses horizontal motion, so the x-flow
// channels of a mirrored volume change sign (core/byte_input.hpp, negated_flow_byte) while its
// y-flow channels and every channel of an ordinary image only move. The host's float batches, the
// byte batches the backend decodes, and ordinary data's batches exactly as before the change.
#include <gtest/gtest.h>
#include <zlib.h>

#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "common/temp_dir.hpp"
#include "core/byte_input.hpp"
#include "data/fashion_mnist.hpp"
#include "data/loader.hpp"
#include "data/shard_convert.hpp"
#include "data/shards.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

// A flow set of 2 flows (4 channels: dx, dy, dx, dy) of 3 x 5 pixels, bound 20 px a frame: a
// step of 20 / 127.5 = 0.157 px. Sample i moves right or left by a few steps, varying across the
// row so that a flip shows, and up by (i mod 5) steps; sample 0's first x-flow row holds the ends
// of the byte range and the zero point (0, 1, 128, 254, 255).
constexpr int64_t kFlowC = 4, kFlowH = 3, kFlowW = 5, kFlowSamples = 12;
constexpr double kFlowBound = 20;

uint8_t flow_byte(int64_t i, int64_t c, int64_t y, int64_t x) {
  if (i == 0 && c == 0 && y == 0) return std::array<uint8_t, 5>{0, 1, 128, 254, 255}[static_cast<size_t>(x)];
  if (c % 2 == 0) return static_cast<uint8_t>(128 + ((i + y + 3 * x + c) % 9 - 4) * 7);
  return static_cast<uint8_t>(128 - (i % 5) * 10 + x);
}

// The set as `cnnscale data flow` marks its folders (the `source` keys every version wrote), or
// with `source` replaced: nothing (an ordinary image set) or a changed key.
std::string write_flow_set(const std::string& root, const std::string& name, const nlohmann::json& source) {
  const std::string out = (fs::path(root) / name).string();
  publish_shard_folder(out, [&](const std::string& tmp) {
    ShardManifest m;
    m.name = name;
    m.sample_shape = {kFlowC, kFlowH, kFlowW};
    m.classes = 3;
    m.mean = {0.5f, 0.45f, 0.52f, 0.4f};
    m.stddev = {0.1f, 0.2f, 0.15f, 0.05f};
    m.chunk_samples = 4;
    m.source = source;
    ShardWriter w(tmp, "train", m.sample_shape, 5, 4);
    std::vector<uint8_t> s(static_cast<size_t>(kFlowC * kFlowH * kFlowW));
    for (int64_t i = 0; i < kFlowSamples; ++i) {
      for (int64_t c = 0; c < kFlowC; ++c)
        for (int64_t y = 0; y < kFlowH; ++y)
          for (int64_t x = 0; x < kFlowW; ++x)
            s[static_cast<size_t>((c * kFlowH + y) * kFlowW + x)] = flow_byte(i, c, y, x);
      w.add(s.data(), static_cast<int32_t>(i % 3));
    }
    m.splits["train"] = w.finish();
    write_shard_manifest(tmp, m);
  });
  return out;
}

nlohmann::json flow_source() {
  return {{"converter", "cnnscale data flow"},
          {"channels", "dx, dy of flow 0, dx, dy of flow 1, ..."},
          {"quantisation", "byte = round(128 + v * 127.5 / 20), clamped to 0..255; v in pixels per frame"},
          {"bound", kFlowBound}};
}

// Flow v in pixels per frame of a stored byte (the converter's quantisation).
double flow_of_byte(double b) {
  return (b - 128.0) * kFlowBound / 127.5;
}

// The negation in bytes: the zero point stays, every byte but 0 stands for exactly minus its flow,
// 0 (below -bound) saturates at 255, and it undoes itself wherever a negation exists.
TEST(FlowMirror, ByteNegationIsExactAboutTheZeroPoint) {
  EXPECT_EQ(negated_flow_byte(128), 128);
  EXPECT_EQ(negated_flow_byte(0), 255);
  EXPECT_EQ(negated_flow_byte(1), 255);
  EXPECT_EQ(negated_flow_byte(255), 1);
  for (int b = 1; b < 256; ++b) {
    const uint8_t n = negated_flow_byte(static_cast<uint8_t>(b));
    EXPECT_EQ(flow_of_byte(n), -flow_of_byte(b)) << b;  // (b - 128) * 20 / 127.5: exact in double
    EXPECT_EQ(negated_flow_byte(n), b);
  }
}

// Mirrored flow volumes through the loader's float batches (the host path), read back as flow: a
// mirrored sample's x-flow is minus the stored flow of the mirrored pixel, its y-flow that flow
// itself; an unmirrored sample is the stored flow. Each float is also exactly the channel's map of
// the (negated) byte, and the byte batches the CPU backend decodes (as a GPU run does, with the
// draws) equal the float batches bit for bit. The same bytes without the flow marker are an
// ordinary image: mirrored, never negated. A folder naming the flow converter with another channel
// layout is refused at open.
TEST(FlowMirror, NegatesTheXFlowAndKeepsTheYFlow) {
  testing::TempDir t;
  auto flow = std::make_shared<ShardDataset>(write_flow_set(t.str(), "flow", flow_source()), "train");
  auto image = std::make_shared<ShardDataset>(write_flow_set(t.str(), "image", nlohmann::json::object()), "train");
  ASSERT_EQ(flow->byte_affine()->packed().size(), 3u * kFlowC);   // scales, offsets, negations
  ASSERT_EQ(image->byte_affine()->packed().size(), 2u * kFlowC);  // as before: no third block
  std::unique_ptr<Backend> cpu = make_backend("cpu");
  const int64_t numel = kFlowC * kFlowH * kFlowW, plane = kFlowH * kFlowW;

  auto check = [&](const std::shared_ptr<ShardDataset>& ds, bool is_flow, const AugmentOptions& augment) {
    const ByteAffine map = *ds->byte_affine();
    LoaderOptions o;
    o.batch = 4;
    o.seed = 2;
    o.shuffle = false;  // sample b * 4 + s of each epoch at place s of batch b
    o.threads = 2;
    o.augment = augment;
    Loader floats(ds, o);
    o.bytes = true;
    Loader bytes(ds, o);
    const std::vector<float> packed = map.packed();
    Tensor x = cpu->alloc(Shape{o.batch, kFlowC, kFlowH, kFlowW}, DType::U8), y = cpu->alloc(x.shape());
    Tensor a = cpu->alloc(Shape{static_cast<int64_t>(packed.size())});
    Tensor d = cpu->alloc(Shape{o.batch * kDrawInts}, DType::I32);
    cpu->upload(packed.data(), a);
    int mirrored = 0, kept = 0;
    for (int64_t b = 0; b < 2 * floats.batches_per_epoch(); ++b) {
      const HostBatch& f = floats.next();
      for (int64_t s = 0; s < f.count; ++s) {
        const int64_t index = (b % floats.batches_per_epoch()) * o.batch + s;
        const AugmentDraw draw = augment_draw(o.seed, f.epoch, index, augment.crop_pad, augment.mirror);
        ++(draw.mirror ? mirrored : kept);
        for (int64_t c = 0; c < kFlowC; ++c)
          for (int64_t py = 0; py < kFlowH; ++py)
            for (int64_t px = 0; px < kFlowW; ++px) {
              const float got = f.data[s * numel + c * plane + py * kFlowW + px];
              const std::string where =
                  fmt::format("{} sample {} epoch {} channel {} ({}, {})", ds->name(), index, f.epoch, c, py, px);
              int64_t sy = 0, sx = 0;
              if (!drawn_source(py, px, kFlowH, kFlowW, draw.dy, draw.dx, draw.mirror, sy, sx)) {
                EXPECT_EQ(got, 0.0f) << where;
                continue;
              }
              const uint8_t stored = flow_byte(index, c, sy, sx);
              const bool negated = is_flow && draw.mirror && c % 2 == 0;
              const auto k = static_cast<size_t>(c);
              EXPECT_EQ(got, byte_to_input(negated ? negated_flow_byte(stored) : stored, map.scale[k], map.offset[k]))
                  << where;
              if (!is_flow || (negated && stored == 0)) continue;  // 0 saturates (above)
              // Back to flow: byte = (x std + mean) 255. The floats are a few roundings of values
              // below 2^9 in magnitude, a few 1e-5 of a byte off; 1e-3 of a byte (2e-4 px) holds that, and
              // a wrong sign is at least one step (0.157 px) off.
              const double byte = (static_cast<double>(got) * ds->manifest().stddev[k] + ds->manifest().mean[k]) * 255;
              const double want = negated ? -flow_of_byte(stored) : flow_of_byte(stored);
              EXPECT_NEAR(flow_of_byte(byte), want, 2e-4) << where;
            }
      }
      const HostBatch& u = bytes.next();
      cpu->upload(u.bytes, x);
      cpu->upload(u.draws, d);
      const Tensor xs = x.slice_batch(0, u.count), ys = y.slice_batch(0, u.count);
      cpu->decode_bytes(xs, d.view(0, Shape{u.count * kDrawInts}), a, ys);
      EXPECT_EQ(std::memcmp(ys.f32(), f.data, static_cast<size_t>(f.count * numel) * sizeof(float)), 0)
          << ds->name() << ", batch " << b;
      floats.release(f.slot);
      bytes.release(u.slot);
    }
    EXPECT_GT(mirrored, 0);
    EXPECT_GT(kept, 0);
  };
  check(flow, true, AugmentOptions{0, true});
  check(flow, true, AugmentOptions{1, true});  // with shifts: the border stays 0, negated or not
  check(image, false, AugmentOptions{0, true});

  nlohmann::json swapped = flow_source();
  swapped["channels"] = "dy, dx of flow 0, ...";
  const std::string dir = write_flow_set(t.str(), "swapped", swapped);
  try {
    ShardDataset bad(dir, "train");
    ADD_FAILURE() << "a flow folder of another channel layout was opened";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("manifest.json: key 'source.channels'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("x-flow"), std::string::npos) << msg;
  }
}

// Ordinary data's augmented batches are those of before flow volumes were mirrored correctly: the
// CRC-32 of three epochs of float batches (and labels), computed with the loader as it was.
TEST(FlowMirror, OrdinaryBatchesAreUnchanged) {
  testing::TempDir t;
  auto crc_of_batches = [](std::shared_ptr<const Dataset> ds, const AugmentOptions& a) {
    LoaderOptions o;
    o.batch = 5;
    o.seed = 9;
    o.threads = 2;
    o.augment = a;
    Loader l(ds, o);
    const int64_t numel = ds->sample_shape().numel();
    uLong crc = crc32(0L, Z_NULL, 0);
    for (int64_t b = 0; b < 3 * l.batches_per_epoch(); ++b) {
      const HostBatch& h = l.next();
      crc = crc32(crc, reinterpret_cast<const Bytef*>(h.data), static_cast<uInt>(h.count * numel * sizeof(float)));
      crc = crc32(crc, reinterpret_cast<const Bytef*>(h.labels), static_cast<uInt>(h.count * sizeof(int32_t)));
      l.release(h.slot);
    }
    return static_cast<uint32_t>(crc);
  };
  const std::string out = t.file("set");
  publish_shard_folder(out, [&](const std::string& tmp) {
    ShardManifest m;
    m.name = "pattern";
    m.sample_shape = {4, 3, 5};
    m.classes = 3;
    m.mean = {0.25f, 0.5f, 0.75f, 0.4f};
    m.stddev = {0.5f, 0.25f, 0.125f, 0.3f};
    m.chunk_samples = 4;
    ShardWriter w(tmp, "train", m.sample_shape, 10, 4);
    std::vector<uint8_t> s(60);
    for (int64_t i = 0; i < 17; ++i) {
      for (size_t j = 0; j < s.size(); ++j) s[j] = static_cast<uint8_t>((37 * i + 11 * static_cast<int64_t>(j)) % 256);
      w.add(s.data(), static_cast<int32_t>(i % 3));
    }
    m.splits["train"] = w.finish();
    write_shard_manifest(tmp, m);
  });
  auto shards = std::make_shared<ShardDataset>(out, "train");
  EXPECT_EQ(crc_of_batches(shards, AugmentOptions{0, true}), 0xa02dc793u);
  EXPECT_EQ(crc_of_batches(shards, AugmentOptions{2, true}), 0x718ea244u);
  auto fm = std::make_shared<SubsetDataset>(
      std::make_shared<FashionMnistDataset>(FashionMnistDataset::kDefaultDir, FashionMnistDataset::Split::Train), 40);
  EXPECT_EQ(crc_of_batches(fm, AugmentOptions{3, true}), 0x6c6fd606u);
}

}  // namespace
}  // namespace cnnscale
