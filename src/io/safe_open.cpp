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
  return open_at_no_follow(AT_FDCWD, path, path, flags, mode);
}

int open_at_no_follow(int dir_fd, const std::string& name, const std::string& shown_path, int flags, mode_t mode) {
  int fd;
  while ((fd = ::openat(dir_fd, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode)) < 0 && errno == EINTR) {
  }
  if (fd >= 0) return fd;
  const int err = errno;
  // ELOOP is what O_NOFOLLOW gives for a link; with O_EXCL a link gives EEXIST instead.
  struct stat st {};
  const bool link = ::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
  if (err == ELOOP || ((flags & O_EXCL) && err == EEXIST && link)) throw_link(shown_path);
  throw_runtime("{}: cannot open: {}", shown_path, std::strerror(err));
}

int open_folder_no_follow(const std::string& path) {
  return open_no_follow(path, O_RDONLY | O_DIRECTORY);
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
