// Subcommands of the cnnscale executable. Each lives in its own cmd_<name>.cpp and adds itself to
// the CLI11 app; its callback throws cnnscale::Error on failure and main() maps that to the exit
// code (0 ok, 1 runtime failure, 2 usage/config error, 3 a peer rank failed).
#pragma once
#include <CLI/CLI.hpp>

namespace cnnscale::app {

void register_train(CLI::App& app);
void register_netinfo(CLI::App& app);
void register_bench(CLI::App& app);
void register_time(CLI::App& app);
void register_sweep(CLI::App& app);
void register_report(CLI::App& app);

}  // namespace cnnscale::app
