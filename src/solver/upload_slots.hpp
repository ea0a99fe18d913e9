// UploadSlots: the loader buffers whose uploads to the device may still be reading them. Training's
// feed and evaluation both take their batches through it, so both pace their buffers the same way:
// on GPU uploads are asynchronous, and a buffer goes back to the loader only after a synchronisation.
// A loader in byte mode (LoaderOptions::bytes) hands out stored bytes and augmentation draws: they
// go up into device buffers of their own and Backend::decode_bytes writes the net's input from them.
#pragma once
#include <vector>

#include "backend/backend.hpp"
#include "data/loader.hpp"
#include "net/net.hpp"

namespace cnnscale {

class UploadSlots {
 public:
  // `sync_operation` names the synchronisation for the watchdog; it must outlive this object.
  UploadSlots(Backend& backend, Loader& loader, const char* sync_operation);

  // The loader's next batch. When every buffer but one still waits for its upload, synchronises
  // first and releases them. `waited`: host seconds spent waiting for the loader (not the sync).
  const HostBatch& next(double& waited);
  // Queues the uploads of `b` into the net's input and labels; its buffer is kept until it is known
  // complete (on CPU at once: the copy is done when upload returns). `b` may be refilled after it.
  void upload(const HostBatch& b, Net& net);
  // Call after a synchronisation: every pending upload is complete, the buffers go back to the loader.
  void release_all();

 private:
  Backend& backend_;
  Loader& loader_;
  const char* sync_operation_;
  bool async_;
  std::vector<int> uploaded_;
  // Byte mode: the batch's bytes and draws on the device (sized for the loader's largest batch;
  // a smaller last batch uses their front), and the dataset's per-channel scales and offsets.
  Tensor bytes_, draws_, affine_;
};

}  // namespace cnnscale
