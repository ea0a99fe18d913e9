// report --baseline: the reader (report_baseline.hpp).
#include "experiment/report_baseline.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace cnnscale::report {

std::string baseline_net(const std::string& name) {
  return name == "resnetim" ? "resnet34" : name;
}

BaselineFile read_baseline(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_config("--baseline {}: cannot read the file", path);
  BaselineFile file;
  file.path = path;
  const std::string stem = std::filesystem::path(path).stem().string();
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw_config("{}:{}: not a JSON object", path, line);
    if (j.contains("error")) {
      ++file.failed;
      continue;
    }
    const auto need = [&](const char* key, bool number) -> const nlohmann::json& {
      if (!j.contains(key)) throw_config("{}:{}: no \"{}\"", path, line, key);
      const nlohmann::json& v = j.at(key);
      if (number ? !v.is_number() : !v.is_string())
        throw_config("{}:{}: \"{}\" is {}, expected a {}", path, line, key, v.dump(), number ? "number" : "string");
      return v;
    };
    BaselinePoint p;
    p.net = baseline_net(need("net", false).get<std::string>());
    p.precision = need("mode", false).get<std::string>();
    const auto whole = [&](const char* key) {
      const double v = need(key, true).get<double>();
      if (!(v >= 1) || v != std::floor(v))
        throw_config("{}:{}: \"{}\" is {}, expected a whole number >= 1", path, line, key, v);
      return static_cast<int64_t>(v);
    };
    p.batch = whole("batch");
    p.world = whole("world");
    p.samples_per_s = need("samples_per_s", true).get<double>();
    if (!(p.samples_per_s > 0) || !std::isfinite(p.samples_per_s))
      throw_config("{}:{}: \"samples_per_s\" is {}, expected a positive number", path, line, p.samples_per_s);
    const std::string compile =
        j.contains("compile") && j["compile"].is_string() ? j["compile"].get<std::string>() : "";
    p.source = compile.empty() ? stem : stem + " compile=" + compile;
    file.points.push_back(std::move(p));
  }
  if (file.points.empty() && file.failed == 0) throw_config("--baseline {}: no measurement in the file", path);
  return file;
}

}  // namespace cnnscale::report
