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

#include "core/error.hpp"
#include "core/host_name.hpp"
#include "core/log.hpp"
#include "io/atomic_file.hpp"
#include "io/results_writer.hpp"
#include "io/safe_open.hpp"
#include "solver/checkpoint.hpp"
#include "solver/checkpoint_compare.hpp"

namespace cnnscale {

namespace {

namespace fs = std::filesystem;

// The owner's record, or null when there is none (a directory from before records, or a first
// run). A record that does not parse is treated as none: the lock, not the record, keeps runs apart.
nlohmann::json read_record(const std::string& path) {
  std::error_code ec;
  const auto status = fs::symlink_status(path, ec);
  if (ec || status.type() == fs::file_type::not_found) return nullptr;
  refuse_link(path);
  if (status.type() != fs::file_type::regular)
    throw_config("{}: not a regular file (another object where cnnscale keeps its owner record): refused", path);
  // Opened without following a link planted since the look above.
  const int fd = open_no_follow(path, O_RDONLY);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw_runtime("{}: cannot read the owner record: {}", path, std::strerror(err));
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
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
  const int fd = open_no_follow(lock, O_RDWR | O_CREAT);
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
                               {"started", utc_times(std::chrono::system_clock::now()).first},
                               {"identity", req.identity}};
  write_file_atomically(record, mine.dump(1) + "\n");
  return self;
}

CheckpointDirClaim::~CheckpointDirClaim() {
  ::close(fd_);  // releases the flock; the record stays: it says whose checkpoints these are
}

}  // namespace cnnscale
