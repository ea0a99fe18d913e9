// What `cnnscale bench allreduce` does, below the command: its settings checked and made into the
// bench's configuration, the job (every rank of the launch; on GPUs each bound to its GPU and NCCL
// connected), the sweep (parallel/allreduce_bench.hpp), and rank 0's result, as --json prints it
// and as the result folder ROOT/<experiment>/allreduce/<device>-n<ranks>-<algo>-<time>/ saves it
// for `report`. The command parses and prints.
#pragma once
#include <cstdint>
#include <string>

#include "io/allreduce_results.hpp"
#include "io/setting_values.hpp"
#include "parallel/allreduce_bench.hpp"

namespace cnnscale {

// The allreduce bench's settings (experiment/command_settings.cpp declares each, its flag and
// default) and where its result goes.
struct AllreduceBenchRequest {
  std::string min_bytes = "8", max_bytes = "1G";
  int64_t step_factor = 2;
  int warmup = 5, iters = 20, repeats = 5;
  std::string device = "gpu";
  std::string algo = "ring";
  int max_ctas = 0;
  std::string cta_policy = "default";
  std::string priority = "high";
  std::string issue = "graph";
  std::string dtype = "fp32";
  bool check = false;
  double timeout = 300.0;
  double energy_window = 2.0;
  double energy_settle = 0.5;
  // Which of these the command line gave: a GPU-only setting left at its default is no error on
  // --device cpu, one given is.
  bool algo_given = false, issue_given = false, energy_window_given = false, experiment_given = false;
  std::string results_root;  // "": no results folder
  std::string experiment = "bench";
  bool no_results = false;
  SettingValues settings;  // every entry of the bench's table as the run was given it (the result records it)
};

// The bench's configuration from `r`; ConfigError for what does not go together (a GPU-only
// setting with --device cpu, --experiment without --results) or a bad configuration for a job of
// `ranks` ranks, before any rank opens a device.
AllreduceBenchConfig check_allreduce_bench_request(const AllreduceBenchRequest& r, int ranks = 1);

// The element type's name in nccl-tests' tables (its -d values): float, bfloat16, half.
std::string nccl_tests_type(const std::string& dtype);

// The --json object, also the results file's summary (io/allreduce_results.hpp, results/README.md),
// but provenance and settings (the run's).
AllreduceResult allreduce_result(const AllreduceBenchResult& r, bool checked, const std::string& utc_time,
                                 const std::string& host);

struct AllreduceBenchRun {
  bool rank0 = false;  // only rank 0's run has a summary and a folder
  bool checked = false;
  AllreduceBenchResult bench;  // every rank's: the same rows
  AllreduceResult summary;     // rank 0's, provenance and settings included
  int64_t wrong = 0;           // elements summed wrongly (--check), every rank's count
  std::string dir;             // the results folder ("": none)
  std::string utc_stamp;       // the start, in the result folder's name
};

// Runs the bench as the job of its launch (every rank of an MPI launch, -np 1 too; one rank
// without). An unwritable results folder is rank 0's ConfigError before the first collective; the
// other ranks wait for the launcher to end them.
AllreduceBenchRun run_allreduce_bench_job(const AllreduceBenchRequest& r);

// Rank 0 saves the run's result folder, unless there is no results folder or a sum was wrong (the
// report would average wrong sums with good ones); returns its path ("" when none).
std::string save_allreduce_bench(const AllreduceBenchRun& run);

}  // namespace cnnscale
