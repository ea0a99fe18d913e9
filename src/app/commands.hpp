// Subcommands of the cnnscale executable. Each lives in its own cmd_<name>.cpp and adds itself to
// the CLI11 app; its callback throws cnnscale::Error on failure and main() maps that to the exit
// code (0 ok, 1 runtime failure, 2 usage/config error, 3 a peer rank failed; 75: train stopped by a
// signal after saving its state, see core/stop_signal.hpp).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

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
// The hidden --list-options flag (options_listing.cpp): every command's options as JSON, for checks
// of the documentation against the program.
void add_options_listing(CLI::App& app);
// The hidden --options-reference COMMAND flag (options_reference.cpp): the Markdown block of a
// command's options, grouped as --help groups them, and of its subcommands', for its docs page.
void add_options_reference(CLI::App& app);
// That block for `command` ("train", "bench", "bench gemm") of `root`; a ConfigError for no such command.
std::string options_reference(const CLI::App& root, const std::string& command);

// A non-error exit code a command asks main() to return after a clean shutdown (MPI finalised on
// every rank): train's kExitRequeue after a stop signal. 0 unless set.
inline int& requested_exit_code() {
  static int code = 0;
  return code;
}

}  // namespace cnnscale::app
