// `bench allreduce` results and their report table. The bench (rank 0) writes the JSON object of
// --json as summary.json of ROOT/<experiment>/allreduce/<device>-n<ranks>-<algo>-<UTC time>[-k]/
// (earlier versions: that object alone as <...>.json); `cnnscale report` finds both under a results
// directory and lays out busbw and time per message size with one column per rank count (as
// nccl-tests users compare them).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "parallel/allreduce_bench.hpp"
#include "experiment/report_table.hpp"
#include "io/allreduce_results.hpp"

namespace cnnscale::report {

using cnnscale::kAllreduceBenchFormat;  // the format is io's (allreduce_results.hpp)

// One results file of `bench allreduce`.
struct AllreduceBenchFile {
  std::string path;
  std::string time;            // UTC start, "2026-11-22T04:43:00Z"
  std::string host;            // rank 0's host
  AllreduceBenchResult bench;  // ranks, device, algo, library, rank_devices, warm-up/iters, rows
  AllreduceResult result;      // the whole file, as read
};

// ROOT/<experiment>/allreduce.
std::string allreduce_bench_dir(const std::string& root, const std::string& experiment);
// "<device>-n<ranks>-<algo>-<stamp>" with the algo reduced to file-name characters.
std::string allreduce_bench_stem(const AllreduceBenchResult& bench, const std::string& utc_stamp);
// Creates `dir` and checks that a file can be created in it (a probe, removed again): ConfigError
// "cannot create/write ..." otherwise, so a bad root fails before the benchmark runs.
void prepare_allreduce_bench_dir(const std::string& dir);
// The result folder DIR/<stem>/ (summary.json: the --json object; cases.csv and cases.h5: a row per
// size), as the kernel benches write theirs; what `bench allreduce --results` writes.
std::string write_allreduce_bench_folder(const std::string& dir, const std::string& stem, const nlohmann::json& j);

// Reads one file's object through its schema (io/allreduce_results.hpp): ConfigError naming the
// missing or mistyped field.
AllreduceBenchFile parse_allreduce_bench(const nlohmann::json& j, const std::string& path);

// Every */allreduce/*.json and */allreduce/*/summary.json under `results_dir` (recursively, sorted by
// path) whose "benchmark" is "allreduce" (a run folder, one holding run.h5, is not a bench's). A file that cannot be
// read or parsed is skipped with a warning naming it (counted in `skipped`). ConfigError when `results_dir` is not a
// readable directory.
std::vector<AllreduceBenchFile> find_allreduce_benches(const std::string& results_dir, int* skipped = nullptr);

// One row per message size (label and bytes); per (device, algo) setting and rank count N,
// ascending, the columns "busbw N GPUs (GB/s)" (CSV busbw_gbs_nN) and then "time N GPUs (µs)"
// (time_us_nN): mean ± sample std over that setting's files. With more than one setting the
// headers and CSV names carry it ("busbw 8 GPUs, tree (GB/s)", busbw_gbs_gpu_tree_n8). A size a
// setting never measured is null.
Table allreduce_table(const std::vector<AllreduceBenchFile>& files);
// The same layout for the files that measured energy (GPU runs with --energy-window > 0): per
// setting and rank count, "above idle N GPUs (nJ/B)" (CSV dynamic_nj_per_byte_nN), "energy N GPUs
// (nJ/B)" (nj_per_byte_nN) and "power N GPUs (W per GPU)" (watts_nN). Files of one rank are left
// out (nothing moves). No rows when no file of several ranks measured energy.
Table allreduce_energy_table(const std::vector<AllreduceBenchFile>& files);

}  // namespace cnnscale::report
