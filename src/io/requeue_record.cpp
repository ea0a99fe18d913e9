// The requeue record: written by rank 0 of a job that stopped for requeue, read by the launcher
// that made its path (see requeue_record.hpp).
#include "io/requeue_record.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"

namespace cnnscale {

std::string write_requeue_record(int ranks, const std::string& host) {
  const char* path = std::getenv(kRequeueRecordEnv);
  if (!path || !*path) return "";
  // O_EXCL: a file already there was not written by this job (the launcher made the path fresh),
  // and with O_CREAT it also refuses a link planted at the name.
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return fmt::format("cannot write the requeue record {} ({}={}): {}; the launcher reports its own exit code", path,
                       kRequeueRecordEnv, path, std::strerror(errno));
  const std::string line =
      fmt::format("stopped for requeue: {} rank(s), rank 0 on host {} pid {}\n", ranks, host, ::getpid());
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  const int err = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(path);  // a partial record must not count
    return fmt::format("cannot write the requeue record {}: {}", path, std::strerror(err));
  }
  return "";
}

RequeueRecord::RequeueRecord() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = fmt::format("{}/cnnscale-launch.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!::mkdtemp(pattern.data()))
    throw_runtime("cannot make a folder for the requeue record in {}: {}", tmp && *tmp ? tmp : "/tmp",
                  std::strerror(errno));
  dir_ = pattern;
  path_ = dir_ + "/requeue";
}

RequeueRecord::~RequeueRecord() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);  // does not follow links inside
}

bool RequeueRecord::written() const {
  struct stat st {};
  return ::lstat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string RequeueRecord::text() const {
  if (!written()) return "";
  std::ifstream in(path_);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace cnnscale
