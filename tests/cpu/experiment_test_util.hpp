// Shared by the experiment-file tests: the host a parse assumes (no GPU, or n GPUs), parsing a YAML
// text as "t.yaml", the check that a parse fails with one line holding every fragment, and a flag's
// value in the train arguments a run expands to.
#pragma once
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "experiment/experiment.hpp"

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

}  // namespace cnnscale::testing
