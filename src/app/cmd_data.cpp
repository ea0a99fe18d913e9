// cnnscale data: conversions into HDF5 shard folders (data/shards.hpp) and their check.
//   data fashion-mnist --out DIR       Fashion-MNIST's IDX files (no OpenCV needed)
//   data images --list FILE --out DIR  an image list or folder, decoded and fitted with OpenCV
//   data flow --list FILE --out DIR    gait sequences into optical-flow volumes (OpenCV)
//   data verify DIR                    every chunk of every shard against its checksum
#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <memory>

#include "app/commands.hpp"
#include "data/fashion_mnist.hpp"
#include "data/shard_convert.hpp"
#include "data/shards.hpp"

namespace cnnscale::app {

namespace {

struct DataArgs {
  std::string out, data_dir = FashionMnistDataset::kDefaultDir, verify_dir;
  ShardConvertOptions convert;
  ImageListOptions images;
  FlowOptions flow;
  std::string size;
};

void add_shard_options(CLI::App* cmd, DataArgs& a) {
  cmd->add_option("--out", a.out, "the shard folder to create (must not exist)")->required();
  cmd->add_option("--shard-samples", a.convert.shard_samples, "samples per shard file")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--chunk-samples", a.convert.chunk_samples,
                  "samples per HDF5 chunk, the unit read and checksummed (default: about 1 MiB a chunk)")
      ->check(CLI::PositiveNumber);
}

void print_manifest(const std::string& dir, const ShardManifest& m) {
  std::printf("%s: %s, samples %lldx%lldx%lld, %lld classes, %lld samples a chunk\n", dir.c_str(), m.name.c_str(),
              static_cast<long long>(m.sample_shape[0]), static_cast<long long>(m.sample_shape[1]),
              static_cast<long long>(m.sample_shape[2]), static_cast<long long>(m.classes),
              static_cast<long long>(m.chunk_samples));
  for (const auto& [name, split] : m.splits)
    std::printf("  %s: %lld samples in %zu shard(s)\n", name.c_str(), static_cast<long long>(split.samples),
                split.shards.size());
}

}  // namespace

void register_data(CLI::App& app) {
  auto a = std::make_shared<DataArgs>();
  CLI::App* data =
      app.add_subcommand("data", "Convert datasets into HDF5 shard folders (train --data hdf5:DIR) and check them");
  data->require_subcommand(1);

  CLI::App* fm = data->add_subcommand("fashion-mnist", "Fashion-MNIST's IDX files into shards (train and test splits)");
  fm->add_option("--data-dir", a->data_dir, "the IDX files' folder")->capture_default_str();
  add_shard_options(fm, *a);
  fm->callback([a] { print_manifest(a->out, convert_fashion_mnist(a->data_dir, a->out, a->convert)); });

  CLI::App* im = data->add_subcommand(
      "images", std::string("An image list (Caffe's 'path label' lines) or a folder of class subfolders into shards, "
                            "decoded, fitted and converted with OpenCV") +
                    (shard_conversion_has_opencv() ? "" : " (this build has no OpenCV)"));
  im->add_option("--list", a->images.list, "the training list: one 'path label' line per image");
  im->add_option("--folder", a->images.folder, "or a folder of class subfolders (labels in sorted order)");
  im->add_option("--test-list", a->images.test_list, "a test split's list");
  im->add_option("--root", a->images.root, "folder the list's paths are relative to (default: the list's)");
  im->add_option("--size", a->size, "HxW of every sample, e.g. 224x224")->required();
  im->add_option("--fit", a->images.fit,
                 "crop: scale the shorter side to cover HxW, then take the centre; warp: resize to exactly HxW "
                 "(Caffe's convert_imageset)")
      ->check(CLI::IsMember({"crop", "warp"}))
      ->capture_default_str();
  im->add_option("--channels", a->images.channels, "3 (RGB) or 1 (grey)")
      ->check(CLI::IsMember({1, 3}))
      ->capture_default_str();
  im->add_option("--classes", a->images.classes, "classes (default: the largest label + 1)")
      ->check(CLI::PositiveNumber);
  add_shard_options(im, *a);
  im->callback([a] {
    const size_t x = a->size.find('x');
    try {
      if (x == std::string::npos) throw std::invalid_argument("no x");
      size_t used = 0;
      a->images.height = std::stoll(a->size.substr(0, x), &used);
      if (used != x) throw std::invalid_argument("height");
      a->images.width = std::stoll(a->size.substr(x + 1), &used);
      if (used != a->size.size() - x - 1) throw std::invalid_argument("width");
    } catch (const std::exception&) {
      throw_config("--size {}: expected HxW, e.g. 224x224", a->size);
    }
    print_manifest(a->out, convert_image_list(a->images, a->out, a->convert));
  });

  CLI::App* fl = data->add_subcommand(
      "flow", std::string("Gait sequences (videos or frame folders) into optical-flow volumes as Castro et al.'s 2D-CNN "
                          "reads them: Farneback flow, the person located by background subtraction, 25 flows x "
                          "(dx, dy) at 60x60") +
                  (shard_conversion_has_opencv() ? "" : " (this build has no OpenCV)"));
  fl->add_option("--list", a->flow.list, "one 'path label' line per sequence: a video file or a folder of frames")
      ->required();
  fl->add_option("--test-list", a->flow.test_list, "a test split's list");
  fl->add_option("--root", a->flow.root, "folder the list's paths are relative to (default: the list's)");
  fl->add_option("--height", a->flow.height, "frames resized to this height (aspect kept)")->capture_default_str();
  fl->add_option("--width", a->flow.width, "volumes cropped this wide around the person")->capture_default_str();
  fl->add_option("--frames", a->flow.frames, "flows stacked per volume (2 channels each)")->capture_default_str();
  fl->add_option("--stride", a->flow.stride, "new flows per volume (5 of 25: Castro et al.'s 80 % overlap)")
      ->capture_default_str();
  fl->add_option("--bound", a->flow.bound, "flow (pixels per frame) mapped to the byte range, +-")
      ->capture_default_str();
  fl->add_option("--locate", a->flow.locate, "motion: background subtraction finds the person; centre: no search")
      ->check(CLI::IsMember({"motion", "centre"}))
      ->capture_default_str();
  fl->add_option("--classes", a->flow.classes, "classes (default: the largest label + 1)")->check(CLI::PositiveNumber);
  add_shard_options(fl, *a);
  fl->callback([a] { print_manifest(a->out, convert_flow_volumes(a->flow, a->out, a->convert)); });

  CLI::App* verify = data->add_subcommand("verify", "Read every chunk of a shard folder and check its CRC-32");
  verify->add_option("dir", a->verify_dir, "the shard folder")->required();
  verify->callback([a] {
    const ShardManifest m = read_shard_manifest(a->verify_dir);
    std::map<std::string, int64_t> chunks;  // every split checked before anything is printed
    for (const auto& [name, split] : m.splits) chunks[name] = ShardDataset(a->verify_dir, name, 0).verify_all();
    print_manifest(a->verify_dir, m);
    for (const auto& [name, n] : chunks)
      std::printf("  %s: %lld chunks checked, all intact\n", name.c_str(), static_cast<long long>(n));
  });
}

}  // namespace cnnscale::app
