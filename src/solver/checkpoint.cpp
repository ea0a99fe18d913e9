// Checkpoint files through core/hdf5_file (every HDF5 call checked, a failure one Error naming the
// file and the operation), published through io/atomic_file; the newest few kept per folder.
#include "solver/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <regex>

#include "core/hdf5_file.hpp"
#include "core/log.hpp"
#include "io/atomic_file.hpp"

namespace cnnscale {

namespace {

namespace fs = std::filesystem;

constexpr const char* kCheckpointFormat = "cnnscale-checkpoint-2";
constexpr const char* kUncheckedFormat = "cnnscale-checkpoint-1";  // before checksums

// zlib's CRC-32 of the values' bytes (little-endian float32 on every machine cnnscale runs on,
// the same bytes HDF5 stores); zlib takes lengths as uInt, so large arrays go in pieces.
int64_t checksum(const std::vector<float>& values) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* bytes = reinterpret_cast<const Bytef*>(values.data());
  size_t left = values.size() * sizeof(float);
  while (left > 0) {
    const uInt n = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
    crc = crc32(crc, bytes, n);
    bytes += n;
    left -= n;
  }
  return static_cast<int64_t>(crc);
}

template <typename... Args>
[[noreturn]] void throw_damaged(fmt::format_string<Args...> f, Args&&... args) {
  throw DamagedCheckpoint(fmt::format(f, std::forward<Args>(args)...));
}

void write_array(h5::Writer& w, const std::string& group, const CheckpointArray& a) {
  int64_t n = 1;
  for (int64_t d : a.shape) n *= d;
  CNNSCALE_CHECK(n == static_cast<int64_t>(a.values.size()), "{}: shape holds {} values, got {}", a.name, n,
                 a.values.size());
  const std::string name = group + "/" + a.name;
  h5::Handle ds = w.dataset(w.root(), name, std::vector<hsize_t>(a.shape.begin(), a.shape.end()), H5T_IEEE_F32LE,
                            H5T_NATIVE_FLOAT, a.values.data());
  w.attr_i64(ds.get(), "crc32", checksum(a.values));
}

// CRC-32 of every field of the metadata, in a fixed order with lengths (so that no two different
// sets of fields give the same bytes): a flipped bit in the iteration, the loader's position or the
// configuration would otherwise resume silently somewhere else.
int64_t meta_checksum(const CheckpointMeta& m) {
  std::string bytes;
  const auto put = [&](const auto& v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof v); };
  const auto put_text = [&](const std::string& t) {
    put(static_cast<uint64_t>(t.size()));
    bytes += t;
  };
  put(m.iteration), put(m.epoch), put(m.lr), put(m.grad_scale), put(m.clean_steps), put(m.skipped_steps);
  put(m.loader_epoch), put(m.loader_position);
  put_text(m.loader_rng_state), put_text(m.run_config), put_text(m.network), put_text(m.solver);
  return static_cast<int64_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
}

void write_contents(h5::Writer& w, const CheckpointContents& contents) {
  const hid_t root = w.root();
  for (const auto& a : contents.weights) write_array(w, "weights", a);
  for (const auto& a : contents.history) write_array(w, "history", a);
  for (const auto& a : contents.state) write_array(w, "state", a);
  const CheckpointMeta& m = contents.meta;
  w.scalar_i64(root, "solver/iteration", m.iteration);
  w.scalar_i64(root, "solver/epoch", m.epoch);
  w.scalar_f64(root, "solver/lr", m.lr);
  w.scalar_f64(root, "solver/grad_scale", m.grad_scale);
  w.scalar_i64(root, "solver/clean_steps", m.clean_steps);
  w.scalar_i64(root, "solver/skipped_steps", m.skipped_steps);
  w.fixed_text(root, "rng/loader_state", m.loader_rng_state);
  w.scalar_i64(root, "rng/loader_epoch", m.loader_epoch);
  w.scalar_i64(root, "rng/loader_position", m.loader_position);
  w.fixed_text(root, "config/run", m.run_config);
  w.fixed_text(root, "config/network", m.network);
  w.fixed_text(root, "config/solver", m.solver);
  w.fixed_text(root, "format", kCheckpointFormat);
  w.attr_i64(root, "meta_crc32", meta_checksum(m));
}

CheckpointArray read_array(const h5::Reader& r, const std::string& group, const std::string& name, bool checked) {
  CheckpointArray a;
  a.name = name;
  const std::string full = group + "/" + name;
  a.values = r.f32(r.root(), full, a.shape);
  if (checked) {
    std::vector<hsize_t> dims;
    h5::Handle ds = r.dataset(r.root(), full, dims);
    if (!r.has_attr(ds.get(), "crc32"))
      throw_damaged("{}: checkpoint array {} has no checksum (crc32)", r.path(), full);
    const int64_t stored = r.attr_i64(ds.get(), "crc32"), actual = checksum(a.values);
    if (stored != actual)
      throw_damaged("{}: checkpoint array {} is damaged: its CRC-32 is {:08x}, {:08x} was written", r.path(), full,
                    actual, stored);
  }
  for (size_t i = 0; i < a.values.size(); ++i)
    if (!std::isfinite(a.values[i]))
      throw_damaged(
          "{}: checkpoint array {} holds {} at index {}: refused (the run that wrote it had diverged, or the "
          "file was altered)",
          r.path(), full, a.values[i], i);
  return a;
}

// Files known to read back whole: path -> (size, modification time) when it was checked.
struct Verified {
  std::mutex mutex;
  std::map<std::string, std::pair<uintmax_t, fs::file_time_type>> files;
};
Verified& verified() {
  static Verified v;
  return v;
}
std::optional<std::pair<uintmax_t, fs::file_time_type>> stamp(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return std::nullopt;
  const auto time = fs::last_write_time(path, ec);
  if (ec) return std::nullopt;
  return std::make_pair(size, time);
}
void remember_intact(const std::string& path) {
  const auto s = stamp(path);
  std::lock_guard<std::mutex> lock(verified().mutex);
  if (s) verified().files[path] = *s;
}

}  // namespace

void write_checkpoint(const std::string& path, const CheckpointContents& contents) {
  int storage_errno = 0;
  try {
    write_atomically_with(path, [&](const std::string& tmp) {
      h5::Writer w(tmp, "checkpoint file");
      try {
        write_contents(w, contents);
        w.close();
      } catch (const Error&) {
        // HDF5 says which call failed, not why; the system's reason is still in errno here, before
        // the writer's handles are closed. Only reasons of the storage count (a stale errno of
        // some earlier harmless call must not be blamed).
        if (errno == ENOSPC || errno == EFBIG || errno == EDQUOT || errno == EIO || errno == EROFS)
          storage_errno = errno;
        throw;
      }
    });
  } catch (const RuntimeError& e) {
    // One line naming the checkpoint (not its temporary name, which is gone) and the reason.
    const std::string reason = storage_errno ? std::strerror(storage_errno) : "";
    const std::string what = e.what();
    if (reason.empty() || what.find(reason) != std::string::npos)
      throw_runtime("{}: cannot write checkpoint: {}", path, what);
    throw_runtime("{}: cannot write checkpoint: {} ({})", path, reason, what);
  }
}

namespace {

// Positive evidence, from plain reads, that `path` is not a whole HDF5 file: it does not begin with
// HDF5's signature, or it is shorter than the end of file its superblock records (cut short by a
// full disk or a copy that died; HDF5 refuses such a file for the same reason). "" when there is
// none or the file cannot be read: a file HDF5 failed on for another reason (an I/O error, no file
// descriptor left, a lock) may be intact, and must not be deleted as damaged.
std::string damage_evidence(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return "";
  unsigned char b[64] = {};
  size_t n = 0;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0;
  while (ok && n < sizeof b) {
    const ssize_t got = ::pread(fd, b + n, sizeof b - n, static_cast<off_t>(n));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) ok = false;
    if (got <= 0) break;
    n += static_cast<size_t>(got);
  }
  ::close(fd);
  if (!ok) return "";
  const auto size = static_cast<uint64_t>(st.st_size);
  static const unsigned char signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  if (n < sizeof signature || std::memcmp(b, signature, sizeof signature) != 0)
    return "it does not begin with HDF5's signature";
  // Superblock versions 0 and 1: offset size at byte 13, base address at 24 (28 in version 1);
  // versions 2 and 3: offset size at byte 9, base address at 12. The end-of-file address follows
  // two addresses after the base address.
  const unsigned version = b[8];
  if (version > 3 || n < 14) return "";
  const size_t width = version <= 1 ? b[13] : b[9];
  const size_t at_base = version == 0 ? 24 : (version == 1 ? 28 : 12);
  if (width != 4 && width != 8) return "";
  const size_t at_eof = at_base + 2 * width;
  if (at_eof + width > n) return n == size ? "it ends inside its HDF5 superblock" : "";
  const auto address = [&](size_t at) {
    uint64_t v = 0;
    for (size_t i = width; i-- > 0;) v = v << 8 | b[at + i];
    return v;
  };
  const uint64_t base = address(at_base), eof = address(at_eof);
  if (base > UINT64_MAX - eof || base + eof <= size) return "";
  return fmt::format("it is cut short: {} bytes of the {} its HDF5 superblock records", size, base + eof);
}

CheckpointContents read_contents(const std::string& path) {
  h5::Reader r(path, "checkpoint");
  const hid_t root = r.root();
  const std::string format = r.fixed_text(root, "format");
  if (format != kCheckpointFormat && format != kUncheckedFormat)
    throw_damaged("{}: unknown checkpoint format '{}'", path, format);
  const bool checked = format == kCheckpointFormat;
  CheckpointContents c;
  for (const auto& n : r.datasets(root, "weights")) c.weights.push_back(read_array(r, "weights", n, checked));
  for (const auto& n : r.datasets(root, "history")) c.history.push_back(read_array(r, "history", n, checked));
  if (r.exists(root, "state"))
    for (const auto& n : r.datasets(root, "state")) c.state.push_back(read_array(r, "state", n, checked));
  CheckpointMeta& m = c.meta;
  m.iteration = r.scalar_i64(root, "solver/iteration");
  m.epoch = r.scalar_i64(root, "solver/epoch");
  m.lr = r.scalar_f64(root, "solver/lr");
  if (r.exists(root, "solver/grad_scale")) {  // written since fp16 training; older files had no scale
    m.grad_scale = r.scalar_f64(root, "solver/grad_scale");
    m.clean_steps = r.scalar_i64(root, "solver/clean_steps");
    m.skipped_steps = r.scalar_i64(root, "solver/skipped_steps");
  }
  m.loader_rng_state = r.fixed_text(root, "rng/loader_state");
  m.loader_epoch = r.scalar_i64(root, "rng/loader_epoch");
  m.loader_position = r.scalar_i64(root, "rng/loader_position");
  m.run_config = r.fixed_text(root, "config/run");
  m.network = r.fixed_text(root, "config/network");
  if (r.exists(root, "config/solver")) m.solver = r.fixed_text(root, "config/solver");
  if (checked && r.attr_i64(root, "meta_crc32") != meta_checksum(m))
    throw_damaged(
        "{}: checkpoint metadata (solver/, rng/, config/) is damaged: its CRC-32 does not match the one "
        "written",
        path);
  if (!checked) log::warn("{}: checkpoint of format 1 has no checksums: its arrays are loaded unverified", path);
  remember_intact(path);
  return c;
}

}  // namespace

CheckpointContents read_checkpoint(const std::string& path) {
  try {
    return read_contents(path);
  } catch (const DamagedCheckpoint&) {
    throw;
  } catch (const ConfigError& e) {
    // HDF5's failure does not say whether the file or the reading of it is at fault.
    const std::string evidence = damage_evidence(path);
    if (evidence.empty()) throw;
    throw DamagedCheckpoint(fmt::format("{} ({})", e.what(), evidence));
  }
}

CheckpointCheck check_checkpoint(const std::string& path) {
  {
    const auto s = stamp(path);
    std::lock_guard<std::mutex> lock(verified().mutex);
    auto it = verified().files.find(path);
    if (s && it != verified().files.end() && it->second == *s) return {};
  }
  try {
    read_checkpoint(path);
    return {};
  } catch (const DamagedCheckpoint& e) {
    return {CheckpointCheck::State::damaged, e.what()};
  } catch (const Error& e) {
    return {CheckpointCheck::State::unreadable, e.what()};
  }
}

std::string checkpoint_problem(const std::string& path) {
  return check_checkpoint(path).why;
}

namespace {

CheckpointArray download_array(Backend& backend, const std::string& name, const Tensor& t) {
  CheckpointArray a;
  a.name = name;
  a.shape = t.shape().dims();
  a.values.resize(static_cast<size_t>(t.numel()));
  backend.download(t, a.values.data());
  return a;
}

// Uploads `arrays` into `targets` (name -> tensor); both sets of names must be equal.
void upload_arrays(Backend& backend, const std::vector<CheckpointArray>& arrays,
                   const std::vector<std::pair<std::string, Tensor>>& targets, const std::string& file,
                   const std::string& kind) {
  std::map<std::string, const CheckpointArray*> by_name;
  for (const auto& a : arrays) by_name[a.name] = &a;
  for (const auto& [name, tensor] : targets) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw_config("{}: checkpoint has no {} for '{}' of the network", file, kind, name);
    Shape s(it->second->shape);
    if (!(s == tensor.shape()))
      throw_config("{}: {} '{}' has shape {} in the checkpoint but {} in the network", file, kind, name, s.to_string(),
                   tensor.shape().to_string());
    backend.upload(it->second->values.data(), tensor);
    by_name.erase(it);
  }
  if (!by_name.empty())
    throw_config("{}: checkpoint has {} '{}' that the network lacks", file, kind, by_name.begin()->first);
}

}  // namespace

CheckpointContents capture_checkpoint(const Net& net, const SgdSolver& solver, CheckpointMeta meta) {
  Backend& backend = net.backend();
  CheckpointContents c;
  c.meta = std::move(meta);
  const auto& params = solver.params();
  for (size_t i = 0; i < params.size(); ++i) {
    c.weights.push_back(download_array(backend, params[i].name, params[i].param->master));
    c.history.push_back(download_array(backend, params[i].name, solver.history()[i]));
  }
  for (const auto& [name, tensor] : net.state()) c.state.push_back(download_array(backend, name, tensor));
  return c;
}

void restore_checkpoint(const CheckpointContents& contents, const std::string& file, Net& net, SgdSolver& solver) {
  Backend& backend = net.backend();
  std::vector<std::pair<std::string, Tensor>> weights, history;
  for (size_t i = 0; i < solver.params().size(); ++i) {
    weights.emplace_back(solver.params()[i].name, solver.params()[i].param->master);
    history.emplace_back(solver.params()[i].name, solver.history()[i]);
  }
  upload_arrays(backend, contents.weights, weights, file, "weights");
  upload_arrays(backend, contents.history, history, file, "momentum history");
  upload_arrays(backend, contents.state, net.state(), file, "state");
  // The host arrays die with `contents`: make sure the uploads have consumed them.
  backend.synchronize();
}

void restore_weights(const CheckpointContents& contents, const std::string& file, Net& net) {
  Backend& backend = net.backend();
  std::vector<std::pair<std::string, Tensor>> weights;
  for (const NamedParam& np : named_params(net)) weights.emplace_back(np.name, np.param->master);
  upload_arrays(backend, contents.weights, weights, file, "weights");
  upload_arrays(backend, contents.state, net.state(), file, "state");
  backend.synchronize();  // the host arrays die with `contents`
}

CheckpointDir::CheckpointDir(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  CNNSCALE_CHECK(keep_ >= 1, "keep must be >= 1, got {}", keep_);
}

std::string CheckpointDir::path_for(int64_t iteration) const {
  return (fs::path(dir_) / fmt::format("checkpoint-{:09d}.h5", iteration)).string();
}

std::vector<std::string> CheckpointDir::list() const {
  static const std::regex pattern(R"(checkpoint-(\d+)\.h5)");
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return {};
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    std::smatch m;
    std::string name = entry.path().filename().string();
    if (entry.is_regular_file(ec) && std::regex_match(name, m, pattern))
      found.emplace_back(std::stoll(m[1].str()), entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::optional<std::string> CheckpointDir::latest() const {
  auto all = list();
  if (all.empty()) return std::nullopt;
  return all.back();
}

namespace {

int64_t iteration_of(const std::string& file) {
  return std::stoll(fs::path(file).stem().string().substr(std::string("checkpoint-").size()));
}

// Deletes the oldest of `intact` (oldest first) until `left` remain.
void remove_oldest(std::vector<std::string>& intact, size_t left) {
  while (intact.size() > left) {
    std::error_code ec;
    fs::remove(intact.front(), ec);
    if (ec) log::warn("{}: cannot remove an old checkpoint: {}", intact.front(), ec.message());
    intact.erase(intact.begin());
  }
}

}  // namespace

std::string CheckpointDir::save(const CheckpointContents& contents) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw_runtime("{}: cannot create checkpoint directory: {}", dir_, ec.message());
  const std::string path = path_for(contents.meta.iteration);
  // What is there already, oldest first; a file of this iteration is replaced by the rename and
  // stays until then. A damaged file is never kept in place of an intact one: it goes first. One
  // that cannot be read now (an I/O error) may be intact: it stays, but is not counted as intact.
  std::vector<std::string> intact, abandoned;
  for (const std::string& f : list()) {
    if (f == path) continue;
    const CheckpointCheck check = check_checkpoint(f);
    if (check.state == CheckpointCheck::State::damaged) {
      log::warn("removing damaged checkpoint {} ({})", f, check.why);
      fs::remove(f, ec);
    } else if (iteration_of(f) > contents.meta.iteration) {
      abandoned.push_back(f);
    } else if (check.state == CheckpointCheck::State::intact) {
      intact.push_back(f);
    } else {
      log::warn("cannot read checkpoint {} now ({}): kept, as it may be intact, but not counted among the {} kept", f,
                check.why, keep_);
    }
  }
  // Room for the new file: keep - 1 intact ones stay while it is written, and at least one, so a
  // failed write leaves the newest intact checkpoint and the rotation never needs room for more
  // than `keep` files (keep 1 must write before deleting: its one file is all there is).
  remove_oldest(intact, static_cast<size_t>(std::max(keep_ - 1, 1)));
  write_checkpoint(path, contents);
  remember_intact(path);
  // Newer ones are the future of a branch this run left: --resume auto would take them after a
  // stop and continue that instead. Only now, so that a failed write leaves the folder as it was.
  for (const std::string& f : abandoned) {
    log::warn(
        "removing checkpoint {}: newer than {}, just written, it belongs to a branch this run abandoned (it "
        "resumed from an older checkpoint or started over)",
        f, path);
    fs::remove(f, ec);
    if (ec) log::warn("{}: cannot remove an abandoned checkpoint: {}", f, ec.message());
  }
  intact.push_back(path);
  remove_oldest(intact, static_cast<size_t>(keep_));
  return path;
}

}  // namespace cnnscale
