// UploadSlots implementation: a list of the loader slots whose uploads were queued since the last
// synchronisation.
#include "solver/upload_slots.hpp"

#include <chrono>
#include <optional>
#include <vector>

#include "core/byte_input.hpp"
#include "core/watchdog.hpp"

namespace cnnscale {

UploadSlots::UploadSlots(Backend& backend, Loader& loader, const char* sync_operation)
    : backend_(backend), loader_(loader), sync_operation_(sync_operation), async_(!backend.device().is_cpu()) {
  const LoaderOptions& lo = loader_.options();
  if (!lo.bytes) return;
  const Dataset& d = loader_.dataset();
  const std::optional<ByteAffine> map = d.byte_affine();
  CNNSCALE_CHECK(map.has_value(), "{}: a byte-mode loader over a dataset not stored as bytes", d.name());
  const int64_t samples = lo.shard_count > 0 ? lo.shard_count : lo.batch;
  std::vector<int64_t> dims = d.sample_shape().dims();
  dims.insert(dims.begin(), samples);
  bytes_ = backend_.alloc(Shape(dims), DType::U8);
  if (lo.augment.any()) draws_ = backend_.alloc(Shape{samples * kDrawInts}, DType::I32);
  const std::vector<float> affine = map->packed();
  affine_ = backend_.alloc(Shape{static_cast<int64_t>(affine.size())});
  backend_.upload(affine.data(), affine_);
  backend_.synchronize();  // `affine` goes out of scope
}

const HostBatch& UploadSlots::next(double& waited) {
  if (async_ && static_cast<int>(uploaded_.size()) >= loader_.options().slots - 1) {
    {
      BlockingOp mark(sync_operation_);
      backend_.synchronize();
    }
    release_all();
  }
  const auto t0 = std::chrono::steady_clock::now();
  const HostBatch& b = loader_.next();
  waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return b;
}

void UploadSlots::upload(const HostBatch& b, Net& net) {
  if (bytes_.defined()) {
    const Tensor bytes = bytes_.slice_batch(0, b.count);
    const Tensor draws = b.draws ? draws_.view(0, Shape{b.count * kDrawInts}) : Tensor();
    backend_.upload(b.bytes, bytes);
    if (b.draws) backend_.upload(b.draws, draws);
    backend_.decode_bytes(bytes, draws, affine_, net.input());
  } else {
    backend_.upload(b.data, net.input());
  }
  backend_.upload(b.labels, net.labels());
  if (async_)
    uploaded_.push_back(b.slot);
  else
    loader_.release(b.slot);
}

void UploadSlots::release_all() {
  for (int slot : uploaded_) loader_.release(slot);
  uploaded_.clear();
}

}  // namespace cnnscale
