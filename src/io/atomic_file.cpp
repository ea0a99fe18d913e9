// See atomic_file.hpp.
#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/error.hpp"

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

std::string temp_path_for(const std::string& path) {
  const fs::path p(path);
  return (p.parent_path() / fmt::format(".{}.{}.tmp", p.filename().string(), ::getpid())).string();
}

void write_synced_file(const std::string& path, const std::string& content, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) throw_runtime("{}: cannot create: {}", path, std::strerror(errno));
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
  const std::string tmp = temp_path_for(path);
  write_synced_file(tmp, content, mode);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    ::unlink(tmp.c_str());
    throw_runtime("{}: cannot rename to {}: {}", tmp, path, ec.message());
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
  const std::string tmp = temp_path_for(path);
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
  const std::string tmp = temp_path_for((fs::path(dir) / (stem + ext)).string());
  write_synced_file(tmp, content);
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

}  // namespace cnnscale
