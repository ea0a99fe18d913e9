// Evaluator: the test pass, its shards and the reduction of its sums over ranks.
#include "solver/evaluator.hpp"

#include <algorithm>
#include <chrono>

#include "core/log.hpp"
#include "core/stop_signal.hpp"
#include "core/watchdog.hpp"
#include "data/loader.hpp"
#include "solver/upload_slots.hpp"

namespace cnnscale {

Evaluator::Evaluator(Backend& backend, Net& net, const std::string& net_name, std::shared_ptr<const Dataset> test,
                     const DataParallel& parallel, int64_t test_batch, bool bytes)
    : backend_(backend), net_(net), test_(std::move(test)), parallel_(parallel), test_batch_(test_batch), bytes_(bytes) {
  CNNSCALE_CHECK(test_ != nullptr, "no test set");
  for (Layer* layer : net_.layers())
    if (layer->type() == "SoftmaxWithLoss" && !layer->bottoms().empty()) scores_blob_ = layer->bottoms()[0];
  if (scores_blob_.empty())
    throw_config("network '{}' has no SoftmaxWithLoss layer: cannot evaluate top-1/top-5", net_name);
}

EvalResult Evaluator::evaluate(int64_t iteration, bool* stopped) {
  const auto t0 = std::chrono::steady_clock::now();
  EvalResult r;
  r.top5_k = static_cast<int>(std::min<int64_t>(5, test_->classes()));
  const DataParallel& dp = parallel_;

  // Data parallel: each rank evaluates a contiguous shard; the sums are reduced below.
  std::shared_ptr<const Dataset> test = test_;
  if (dp.comm && dp.size() > 1) {
    const int64_t size = test_->size(), ranks = dp.size();
    const int64_t begin = size * dp.rank / ranks, end = size * (dp.rank + 1) / ranks;
    test = end > begin ? std::make_shared<SubsetDataset>(test_, end - begin, begin) : nullptr;
  }

  LoaderOptions lo;
  lo.batch = test_batch_;
  lo.shuffle = false;
  lo.drop_last = false;  // every test sample counts; the last partial batch runs at its own size
  lo.slots = 4;
  lo.bytes = bytes_;
  std::unique_ptr<Loader> loader;
  std::unique_ptr<UploadSlots> slots;
  if (test) {
    loader = std::make_unique<Loader>(test, lo, [this](size_t bytes) { return backend_.alloc_host(bytes); });
    slots = std::make_unique<UploadSlots>(backend_, *loader, "host sync (test input buffers)");
  }

  Tensor topk = backend_.alloc(Shape{2});
  Tensor sums = backend_.alloc(Shape{2});  // per-sample sums of top-1 and top-k hits
  Tensor loss_sum = backend_.alloc(Shape{1});
  const int64_t train_batch = net_.batch();
  const int64_t batches = loader ? loader->batches_per_epoch() : 0;
  // A stop is checked per batch on each rank alone: the ranks' shards may differ by a batch, so a
  // vote per batch could not pair up. The one reduction below tells every rank whether any stopped.
  bool stopped_here = false;
  for (int64_t i = 0; i < batches; ++i) {
    if (stopped && stop_signal() != 0) {
      stopped_here = true;
      break;
    }
    double waited = 0;
    const HostBatch& b = slots->next(waited);
    const int64_t count = b.count;  // `b` may be refilled as soon as it is released
    if (net_.batch() != count) net_.reshape(count);
    slots->upload(b, net_);
    net_.forward(Phase::Test, static_cast<uint64_t>(iteration));
    backend_.accuracy_topk(net_.blob(scores_blob_), net_.labels(), {1, r.top5_k}, topk);
    // The accuracies are per-batch fractions: weight them by the batch size.
    backend_.axpby(static_cast<float>(count), topk, 1.0f, sums);
    backend_.axpby(static_cast<float>(count), net_.loss(), 1.0f, loss_sum);
    r.samples += count;
  }
  float host_sums[2], host_loss;
  {
    BlockingOp mark("download of test results");
    backend_.download(sums, host_sums);
    backend_.download(loss_sum, &host_loss);
  }
  if (slots) slots->release_all();
  if (net_.batch() != train_batch) net_.reshape(train_batch);
  if (dp.comm && dp.size() > 1) {
    // Sample counts travel as floats: exact below 2^24 samples per test set.
    CNNSCALE_CHECK(test_->size() < (int64_t{1} << 24), "test set of {} samples", test_->size());
    std::vector<float> job = allreduce_sum_host(
        *dp.comm, backend_,
        {host_sums[0], host_sums[1], host_loss, static_cast<float>(r.samples), stopped_here ? 1.0f : 0.0f});
    host_sums[0] = job[0];
    host_sums[1] = job[1];
    host_loss = job[2];
    r.samples = static_cast<int64_t>(job[3]);
    stopped_here = job[4] > 0;
  }
  if (stopped) *stopped = stopped_here;
  r.top1 = host_sums[0] / static_cast<double>(r.samples);
  r.top5 = host_sums[1] / static_cast<double>(r.samples);
  r.loss = host_loss / static_cast<double>(r.samples);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace cnnscale
