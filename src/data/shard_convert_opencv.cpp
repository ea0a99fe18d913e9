// Image lists and folders into shards with OpenCV (see shard_convert.hpp). Built without OpenCV,
// the conversions say so in one line; reading shards never needs it.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/shard_convert.hpp"

#ifdef CNNSCALE_HAVE_OPENCV
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#endif

namespace cnnscale {

#ifndef CNNSCALE_HAVE_OPENCV

bool shard_conversion_has_opencv() {
  return false;
}

ShardManifest convert_image_list(const ImageListOptions&, const std::string&, const ShardConvertOptions&) {
  throw_config(
      "cnnscale data images: this build has no OpenCV to decode images (install libopencv-dev and configure "
      "again); shards made elsewhere train here without it");
}

#else

namespace fs = std::filesystem;

namespace {

struct ImageEntry {
  std::string path;  // as opened
  int32_t label = 0;
  std::string where;  // "list.txt:12" or the file, for messages
};

// Every entry of a list, checked (syntax, label, the file exists) before any image is decoded.
std::vector<ImageEntry> read_list(const std::string& list, const std::string& root_option) {
  std::ifstream in(list);
  if (!in) throw_config("{}: cannot read the image list", list);
  const fs::path root = root_option.empty() ? fs::path(list).parent_path() : fs::path(root_option);
  std::vector<ImageEntry> out;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    // "path label": the label is the last field, so a path may contain spaces.
    const size_t space = line.find_last_of(" \t");
    const std::string where = fmt::format("{}:{}", list, n);
    if (space == std::string::npos || space < first) throw_config("{}: expected 'path label'", where);
    std::string path = line.substr(first, line.find_last_not_of(" \t", space) - first + 1);
    const std::string label_text = line.substr(space + 1);
    int64_t label = -1;
    std::istringstream ls(label_text);
    if (!(ls >> label) || !ls.eof() || label < 0 || label > (int64_t{1} << 30))
      throw_config("{}: label '{}' is not a non-negative integer", where, label_text);
    const fs::path p = fs::path(path).is_absolute() ? fs::path(path) : root / path;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) throw_config("{}: {}: no such file", where, p.string());
    out.push_back({p.string(), static_cast<int32_t>(label), where});
  }
  if (out.empty()) throw_config("{}: no images listed", list);
  return out;
}

// A folder of class subfolders: classes in sorted order, files in sorted order within each.
std::vector<ImageEntry> read_folder(const std::string& folder, std::vector<std::string>& class_names) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) throw_config("--folder {}: not a folder", folder);
  for (const auto& e : fs::directory_iterator(folder))
    if (e.is_directory()) class_names.push_back(e.path().filename().string());
  std::sort(class_names.begin(), class_names.end());
  if (class_names.empty()) throw_config("--folder {}: no class subfolders", folder);
  std::vector<ImageEntry> out;
  for (size_t c = 0; c < class_names.size(); ++c) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(fs::path(folder) / class_names[c]))
      if (e.is_regular_file()) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) out.push_back({f, static_cast<int32_t>(c), f});
  }
  return out;
}

}  // namespace

bool shard_conversion_has_opencv() {
  return true;
}

namespace {

// One image as C x H x W bytes: decoded, fitted to height x width, RGB (or grey).
void decode(const ImageEntry& e, const ImageListOptions& o, std::vector<uint8_t>& out) {
  cv::Mat img = cv::imread(e.path, o.channels == 1 ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR);
  if (img.empty()) throw_config("{}: OpenCV cannot decode {}", e.where, e.path);
  const int h = static_cast<int>(o.height), w = static_cast<int>(o.width);
  cv::Mat fitted;
  if (img.rows == h && img.cols == w) {
    fitted = img;
  } else if (o.fit == "warp") {
    cv::resize(img, fitted, cv::Size(w, h), 0, 0, img.rows * img.cols > h * w ? cv::INTER_AREA : cv::INTER_LINEAR);
  } else {
    // Scale so the image covers h x w, then take the centre (torchvision's Resize + CenterCrop).
    const double s = std::max(static_cast<double>(h) / img.rows, static_cast<double>(w) / img.cols);
    const int rh = std::max(h, static_cast<int>(std::lround(img.rows * s)));
    const int rw = std::max(w, static_cast<int>(std::lround(img.cols * s)));
    cv::Mat scaled;
    cv::resize(img, scaled, cv::Size(rw, rh), 0, 0, s < 1 ? cv::INTER_AREA : cv::INTER_LINEAR);
    fitted = scaled(cv::Rect((rw - w) / 2, (rh - h) / 2, w, h));
  }
  if (o.channels == 3) cv::cvtColor(fitted, fitted, cv::COLOR_BGR2RGB);
  const int64_t plane = static_cast<int64_t>(h) * w;
  out.resize(static_cast<size_t>(plane * o.channels));
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = fitted.ptr<uint8_t>(y);
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < o.channels; ++c)
        out[static_cast<size_t>(c * plane + static_cast<int64_t>(y) * w + x)] = row[x * o.channels + c];
  }
}

}  // namespace

ShardManifest convert_image_list(const ImageListOptions& o, const std::string& out, const ShardConvertOptions& so) {
  if (o.list.empty() == o.folder.empty()) throw_config("cnnscale data images: give --list or --folder");
  if (o.height < 1 || o.width < 1) throw_config("--size: expected HxW, two positive sizes");
  if (o.channels != 1 && o.channels != 3) throw_config("--channels: 1 or 3");
  if (o.fit != "crop" && o.fit != "warp") throw_config("--fit: crop or warp");
  std::vector<std::string> class_names;
  std::map<std::string, std::vector<ImageEntry> > splits;
  splits["train"] = o.list.empty() ? read_folder(o.folder, class_names) : read_list(o.list, o.root);
  if (!o.test_list.empty()) splits["test"] = read_list(o.test_list, o.root);
  int64_t largest = 0;
  for (const auto& [name, entries] : splits)
    for (const ImageEntry& e : entries) largest = std::max<int64_t>(largest, e.label);
  const int64_t classes = o.classes > 0 ? o.classes : largest + 1;
  if (largest >= classes) throw_config("--classes {}: the lists have label {}", o.classes, largest);
  ShardManifest m;
  m.name = o.list.empty() ? fs::path(o.folder).filename().string() : fs::path(o.list).stem().string();
  m.sample_shape = {o.channels, o.height, o.width};
  m.classes = classes;
  m.chunk_samples = so.chunk_samples > 0 ? so.chunk_samples : default_chunk_samples(o.channels * o.height * o.width);
  m.source = {{"converter", "cnnscale data images"},
              {"from", fs::absolute(o.list.empty() ? o.folder : o.list).string()},
              {"size", {o.height, o.width}},
              {"fit", o.fit == "crop" ? "shorter side scaled to cover, centre crop" : "resized to the size"},
              {"channels", o.channels == 3 ? "RGB" : "grey"},
              {"decoder", fmt::format("OpenCV {}", CV_VERSION)},
              {"mean_std", "of the train split, x / 255, per channel"}};
  if (!o.test_list.empty()) m.source["test_list"] = fs::absolute(o.test_list).string();
  if (!class_names.empty()) m.source["class_names"] = class_names;
  publish_shard_folder(out, [&](const std::string& tmp) {
    ChannelStats stats(m.sample_shape);
    std::vector<uint8_t> bytes;
    for (const auto& [name, entries] : splits) {
      ShardWriter w(tmp, name, m.sample_shape, so.shard_samples, m.chunk_samples);
      for (const ImageEntry& e : entries) {
        decode(e, o, bytes);
        if (name == "train") stats.add(bytes.data());
        w.add(bytes.data(), e.label);
      }
      m.splits[name] = w.finish();
    }
    m.mean = stats.mean();
    m.stddev = stats.stddev();
    write_shard_manifest(tmp, m);
  });
  return m;
}

#endif

}  // namespace cnnscale
