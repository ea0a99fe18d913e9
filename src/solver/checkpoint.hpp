// Checkpoints: everything a run needs to continue bit-identically, in one HDF5 file:
//   /weights/<layer>/<param>   f32, the parameter's shape
//   /history/<layer>/<param>   f32, SGD momentum history
//   /state/<layer>/<name>      f32, non-learned state (batch norm running statistics)
//   /solver/{iteration, epoch} int64; /solver/lr f64 (the rate of the last step, informational)
//   /rng/{loader_state (text of std::mt19937_64 operator<<), loader_epoch, loader_position}
//   /config/{run (JSON), network (resolved YAML), solver (JSON of the effective settings)} strings
//   /format "cnnscale-checkpoint-2"
// Every array carries an attribute crc32 (zlib's CRC-32 of its float32 values as stored), and the
// root an attribute meta_crc32 over the other fields; both are checked on load with the values'
// finiteness, so that a flipped bit or a diverged weight is refused naming the file and the array
// instead of being trained on. Format 1 files (before checksums) still load, with a warning:
// refusing them would strand every run interrupted across the upgrade.
// Files are written under a temporary name, flushed to disk and renamed, so a crash never leaves a
// half-written checkpoint under the real name. CheckpointDir keeps only the newest few.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "net/net.hpp"
#include "solver/sgd_solver.hpp"

namespace cnnscale {

struct CheckpointArray {
  std::string name;  // "conv1/weight"
  std::vector<int64_t> shape;
  std::vector<float> values;
};

struct CheckpointMeta {
  int64_t iteration = 0;  // completed iterations: the resumed run starts at this one
  int64_t epoch = 0;      // completed epochs
  double lr = 0.0;
  std::string loader_rng_state;
  int64_t loader_epoch = 0, loader_position = 0;
  // fp16 dynamic loss scaling: the scale, clean steps since its last change, skipped steps so far
  // (checkpoints without them, or of other precisions, hold 1, 0, 0).
  double grad_scale = 1.0;
  int64_t clean_steps = 0, skipped_steps = 0;
  std::string run_config;  // JSON text of the run's options (checked on resume)
  std::string network;     // resolved network YAML
  std::string solver;      // JSON of the effective solver settings (compared on resume; "" in older files)
};

struct CheckpointContents {
  CheckpointMeta meta;
  std::vector<CheckpointArray> weights, history, state;
};

// Atomic write (tmp + fsync + rename). RuntimeError naming the file on any HDF5 or I/O failure;
// the temporary file is removed and an existing file of the same name is left untouched.
void write_checkpoint(const std::string& path, const CheckpointContents& contents);
// What read_checkpoint throws when the file itself is bad, so that removing it loses nothing: not
// an HDF5 file, cut short of the end its HDF5 superblock records, an unknown format, an array
// whose checksum does not match its values or that holds a NaN or an infinity, damaged metadata.
class DamagedCheckpoint : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// ConfigError naming the file if it is missing, not HDF5 or lacks an entry, and naming the file
// and the array ("weights/conv1/weight") when an array's checksum does not match its values or it
// holds a NaN or an infinity; a DamagedCheckpoint for the defects above. Any other failure (an
// I/O error, no file descriptor left, a lock another program holds) is a plain ConfigError: the
// file may well be intact. Files of format 1 (no checksums) load with a warning.
CheckpointContents read_checkpoint(const std::string& path);

// What a look at a checkpoint file found: it reads back whole (the checks of read_checkpoint), it
// is damaged (a DamagedCheckpoint), or it cannot be read now for another reason and may be intact.
struct CheckpointCheck {
  enum class State { intact, damaged, unreadable };
  State state = State::intact;
  std::string why;  // read_checkpoint's error; "" when intact
};
// Files this process wrote or read whole are remembered (by size and modification time) and not
// read again.
CheckpointCheck check_checkpoint(const std::string& path);
// check_checkpoint(path).why: "" when it reads back whole.
std::string checkpoint_problem(const std::string& path);

// Copies the net's weights and state and the solver's history to host (synchronises the backend).
CheckpointContents capture_checkpoint(const Net& net, const SgdSolver& solver, CheckpointMeta meta);
// Loads weights, history and state into the net and solver; every name and shape must match
// (ConfigError naming `file` and the parameter otherwise).
void restore_checkpoint(const CheckpointContents& contents, const std::string& file, Net& net, SgdSolver& solver);
// The weights and state alone, for a net that is not trained further (inference).
void restore_weights(const CheckpointContents& contents, const std::string& file, Net& net);

// A directory of checkpoints named checkpoint-<iteration, 9 digits>.h5, keeping the newest `keep`
// intact ones. Rotation needs room for no more than `keep` files (keep >= 2): before a write the
// oldest are deleted down to keep - 1 intact ones, never fewer than one, so a write that fails (a
// full disk) still leaves the newest intact checkpoint. Damaged files (DamagedCheckpoint: truncated,
// a checksum mismatch) are removed first, with a warning, and never count as the newest; a file
// that cannot be read for another reason (an I/O error) is kept, with a warning, but not counted.
// Checkpoints of a higher iteration than the one written belong to a branch the run abandoned (it
// resumed from an older checkpoint by path, or started over): they are removed, with a warning,
// once the new one is written (so until then, that one write needs room for them too).
class CheckpointDir {
 public:
  explicit CheckpointDir(std::string dir, int keep = 2);
  const std::string& dir() const { return dir_; }
  std::string path_for(int64_t iteration) const;
  // Writes the checkpoint of contents.meta.iteration, deleting damaged, abandoned and old files as
  // above.
  // A failed write is a RuntimeError naming the file; its temporary file is removed.
  std::string save(const CheckpointContents& contents);
  std::vector<std::string> list() const;  // oldest first
  std::optional<std::string> latest() const;

 private:
  std::string dir_;
  int keep_;
};

}  // namespace cnnscale
