// See checkpoint_claim.hpp. The lock is what keeps two live runs apart (a pid in a file cannot
// tell a live holder on another node from a dead one; a kernel lock on the shared filesystem can);
// the record is what a refused run is told, and what a later run is compared with.
#include "solver/checkpoint_claim.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "io/atomic_file.hpp"
#include "solver/checkpoint.hpp"
#include "solver/checkpoint_compare.hpp"

namespace cnnscale {

namespace {

namespace fs = std::filesystem;

std::string host_name() {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  return host;
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The owner's record, or null when there is none (a directory from before records, or a first
// run). A record that does not parse is treated as none: the lock, not the record, keeps runs apart.
nlohmann::json read_record(const std::string& path) {
  std::error_code ec;
  const auto status = fs::symlink_status(path, ec);
  if (ec || status.type() == fs::file_type::not_found) return nullptr;
  if (status.type() != fs::file_type::regular)
    throw_config("{}: not a regular file (a link or other object where cnnscale keeps its owner record): refused",
                 path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (!j.is_object()) {
    log::warn("{}: unreadable owner record, replaced", path);
    return nullptr;
  }
  return j;
}

std::string holder_text(const nlohmann::json& record) {
  if (!record.is_object()) return "another process";
  const auto str = [&](const char* k) {
    const auto& v = record.value(k, nlohmann::json());
    return v.is_null() ? std::string("?") : (v.is_string() ? v.get<std::string>() : v.dump());
  };
  return fmt::format("run {} (host {}, pid {}, since {})", str("run_id"), str("host"), str("pid"), str("started"));
}

}  // namespace

std::string CheckpointDirClaim::lock_path(const std::string& dir) {
  return (fs::path(dir) / ".cnnscale-owner.lock").string();
}

std::string CheckpointDirClaim::record_path(const std::string& dir) {
  return (fs::path(dir) / ".cnnscale-owner.json").string();
}

std::unique_ptr<CheckpointDirClaim> CheckpointDirClaim::claim(const Request& req) {
  std::error_code ec;
  fs::create_directories(req.dir, ec);
  if (ec) throw_config("--checkpoint-dir {}: cannot create the directory: {}", req.dir, ec.message());
  const std::string lock = lock_path(req.dir), record = record_path(req.dir);
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == ELOOP) throw_config("{}: is a symbolic link; cnnscale never follows one it did not make", lock);
    throw_runtime("{}: cannot open the checkpoint directory's lock: {}", lock, std::strerror(errno));
  }
  std::unique_ptr<CheckpointDirClaim> self(new CheckpointDirClaim(fd));
  int rc;
  while ((rc = ::flock(fd, LOCK_EX | LOCK_NB)) < 0 && errno == EINTR) {
  }
  if (rc < 0) {
    if (errno != EWOULDBLOCK) throw_runtime("{}: cannot lock: {}", lock, std::strerror(errno));
    // The holder writes its record right after locking; a missing one is a holder just starting.
    nlohmann::json owner;
    try {
      owner = read_record(record);
    } catch (const Error&) {
    }
    throw_runtime(
        "--checkpoint-dir {} is in use by {}: a checkpoint directory belongs to one run; give this run "
        "its own",
        req.dir, holder_text(owner));
  }
  const nlohmann::json owner = read_record(record);
  if (owner.is_object() && owner.contains("identity") && !CheckpointDir(req.dir).list().empty()) {
    const auto diffs = identity_differences(owner["identity"], req.identity);
    if (!diffs.empty()) {
      const std::string what = describe_difference(diffs.front(), "that run has", "this one");
      const std::string more = more_differences(diffs);
      if (!(req.resuming && req.allow_changes))
        throw_config(
            "--checkpoint-dir {} holds the checkpoints of {}, another run: {}{}; give this run its own "
            "--checkpoint-dir (or continue that run with the change: --resume auto --resume-allow-changes)",
            req.dir, holder_text(owner), what, more);
      log::warn("--checkpoint-dir {}: taking over the checkpoints of {} with changes (--resume-allow-changes): {}{}",
                req.dir, holder_text(owner), what, more);
    }
  }
  const nlohmann::json mine = {{"run_id", req.run_id},
                               {"host", host_name()},
                               {"pid", static_cast<int64_t>(::getpid())},
                               {"started", utc_now()},
                               {"identity", req.identity}};
  write_file_atomically(record, mine.dump(1) + "\n");
  return self;
}

CheckpointDirClaim::~CheckpointDirClaim() {
  ::close(fd_);  // releases the flock; the record stays: it says whose checkpoints these are
}

}  // namespace cnnscale
