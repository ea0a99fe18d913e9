// Image lists: parsing and checking (plain C++), decoding (OpenCV, where the build has it), and the
// dataset that decodes on demand. See image_list.hpp.
#include "data/image_list.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/byte_input.hpp"
#include "core/log.hpp"
#include "data/shard_convert.hpp"

#ifdef CNNSCALE_HAVE_OPENCV
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#endif

namespace cnnscale {

namespace fs = std::filesystem;

std::vector<ImageEntry> read_image_list(const std::string& list, const std::string& root_option, bool folders) {
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
    if (!fs::is_regular_file(p, ec) && !(folders && fs::is_directory(p, ec)))
      throw_config("{}: {}: no such {}", where, p.string(), folders ? "file or folder" : "file");
    out.push_back({p.string(), static_cast<int32_t>(label), where});
  }
  if (out.empty()) throw_config("{}: no images listed", list);
  return out;
}

void check_image_fit(const ImageFit& f, const std::string& what) {
  if (f.height < 1 || f.width < 1) throw_config("{}: size: expected HxW, two positive sizes", what);
  if (f.channels != 1 && f.channels != 3) throw_config("{}: channels: 1 or 3, not {}", what, f.channels);
  if (f.fit != "crop" && f.fit != "warp") throw_config("{}: fit: crop or warp, not '{}'", what, f.fit);
}

#ifdef CNNSCALE_HAVE_OPENCV

bool images_decodable() {
  return true;
}

void decode_image(const ImageEntry& e, const ImageFit& o, uint8_t* out) {
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
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = fitted.ptr<uint8_t>(y);
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < o.channels; ++c) out[c * plane + static_cast<int64_t>(y) * w + x] = row[x * o.channels + c];
  }
}

#else

bool images_decodable() {
  return false;
}

void decode_image(const ImageEntry& e, const ImageFit&, uint8_t*) {
  throw_config("{}: this build has no OpenCV to decode {}", e.where, e.path);
}

#endif

ImageListSpec parse_image_list_spec(const std::string& name, const std::string& what) {
  const std::string body = name.substr(std::string(kImageListPrefix).size());
  const size_t q = body.find('?');
  ImageListSpec s;
  s.list = body.substr(0, q);
  if (s.list.empty()) throw_config("{}: '{}' names no list file (list:FILE?size=HxW)", what, name);
  bool sized = false;
  std::istringstream options(q == std::string::npos ? "" : body.substr(q + 1));
  std::string item;
  while (std::getline(options, item, '&')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) throw_config("{}: '{}': expected key=value", what, item);
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    auto integer = [&](int64_t lo, int64_t hi) {
      int64_t v = 0;
      std::istringstream is(value);
      if (!(is >> v) || !is.eof() || v < lo || v > hi)
        throw_config("{}: {}={}: expected an integer in [{}, {}]", what, key, value, lo, hi);
      return v;
    };
    if (key == "size") {
      const size_t x = value.find('x');
      std::istringstream hs(value.substr(0, x)), ws(x == std::string::npos ? "" : value.substr(x + 1));
      if (x == std::string::npos || !(hs >> s.fit.height) || !hs.eof() || !(ws >> s.fit.width) || !ws.eof())
        throw_config("{}: size={}: expected HxW, e.g. 224x224", what, value);
      sized = true;
    } else if (key == "fit") {
      s.fit.fit = value;
    } else if (key == "channels") {
      s.fit.channels = static_cast<int>(integer(1, 3));
    } else if (key == "test") {
      s.test_list = value;
    } else if (key == "root") {
      s.root = value;
    } else if (key == "classes") {
      s.classes = integer(1, int64_t{1} << 30);
    } else {
      throw_config("{}: unknown list option '{}' (size, fit, channels, test, root, classes)", what, key);
    }
  }
  if (!sized) throw_config("{}: '{}' gives no size: list:FILE?size=HxW", what, name);
  check_image_fit(s.fit, what);
  return s;
}

std::string image_list_name(const ImageListSpec& s) {
  std::string name = fmt::format("{}{}?size={}x{}&fit={}&channels={}", kImageListPrefix, s.list, s.fit.height,
                                 s.fit.width, s.fit.fit, s.fit.channels);
  if (!s.test_list.empty()) name += "&test=" + s.test_list;
  if (!s.root.empty()) name += "&root=" + s.root;
  if (s.classes > 0) name += fmt::format("&classes={}", s.classes);
  return name;
}

ImageListContents read_image_lists(const ImageListSpec& spec, const std::string& what) {
  if (!images_decodable())
    throw_config(
        "{}: reading image lists needs OpenCV, which this build lacks (install libopencv-dev and configure again), "
        "or convert the list where OpenCV is (cnnscale data images) and train from the shards (hdf5:DIR)",
        what);
  ImageListContents c;
  c.train = read_image_list(spec.list, spec.root);
  if (!spec.test_list.empty()) c.test = read_image_list(spec.test_list, spec.root);
  const ImageEntry* largest = &c.train.front();
  for (const auto* split : {&c.train, &c.test})
    for (const ImageEntry& e : *split)
      if (e.label > largest->label) largest = &e;
  c.classes = spec.classes > 0 ? spec.classes : largest->label + 1;
  if (largest->label >= c.classes)
    throw_config("{}: label {} is not below classes={} ({})", largest->where, largest->label, spec.classes, what);
  return c;
}

ImageListDataset::ImageListDataset(std::string name, std::vector<ImageEntry> entries, const ImageFit& fit,
                                   int64_t classes, std::optional<ByteAffine> normalisation)
    : name_(std::move(name)), entries_(std::move(entries)), fit_(fit), classes_(classes) {
  CNNSCALE_CHECK(!entries_.empty(), "{}: no images", name_);
#ifdef CNNSCALE_HAVE_OPENCV
  // The loader's --data-threads decode images side by side (and every rank does): OpenCV's own
  // threads inside each resize would only oversubscribe the cores.
  cv::setNumThreads(1);
#endif
  if (normalisation) {
    affine_ = *normalisation;
    return;
  }
  // Up to kStatsImages images evenly spaced through the list: a list sorted by class still
  // contributes every class.
  const std::vector<int64_t> shape = {fit_.channels, fit_.height, fit_.width};
  ChannelStats stats(shape);
  std::vector<uint8_t> bytes(static_cast<size_t>(fit_.channels * fit_.height * fit_.width));
  const int64_t n = size(), k = std::min(n, kStatsImages);
  for (int64_t i = 0; i < k; ++i) {
    decode_image(entries_[static_cast<size_t>(i * n / k)], fit_, bytes.data());
    stats.add(bytes.data());
  }
  const std::vector<float> mean = stats.mean(), stddev = stats.stddev();
  affine_ = ByteAffine::from_stats(mean, stddev);
  log::info(
      "{}: normalised with the mean {:.4f} and standard deviation {:.4f} of x / 255 per channel over {} of its "
      "{} images",
      name_, fmt::join(mean, ", "), fmt::join(stddev, ", "), k, n);
}

void ImageListDataset::fill_bytes(std::span<const int64_t> indices, uint8_t* data, int32_t* labels) const {
  const int64_t sample = fit_.channels * fit_.height * fit_.width;
  for (size_t s = 0; s < indices.size(); ++s) {
    const int64_t i = indices[s];
    CNNSCALE_CHECK(i >= 0 && i < size(), "{}: sample {} out of range [0, {})", name_, i, size());
    const ImageEntry& e = entries_[static_cast<size_t>(i)];
    decode_image(e, fit_, data + static_cast<int64_t>(s) * sample);
    labels[s] = e.label;
  }
}

void ImageListDataset::fill(std::span<const int64_t> indices, float* data, int32_t* labels) const {
  const int64_t plane = fit_.height * fit_.width, sample = fit_.channels * plane;
  std::vector<uint8_t> bytes(static_cast<size_t>(sample));
  for (size_t s = 0; s < indices.size(); ++s) {
    int32_t label = 0;
    fill_bytes(indices.subspan(s, 1), bytes.data(), &label);
    labels[s] = label;
    float* out = data + static_cast<int64_t>(s) * sample;
    for (int64_t c = 0; c < fit_.channels; ++c)
      for (int64_t p = 0; p < plane; ++p)
        out[c * plane + p] =
            byte_to_input(bytes[static_cast<size_t>(c * plane + p)], affine_.scale[static_cast<size_t>(c)],
                          affine_.offset[static_cast<size_t>(c)]);
  }
}

}  // namespace cnnscale
