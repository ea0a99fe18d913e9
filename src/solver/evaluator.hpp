// Evaluator: top-1/top-k accuracy and mean loss of a training net on the test set, between
// training steps. Each rank of a data-parallel job evaluates a contiguous shard and the sums are
// reduced over ranks; batches go up through the same upload pacing as training's feed.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "data/dataset.hpp"
#include "net/net.hpp"
#include "parallel/data_parallel.hpp"

namespace cnnscale {

struct EvalResult {
  int64_t samples = 0;
  double top1 = 0, top5 = 0, loss = 0;  // fractions in [0, 1]; loss averaged per sample
  int top5_k = 5;                       // min(5, classes)
  double seconds = 0;
};

class Evaluator {
 public:
  // `net` scores its input at the input of its SoftmaxWithLoss layer: ConfigError naming `net_name`
  // without one. `parallel`: the job's ranks (read at each evaluation). `test_batch`: samples per
  // batch on this rank; `bytes`: the batches go up as bytes, decoded on the device.
  Evaluator(Backend& backend, Net& net, const std::string& net_name, std::shared_ptr<const Dataset> test,
            const DataParallel& parallel, int64_t test_batch, bool bytes);

  // With `stopped`: a stop signal on any rank ends the pass early and sets *stopped on every rank
  // (the result is then partial); without, the pass always runs to the end. The net is back at
  // its batch size afterwards.
  EvalResult evaluate(int64_t iteration, bool* stopped = nullptr);

 private:
  Backend& backend_;
  Net& net_;
  std::shared_ptr<const Dataset> test_;
  const DataParallel& parallel_;
  int64_t test_batch_;
  bool bytes_;
  std::string scores_blob_;  // input of the loss layer: class scores for top-k accuracy
};

}  // namespace cnnscale
