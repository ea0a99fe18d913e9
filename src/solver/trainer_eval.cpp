// Trainer, evaluation: top-1/top-k accuracy and mean loss on the test set (each rank a contiguous
// shard, reduced over ranks), batches taken through the same upload pacing as training's feed.
#include <algorithm>

#include "core/log.hpp"
#include "core/stop_signal.hpp"
#include "core/watchdog.hpp"
#include "solver/trainer.hpp"
#include "solver/upload_slots.hpp"

namespace cnnscale {

EvalResult Trainer::evaluate(int64_t iteration, bool* stopped) {
  CNNSCALE_CHECK(test_ != nullptr, "no test set");
  const auto t0 = Clock::now();
  EvalResult r;
  r.top5_k = static_cast<int>(std::min<int64_t>(5, test_->classes()));
  const DataParallel& dp = job_.parallel;

  // Data parallel: each rank evaluates a contiguous shard; the sums are reduced below.
  std::shared_ptr<const Dataset> test = test_;
  if (dp.comm && dp.size() > 1) {
    const int64_t size = test_->size(), ranks = dp.size();
    const int64_t begin = size * dp.rank / ranks, end = size * (dp.rank + 1) / ranks;
    test = end > begin ? std::make_shared<SubsetDataset>(test_, end - begin, begin) : nullptr;
  }

  LoaderOptions lo;
  lo.batch = options_.test_batch;
  lo.shuffle = false;
  lo.drop_last = false;  // every test sample counts; the last partial batch runs at its own size
  lo.slots = 4;
  lo.bytes = decodes_on_device(*test_);
  std::unique_ptr<Loader> loader;
  std::unique_ptr<UploadSlots> slots;
  if (test) {
    loader = std::make_unique<Loader>(test, lo, [this](size_t bytes) { return backend_.alloc_host(bytes); });
    slots = std::make_unique<UploadSlots>(backend_, *loader, "host sync (test input buffers)");
  }

  Tensor topk = backend_.alloc(Shape{2});
  Tensor sums = backend_.alloc(Shape{2});  // per-sample sums of top-1 and top-k hits
  Tensor loss_sum = backend_.alloc(Shape{1});
  const int64_t train_batch = net_->batch();
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
    if (net_->batch() != count) net_->reshape(count);
    slots->upload(b, *net_);
    net_->forward(Phase::Test, static_cast<uint64_t>(iteration));
    backend_.accuracy_topk(net_->blob(scores_blob_), net_->labels(), {1, r.top5_k}, topk);
    // The accuracies are per-batch fractions: weight them by the batch size.
    backend_.axpby(static_cast<float>(count), topk, 1.0f, sums);
    backend_.axpby(static_cast<float>(count), net_->loss(), 1.0f, loss_sum);
    r.samples += count;
  }
  float host_sums[2], host_loss;
  {
    BlockingOp mark("download of test results");
    backend_.download(sums, host_sums);
    backend_.download(loss_sum, &host_loss);
  }
  if (slots) slots->release_all();
  if (net_->batch() != train_batch) net_->reshape(train_batch);
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
  r.seconds = seconds_since(t0);
  return r;
}

}  // namespace cnnscale
