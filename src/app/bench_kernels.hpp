// `cnnscale bench gemm` and `bench conv`: DeepBench's kernel benchmarks on today's libraries, with
// every variant's time, workspace, energy and (with --check) correctness.
#pragma once
#include <CLI/CLI.hpp>

namespace cnnscale::app {

void register_kernel_benches(CLI::App& bench);
// bench data (bench_data.cpp): the input pipeline alone.
void register_data_bench(CLI::App& bench);

}  // namespace cnnscale::app
