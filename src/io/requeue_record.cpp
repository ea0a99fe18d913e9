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
#include "io/atomic_file.hpp"
#include "io/safe_open.hpp"

namespace cnnscale {

std::string write_requeue_record(int ranks, const std::string& host) {
  const char* path = std::getenv(kRequeueRecordEnv);
  if (!path || !*path) return "";
  // O_EXCL: a file already there was not written by this job (the launcher made the path fresh);
  // a link planted at the name is refused by name. A failed write removes the file: a partial
  // record must not count.
  const std::string line =
      fmt::format("stopped for requeue: {} rank(s), rank 0 on host {} pid {}\n", ranks, host, ::getpid());
  try {
    write_synced_fd(open_no_follow(path, O_WRONLY | O_CREAT | O_EXCL, 0600), path, line);
  } catch (const RuntimeError& e) {
    return fmt::format("cannot write the requeue record ({}): {}; the launcher reports its own exit code",
                       kRequeueRecordEnv, e.what());
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
