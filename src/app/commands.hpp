// Subcommands of the cnnscale executable. Each lives in its own cmd_<name>.cpp and adds itself to
// the CLI11 app; its callback throws cnnscale::Error on failure and main() maps that to the exit
// code (0 ok, 1 runtime failure, 2 usage/config error, 3 a peer rank failed; 75: train stopped by a
// signal after saving its state, see core/stop_signal.hpp).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace cnnscale {
class NetSpec;
}

namespace cnnscale::app {

void register_train(CLI::App& app);
void register_netinfo(CLI::App& app);
void register_bench(CLI::App& app);
void register_time(CLI::App& app);
void register_sweep(CLI::App& app);
void register_report(CLI::App& app);
void register_infer(CLI::App& app);
void register_calibrate(CLI::App& app);
void register_data(CLI::App& app);

// The network infer and calibrate run: --net's (a name or YAML path) when given, else the one a
// `train` checkpoint holds (ConfigError when it holds none).
NetSpec network_to_run(const std::string& net, const std::string& checkpoint);

// --conv-search, --layout and --batchnorm, which train and time share: which convolution implementations a
// GPU backend's search times, and the memory order of the activations (backend.hpp's
// AlgorithmChoice, built by conv_search_from_name and layout_choice_from_name).
inline void add_gpu_algorithm_options(CLI::App* cmd, std::string& conv_search, std::string& layout,
                                      std::string& batchnorm) {
  cmd->add_option("--conv-search", conv_search,
                  "GPU convolution algorithms each shape's search times: all (cuDNN's legacy algorithms, its "
                  "graph-API engines, the lowered im2col + GEMM form and, for a first convolution, the form "
                  "lowered by width, an (R x 1) convolution over S*C channels; the fastest runs), legacy (the "
                  "legacy algorithms only, to compare) or no-width (all but the width-lowered form, to compare)")
      ->check(CLI::IsMember({"all", "legacy", "no-width"}))
      ->capture_default_str();
  cmd->add_option("--layout", layout,
                  "Memory order of 4-d activations and filters: auto (channels-last on a GPU in bf16, fp16 and "
                  "tf32, NCHW otherwise), or nchw / nhwc forced (nhwc on a GPU only), to measure what it costs")
      ->check(CLI::IsMember({"auto", "nchw", "nhwc"}))
      ->capture_default_str();
  cmd->add_option("--batchnorm", batchnorm,
                  "Kernels of channels-last training batch norm on a GPU: auto (cuDNN's persistent ones on a whole "
                  "GPU, cnnscale's own on an SM partition, where cuDNN's fail or crawl), cudnn or cnnscale "
                  "everywhere, to compare them")
      ->check(CLI::IsMember({"auto", "cudnn", "cnnscale"}))
      ->capture_default_str();
}

// A non-error exit code a command asks main() to return after a clean shutdown (MPI finalised on
// every rank): train's kExitRequeue after a stop signal. 0 unless set.
inline int& requested_exit_code() {
  static int code = 0;
  return code;
}

}  // namespace cnnscale::app
