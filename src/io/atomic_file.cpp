// See atomic_file.hpp.
#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <set>
#include <system_error>

#include "core/error.hpp"
#include "core/host_name.hpp"
#include "io/safe_open.hpp"

namespace cnnscale {

namespace fs = std::filesystem;

void write_all(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw_runtime("{}: write failed: {}", path, std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

namespace {

const std::string& this_host() {
  static const std::string host = [] {
    std::string h = host_name();
    // A host name never holds '/', but the temporary name must stay one path component.
    for (char& c : h)
      if (c == '/') c = '_';
    return h;
  }();
  return host;
}

// Ten minutes: far past a stall of a live writer (a slow NFS server, a swapped process: its file's
// mtime moves with every write), while a killed run's leftover is still cleared by a later run.
constexpr std::chrono::seconds kStaleTempAge{600};

// The pid in `name` when it is "." <anything> "." <this host> "." <digits> ".tmp"; 0 otherwise.
pid_t temp_file_pid(const std::string& name) {
  const std::string host_part = "." + this_host() + ".";
  if (name.size() < 2 || name[0] != '.' || !name.ends_with(".tmp")) return 0;
  const std::string stem = name.substr(0, name.size() - 4);
  const size_t dot = stem.rfind('.');
  if (dot == std::string::npos || dot + 1 == stem.size() || dot + 1 + 9 < stem.size()) return 0;
  const std::string digits = stem.substr(dot + 1);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  const std::string before = stem.substr(0, dot + 1);  // ends with "."
  if (before.size() <= host_part.size() + 1 || !before.ends_with(host_part)) return 0;
  return static_cast<pid_t>(std::stol(digits));
}

// Writes into `dir` first clear the temporary files that writers killed there left (once per folder
// and process: the names of a live process are never among them, so one look is enough).
void clear_dead_temps_once(const fs::path& dir) {
  static std::mutex mutex;
  static std::set<std::string> seen;
  const std::string key = dir.empty() ? "." : dir.string();
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!seen.insert(key).second) return;
  }
  remove_dead_temp_files(key);
}

// Removes `path` (RuntimeError naming it on failure) unless it was never there.
void unlink_or_throw(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    throw_runtime("{}: cannot remove: {}", path, std::strerror(errno));
}

}  // namespace

std::string temp_path_for(const std::string& path) {
  const fs::path p(path);
  return (p.parent_path() / fmt::format(".{}.{}.{}.tmp", p.filename().string(), this_host(), ::getpid())).string();
}

int remove_dead_temp_files(const std::string& dir) {
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const pid_t pid = temp_file_pid(name);
    // kill(pid, 0) fails with ESRCH only when no process has that pid in this PID namespace; EPERM
    // means a live process of another user: its file stays.
    if (pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    // Containers of one host name may share the folder, each with its own pids: ESRCH then says
    // nothing about a writer in the other one. A live writer writes its temporary file from
    // creation to rename without pause, so one untouched for kStaleTempAge is a dead writer's.
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || ::time(nullptr) - st.st_mtime < kStaleTempAge.count()) continue;
    if (::unlink(it->path().c_str()) == 0) ++removed;
  }
  return removed;
}

void write_synced_file(const std::string& path, const std::string& content, mode_t mode) {
  write_synced_fd(open_no_follow(path, O_WRONLY | O_CREAT | O_TRUNC, mode), path, content);
}

void write_synced_fd(int fd, const std::string& path, const std::string& content) {
  try {
    write_all(fd, content, path);
    if (::fsync(fd) != 0) throw_runtime("{}: fsync failed: {}", path, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(path.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(path.c_str());
    throw_runtime("{}: close failed: {}", path, std::strerror(errno));
  }
}

void write_file_atomically(const std::string& path, const std::string& content, mode_t mode) {
  clear_dead_temps_once(fs::path(path).parent_path());
  const std::string tmp = temp_path_for(path);
  write_synced_fd(create_exclusive(tmp, mode), tmp, content);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    ::unlink(tmp.c_str());
    throw_runtime("{}: cannot rename to {}: {}", tmp, path, ec.message());
  }
}

void replace_file_unsynced(const std::string& path, const std::string& content, mode_t mode) {
  clear_dead_temps_once(fs::path(path).parent_path());
  const std::string tmp = temp_path_for(path);
  const int fd = create_exclusive(tmp, mode);
  try {
    write_all(fd, content, tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  std::error_code ec;
  if (::close(fd) != 0) ec = std::error_code(errno, std::generic_category());
  if (!ec) fs::rename(tmp, path, ec);
  if (ec) {
    ::unlink(tmp.c_str());
    throw_runtime("{}: cannot write {}: {}", tmp, path, ec.message());
  }
}

void fsync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_runtime("{}: cannot reopen to flush to disk", path);
  const int r = ::fsync(fd);
  ::close(fd);
  if (r != 0) throw_runtime("{}: fsync failed", path);
}

void fsync_dir(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void write_atomically_with(const std::string& path, const std::function<void(const std::string& tmp)>& write) {
  clear_dead_temps_once(fs::path(path).parent_path());
  const std::string tmp = temp_path_for(path);
  // Nothing may be at the temporary name when `write` creates it: the HDF5 writer then creates the
  // file exclusively, so a link planted there is refused instead of followed.
  unlink_or_throw(tmp);
  try {
    write(tmp);
    fsync_file(tmp);
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) throw_runtime("{}: cannot rename to {}: {}", tmp, path, ec.message());
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  const fs::path dir = fs::path(path).parent_path();
  fsync_dir(dir.empty() ? "." : dir.string());
}

std::string write_new_file(const std::string& dir, const std::string& stem, const std::string& ext,
                           const std::string& content, bool numbered) {
  clear_dead_temps_once(dir);
  const std::string tmp = temp_path_for((fs::path(dir) / (stem + ext)).string());
  write_synced_fd(create_exclusive(tmp), tmp, content);
  for (int k = 0; k < 100000; ++k) {
    const std::string path = (fs::path(dir) / (k == 0 ? stem + ext : fmt::format("{}-{}{}", stem, k, ext))).string();
    if (::link(tmp.c_str(), path.c_str()) == 0) {
      ::unlink(tmp.c_str());
      return path;
    }
    if (errno == EEXIST && numbered) continue;
    if (errno == EEXIST) {
      ::unlink(tmp.c_str());
      throw_runtime("{}: exists already; results are never replaced", path);
    }
    const int err = errno;
    std::error_code ec;
    // Filesystems without hard links: check, then rename.
    if ((err == EPERM || err == EOPNOTSUPP || err == EMLINK) && !fs::exists(path, ec)) {
      fs::rename(tmp, path, ec);
      if (!ec) return path;
    }
    ::unlink(tmp.c_str());
    throw_runtime("{}: cannot write: {}", path, std::strerror(err));
  }
  ::unlink(tmp.c_str());
  throw_runtime("{}: no free name for {}{}", dir, stem, ext);
}

void prepare_writable_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec))
    throw_config("cannot create {}: {}", dir, ec ? ec.message() : "not a directory");
  const std::string probe = (fs::path(dir) / fmt::format(".probe-{}.tmp", ::getpid())).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw_config("cannot write in {}: {}", dir, std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace cnnscale
