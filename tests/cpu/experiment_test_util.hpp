// Shared by the experiment-file tests: the host a parse assumes (no GPU, or n GPUs), a small training
// and a small inference experiment, parsing a YAML text as "t.yaml", the check that a parse fails with
// one line holding every fragment, a flag's value in the train arguments a run expands to, and a
// setting's value other than a given one.
#pragma once
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "experiment/experiment.hpp"
#include "experiment/settings_table.hpp"

namespace cnnscale::testing {

inline HostInfo cpu_host() {
  return HostInfo{std::nullopt, "", true};
}
inline HostInfo gpu_host(int n) {
  return HostInfo{n, fmt::format("CUDA_VISIBLE_DEVICES={}", n), true};
}

// A small valid training experiment (lines 1 to 7), for tests that append to it.
inline const std::string kBaseExperiment =
    "name: t\n"             // 1
    "dataset: synthetic\n"  // 2
    "iterations: 4\n"       // 3
    "matrix:\n"             // 4
    "  network: [lenet]\n"  // 5
    "  batch: [8, 16]\n"    // 6
    "  gpus: [1, 2]\n";     // 7
// Its short name in the tests that build most of their texts from it.
inline const std::string& kBase = kBaseExperiment;

// The matrix of one inference run: lenet in fp32 on one GPU (or rank), once. Last in the texts
// below, so that a test can append matrix lines to them.
inline const std::string kOneInferRunMatrix = R"(matrix:
  network: [lenet]
  precision: [fp32]
  gpus: [1]
  repeats: 1
)";

// A small valid inference experiment on GPUs (parse it with gpu_host), for tests that append matrix
// lines to it or override its keys.
inline const std::string kInferExperiment = R"(name: inf
mode: infer
device: gpu
infer:
  batch: [1, 8, max]
)" + kOneInferRunMatrix;

inline Experiment parse(const std::string& text, const std::vector<std::string>& overrides = {},
                        const HostInfo& host = cpu_host()) {
  return parse_experiment_text(text, "t.yaml", overrides, host);
}

// The value after `flag` in a run's train arguments, or "<absent>".
inline std::string flag_value(const std::vector<std::string>& args, const std::string& flag) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == flag) return args[i + 1];
  return "<absent>";
}

// Parsing must fail with a ConfigError of one line containing every fragment.
inline void expect_error(const std::string& text, const std::vector<std::string>& fragments,
                         const std::vector<std::string>& overrides = {}, const HostInfo& host = cpu_host()) {
  try {
    parse(text, overrides, host);
    ADD_FAILURE() << "no error for:\n" << text;
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << msg << "\nlacks: " << f;
  }
}

// A valid value of `s` other than `def` (its default, or the experiment's where that differs), made
// from the entry alone so that a new entry is covered as it is declared: half of a number where the
// range allows, else one above it; another choice; the other truth value; a list; a longer text.
inline nlohmann::json other_value(const Setting& s, const nlohmann::json& def) {
  switch (s.type) {
    case SettingType::Choice:
      for (const std::string& c : s.choices)
        if (c != def.get<std::string>()) return c;
      break;
    case SettingType::NumberList:
    case SettingType::IntegerList:
      return nlohmann::json::array({1, 2});
    case SettingType::Switch:
    case SettingType::Boolean:
      return !def.get<bool>();
    case SettingType::Text:
      return def.get<std::string>() + "x";
    case SettingType::Integer: {
      const int64_t d = def.get<int64_t>();
      return d / 2 >= s.min && d / 2 != d ? d / 2 : d + 1;
    }
    case SettingType::Number: {
      const double d = def.get<double>();
      return d / 2 > s.min ? d / 2 : d + 1 <= s.max ? d + 1 : (d + s.min) / 2;
    }
    default:  // a text list: none of the entries these tests go through
      break;
  }
  ADD_FAILURE() << s.name << ": no other value";
  return nullptr;
}

}  // namespace cnnscale::testing
