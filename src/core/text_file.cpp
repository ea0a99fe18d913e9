// read_config_text: stat before opening (opening a FIFO for reading blocks until a writer comes),
// then open without blocking and check the opened file again, since the path may have changed in
// between; read at most one byte past the limit, so a file that grows meanwhile is still refused.
#include "core/text_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace cnnscale {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

void check_stat(const struct stat& st, const std::string& path, const std::string& what, int64_t max_bytes) {
  if (!S_ISREG(st.st_mode)) throw_config("{}: {} is {}, not a regular file", path, what, kind_of(st.st_mode));
  if (st.st_size > max_bytes)
    throw_config("{}: {} is {} bytes, more than the {} a configuration file may have", path, what,
                 static_cast<int64_t>(st.st_size), max_bytes);
}

struct Fd {
  int fd;
  ~Fd() { ::close(fd); }
};

}  // namespace

std::string read_config_text(const std::string& path, const std::string& what, int64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw_config("{}: cannot open {}: {}", path, what, std::strerror(errno));
  check_stat(st, path, what, max_bytes);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw_config("{}: cannot open {}: {}", path, what, std::strerror(errno));
  const Fd closer{fd};
  if (::fstat(fd, &st) != 0) throw_config("{}: cannot read {}: {}", path, what, std::strerror(errno));
  check_stat(st, path, what, max_bytes);
  std::string text(static_cast<size_t>(st.st_size) + 1, '\0');
  size_t done = 0;
  for (;;) {
    if (done == text.size()) {
      if (static_cast<int64_t>(text.size()) > max_bytes)
        throw_config("{}: {} grew past the {} bytes a configuration file may have while it was read", path, what,
                     max_bytes);
      text.resize(std::min<size_t>(text.size() * 2, static_cast<size_t>(max_bytes) + 1));
    }
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_config("{}: cannot read {}: {}", path, what, std::strerror(errno));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  return text;
}

}  // namespace cnnscale
