// See safe_open.hpp.
#include "io/safe_open.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace cnnscale {

namespace {

[[noreturn]] void throw_link(const std::string& path) {
  throw_runtime("{}: is a symbolic link; not followed where cnnscale writes a file (remove it)", path);
}

bool is_link(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

}  // namespace

int open_no_follow(const std::string& path, int flags, mode_t mode) {
  int fd;
  while ((fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode)) < 0 && errno == EINTR) {
  }
  if (fd >= 0) return fd;
  const int err = errno;
  // ELOOP is what O_NOFOLLOW gives for a link; with O_EXCL a link gives EEXIST instead.
  if (err == ELOOP || ((flags & O_EXCL) && err == EEXIST && is_link(path))) throw_link(path);
  throw_runtime("{}: cannot open: {}", path, std::strerror(err));
}

int create_exclusive(const std::string& path, mode_t mode) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    throw_runtime("{}: cannot remove a leftover: {}", path, std::strerror(errno));
  return open_no_follow(path, O_WRONLY | O_CREAT | O_EXCL, mode);
}

void refuse_link(const std::string& path) {
  if (is_link(path)) throw_link(path);
}

}  // namespace cnnscale
