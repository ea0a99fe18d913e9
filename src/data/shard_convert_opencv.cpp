// Image lists and folders into shards with OpenCV (see shard_convert.hpp). Built without OpenCV,
// the conversions say so in one line; reading shards never needs it.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/byte_input.hpp"
#include "data/image_list.hpp"
#include "data/shard_convert.hpp"

#ifdef CNNSCALE_HAVE_OPENCV
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/video/background_segm.hpp>
#include <opencv2/video/tracking.hpp>
#include <opencv2/videoio.hpp>
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

ShardManifest convert_flow_volumes(const FlowOptions&, const std::string&, const ShardConvertOptions&) {
  throw_config(
      "cnnscale data flow: this build has no OpenCV for video and optical flow (install libopencv-dev and "
      "configure again); shards made elsewhere train here without it");
}

#else

namespace fs = std::filesystem;

namespace {

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

ShardManifest convert_image_list(const ImageListOptions& o, const std::string& out, const ShardConvertOptions& so) {
  if (o.list.empty() == o.folder.empty()) throw_config("cnnscale data images: give --list or --folder");
  if (o.height < 1 || o.width < 1) throw_config("--size: expected HxW, two positive sizes");
  if (o.channels != 1 && o.channels != 3) throw_config("--channels: 1 or 3");
  if (o.fit != "crop" && o.fit != "warp") throw_config("--fit: crop or warp");
  std::vector<std::string> class_names;
  std::map<std::string, std::vector<ImageEntry> > splits;
  splits["train"] = o.list.empty() ? read_folder(o.folder, class_names) : read_image_list(o.list, o.root);
  if (!o.test_list.empty()) splits["test"] = read_image_list(o.test_list, o.root);
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
    const ImageFit fit{o.height, o.width, o.fit, o.channels};
    std::vector<uint8_t> bytes(static_cast<size_t>(o.channels * o.height * o.width));
    for (const auto& [name, entries] : splits) {
      ShardWriter w(tmp, name, m.sample_shape, so.shard_samples, m.chunk_samples);
      for (const ImageEntry& e : entries) {
        decode_image(e, fit, bytes.data());
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

namespace {

// The frames of a sequence, grey and resized to `height` (aspect kept): a folder's image files in
// name order, or a video file's frames.
std::vector<cv::Mat> read_frames(const ImageEntry& e, int64_t height) {
  std::vector<cv::Mat> frames;
  auto add = [&](const cv::Mat& img) {
    cv::Mat grey;
    if (img.channels() == 1)
      grey = img;
    else
      cv::cvtColor(img, grey, cv::COLOR_BGR2GRAY);
    const int h = static_cast<int>(height);
    const int w = std::max(1, static_cast<int>(std::lround(grey.cols * static_cast<double>(h) / grey.rows)));
    cv::Mat sized;
    if (grey.rows == h)
      sized = grey;
    else
      cv::resize(grey, sized, cv::Size(w, h), 0, 0, grey.rows > h ? cv::INTER_AREA : cv::INTER_LINEAR);
    frames.push_back(sized.clone());
  };
  std::error_code ec;
  if (fs::is_directory(e.path, ec)) {
    std::vector<std::string> files;
    for (const auto& f : fs::directory_iterator(e.path))
      if (f.is_regular_file()) files.push_back(f.path().string());
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) {
      cv::Mat img = cv::imread(f, cv::IMREAD_UNCHANGED);
      if (img.empty()) throw_config("{}: OpenCV cannot decode frame {}", e.where, f);
      add(img);
    }
  } else {
    cv::VideoCapture video(e.path);
    if (!video.isOpened()) throw_config("{}: OpenCV cannot open the video {}", e.where, e.path);
    for (cv::Mat img; video.read(img);) add(img);
  }
  for (const cv::Mat& f : frames)
    if (f.size() != frames.front().size()) throw_config("{}: frames of different sizes in {}", e.where, e.path);
  return frames;
}

// Each frame's x of the person: the mean column of MOG2's foreground (the middle when it finds none).
std::vector<double> locate_person(const std::vector<cv::Mat>& frames, const std::string& how) {
  std::vector<double> x(frames.size(), frames.front().cols / 2.0);
  if (how != "motion") return x;
  cv::Ptr<cv::BackgroundSubtractorMOG2> mog = cv::createBackgroundSubtractorMOG2(500, 16, false);
  for (size_t i = 0; i < frames.size(); ++i) {
    cv::Mat mask;
    mog->apply(frames[i], mask);
    const cv::Moments m = cv::moments(mask, true);
    if (m.m00 > 0) x[i] = m.m10 / m.m00;
  }
  return x;
}

}  // namespace

ShardManifest convert_flow_volumes(const FlowOptions& o, const std::string& out, const ShardConvertOptions& so) {
  if (o.list.empty()) throw_config("cnnscale data flow: give --list");
  if (o.height < 8 || o.width < 8) throw_config("--height and --width: at least 8 pixels");
  if (o.frames < 1 || o.stride < 1) throw_config("--frames and --stride: at least 1");
  if (!(o.bound > 0)) throw_config("--bound: positive pixels per frame");
  if (o.locate != "motion" && o.locate != "centre") throw_config("--locate: motion or centre");
  std::map<std::string, std::vector<ImageEntry> > splits;
  splits["train"] = read_image_list(o.list, o.root, true);
  if (!o.test_list.empty()) splits["test"] = read_image_list(o.test_list, o.root, true);
  int64_t largest = 0;
  for (const auto& [name, entries] : splits)
    for (const ImageEntry& e : entries) largest = std::max<int64_t>(largest, e.label);
  const int64_t classes = o.classes > 0 ? o.classes : largest + 1;
  if (largest >= classes) throw_config("--classes {}: the lists have label {}", o.classes, largest);

  // Farneback's parameters: OpenCV's documented example values, recorded with the volumes.
  const double pyr_scale = 0.5, poly_sigma = 1.2;
  const int levels = 3, winsize = 15, iterations = 3, poly_n = 5;
  ShardManifest m;
  m.name = fs::path(o.list).stem().string();
  m.sample_shape = {2 * o.frames, o.height, o.width};
  m.classes = classes;
  const int64_t sample_bytes = 2 * o.frames * o.height * o.width;
  m.chunk_samples = so.chunk_samples > 0 ? so.chunk_samples : default_chunk_samples(sample_bytes);
  m.source = {
      {"converter", kFlowConverter},
      {"from", fs::absolute(o.list).string()},
      {"flow", "Farneback (OpenCV), consecutive frames, grey"},
      {"farneback",
       {{"pyr_scale", pyr_scale},
        {"levels", levels},
        {"winsize", winsize},
        {"iterations", iterations},
        {"poly_n", poly_n},
        {"poly_sigma", poly_sigma}}},
      {"frames_resized_to_height", o.height},
      {"crop_width", o.width},
      {"locate",
       o.locate == "motion" ? "MOG2 foreground's mean x in the volume's central frame" : "the frame's middle"},
      {"flows_per_volume", o.frames},
      {"stride", o.stride},
      {"channels", kFlowChannels},
      {"quantisation", fmt::format("{}{}), clamped to 0..255; v in pixels per frame", kFlowQuantisationStart, o.bound)},
      {"bound", o.bound},
      {"decoder", fmt::format("OpenCV {}", CV_VERSION)},
      {"mean_std", "of the train split, byte / 255, per channel"}};
  if (!o.test_list.empty()) m.source["test_list"] = fs::absolute(o.test_list).string();
  publish_shard_folder(out, [&](const std::string& tmp) {
    ChannelStats stats(m.sample_shape);
    std::vector<uint8_t> volume(static_cast<size_t>(sample_bytes));
    for (const auto& [name, entries] : splits) {
      ShardWriter w(tmp, name, m.sample_shape, so.shard_samples, m.chunk_samples);
      for (const ImageEntry& e : entries) {
        const std::vector<cv::Mat> frames = read_frames(e, o.height);
        if (static_cast<int64_t>(frames.size()) < o.frames + 1)
          throw_config("{}: {} frames, a volume needs {}", e.where, frames.size(), o.frames + 1);
        if (frames.front().cols < o.width)
          throw_config("{}: frames are {} wide at height {}, narrower than --width {}", e.where, frames.front().cols,
                       o.height, o.width);
        const std::vector<double> person = locate_person(frames, o.locate);
        std::vector<cv::Mat> flows(frames.size() - 1);
        for (size_t i = 0; i + 1 < frames.size(); ++i)
          cv::calcOpticalFlowFarneback(frames[i], frames[i + 1], flows[i], pyr_scale, levels, winsize, iterations,
                                       poly_n, poly_sigma, 0);
        const int64_t plane = o.height * o.width;
        for (int64_t s = 0; s + o.frames <= static_cast<int64_t>(flows.size()); s += o.stride) {
          // The study x-centres the person in the volume's central frame.
          const double cx = person[static_cast<size_t>(s + o.frames / 2)];
          const int x0 = static_cast<int>(std::clamp<double>(std::lround(cx - o.width / 2.0), 0.0,
                                                             static_cast<double>(frames.front().cols - o.width)));
          for (int64_t f = 0; f < o.frames; ++f) {
            const cv::Mat& flow = flows[static_cast<size_t>(s + f)];
            for (int y = 0; y < o.height; ++y) {
              const cv::Point2f* row = flow.ptr<cv::Point2f>(y) + x0;
              for (int x = 0; x < o.width; ++x)
                for (int c = 0; c < 2; ++c) {
                  const double v = c == 0 ? row[x].x : row[x].y;
                  const double q = std::clamp(std::round(kFlowZeroByte + v * 127.5 / o.bound), 0.0, 255.0);
                  volume[static_cast<size_t>((2 * f + c) * plane + y * o.width + x)] = static_cast<uint8_t>(q);
                }
            }
          }
          if (name == "train") stats.add(volume.data());
          w.add(volume.data(), e.label);
        }
      }
      m.splits[name] = w.finish();
      if (m.splits[name].samples == 0) throw_config("{}: no volume made (sequences too short?)", name);
    }
    m.mean = stats.mean();
    m.stddev = stats.stddev();
    write_shard_manifest(tmp, m);
  });
  return m;
}

#endif

}  // namespace cnnscale
