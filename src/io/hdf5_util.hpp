// Small HDF5 C API helpers shared by the checkpoint and results files: an owning handle, silencing
// HDF5's own error printing (every call is checked by the caller instead), and fsync for the
// tmp + rename protocol.
#pragma once
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <string>

#include "core/error.hpp"

namespace cnnscale::h5 {

inline void silence_hdf5() {
  static bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

// Owns an HDF5 identifier and closes it with the matching function.
class H5Handle {
 public:
  H5Handle(hid_t id, herr_t (*closer)(hid_t)) : id_(id), closer_(closer) {}
  ~H5Handle() {
    if (id_ >= 0) closer_(id_);
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  H5Handle(H5Handle&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = -1; }
  hid_t get() const { return id_; }
  // Closes now and reports failure (closing a file flushes it).
  herr_t close() {
    herr_t r = id_ >= 0 ? closer_(id_) : 0;
    id_ = -1;
    return r;
  }

 private:
  hid_t id_;
  herr_t (*closer_)(hid_t);
};

// Flushes a file (or, best effort, a directory entry) to disk so that a rename after it publishes
// complete contents even across a power loss.
inline void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) {
    if (directory) return;  // best effort for the directory entry
    throw_runtime("{}: cannot reopen to flush to disk", path);
  }
  int r = ::fsync(fd);
  ::close(fd);
  if (r != 0 && !directory) throw_runtime("{}: fsync failed", path);
}

}  // namespace cnnscale::h5
