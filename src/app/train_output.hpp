// What `cnnscale train` prints on rank 0 (train_output.cpp): the banner before training, the
// closing lines on stderr and the --json line on stdout, from what run_training
// (experiment/train_run.hpp) tells the command's TrainView.
#pragma once
#include "experiment/train_run.hpp"

namespace cnnscale::app {

// The first line: network, data, batch, iterations, solver, device (and the job's ranks).
void print_train_banner(const TrainArgs& a, const TrainInputs& in, const Trainer& trainer, const ParallelRun& par);
// The closing lines on stderr: throughput, phases, memory, CUDA graph (GPU runs), energy, where the
// results are, and how to resume.
void print_train_outcome(const Trainer& trainer, const TrainOutcome& o);
// --json: one line of results on stdout.
void print_train_json(const TrainArgs& a, const TrainInputs& in, const Trainer& trainer, const ParallelRun& par,
                      const TrainOutcome& o);

}  // namespace cnnscale::app
