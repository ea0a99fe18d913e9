// UploadSlots implementation: a list of the loader slots whose uploads were queued since the last
// synchronisation.
#include "solver/upload_slots.hpp"

#include <chrono>

#include "core/watchdog.hpp"

namespace cnnscale {

UploadSlots::UploadSlots(Backend& backend, Loader& loader, const char* sync_operation)
    : backend_(backend), loader_(loader), sync_operation_(sync_operation), async_(!backend.device().is_cpu()) {}

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
  backend_.upload(b.data, net.input());
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
