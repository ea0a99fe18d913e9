// What lets a sweep trust a results folder it did not just write: done markers (SHA-256 and size of
// a finished run's files, checked before the run is skipped), moving a damaged run folder aside,
// and the flock files that keep two sweeps (or two array tasks) off the same runs.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/host_name.hpp"
#include "experiment/sweep.hpp"
#include "io/atomic_file.hpp"
#include "io/safe_open.hpp"

namespace cnnscale {

namespace fs = std::filesystem;

namespace {

// FIPS 180-4 SHA-256, streaming. Our own few lines: the build has no crypto library, and zlib's
// CRC-32 would miss too many changes to count as "intact".
class Sha256 {
 public:
  void update(const unsigned char* p, size_t n) {
    length_ += n;
    while (n > 0) {
      const size_t take = std::min(n, size_t(64) - fill_);
      std::memcpy(block_.data() + fill_, p, take);
      fill_ += take;
      p += take;
      n -= take;
      if (fill_ == 64) {
        compress(block_.data());
        fill_ = 0;
      }
    }
  }
  std::string hex() {
    const uint64_t bits = length_ * 8;
    const unsigned char one = 0x80, zero = 0;
    update(&one, 1);
    while (fill_ != 56) update(&zero, 1);
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
    update(len, 8);
    std::string out;
    for (uint32_t v : h_) out += fmt::format("{:08x}", v);
    return out;
  }

 private:
  static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
  void compress(const unsigned char* b) {
    static constexpr uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = uint32_t(b[4 * i]) << 24 | uint32_t(b[4 * i + 1]) << 16 | uint32_t(b[4 * i + 2]) << 8 | b[4 * i + 3];
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], b2 = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b2) ^ (a & c) ^ (b2 & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b2;
      b2 = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += b2;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }

  std::array<uint32_t, 8> h_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<unsigned char, 64> block_{};
  size_t fill_ = 0;
  uint64_t length_ = 0;
};

// The files a done marker covers: what the report and later analysis read.
const char* const kSealedFiles[] = {"run.h5", "summary.json"};

}  // namespace

std::string sha256_hex(const std::string& data) {
  Sha256 h;
  h.update(reinterpret_cast<const unsigned char*>(data.data()), data.size());
  return h.hex();
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_runtime("cannot read {}: {}", path, std::strerror(errno));
  Sha256 h;
  std::array<char, 1 << 16> buf;
  while (in.read(buf.data(), buf.size()) || in.gcount() > 0)
    h.update(reinterpret_cast<const unsigned char*>(buf.data()), static_cast<size_t>(in.gcount()));
  if (in.bad()) throw_runtime("cannot read {}", path);
  return h.hex();
}

void write_done_marker(const std::string& run_dir, const RunSpec& run) {
  nlohmann::json files = nlohmann::json::object();
  for (const char* name : kSealedFiles) {
    const fs::path p = fs::path(run_dir) / name;
    std::error_code ec;
    const auto size = fs::file_size(p, ec);
    if (ec) throw_runtime("{}: {}", p.string(), ec.message());
    files[name] = {{"bytes", size}, {"sha256", sha256_file(p.string())}};
  }
  const nlohmann::json marker = {
      {"format", "cnnscale-done-1"}, {"run_id", run.id}, {"config_hash", run.config_hash}, {"files", files}};
  write_file_atomically((fs::path(run_dir) / kDoneMarker).string(), marker.dump(2) + "\n");
}

std::string check_done_marker(const std::string& run_dir) {
  nlohmann::json marker;
  {
    std::ifstream in(fs::path(run_dir) / kDoneMarker);
    if (!in) return fmt::format("{} is unreadable", kDoneMarker);
    try {
      marker = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception&) {
      return fmt::format("{} is not valid JSON", kDoneMarker);
    }
  }
  for (const char* name : kSealedFiles) {
    const nlohmann::json* rec = nullptr;
    if (marker.contains("files") && marker["files"].is_object() && marker["files"].contains(name))
      rec = &marker["files"][name];
    if (!rec || !rec->contains("bytes") || !(*rec)["bytes"].is_number_unsigned() || !rec->contains("sha256") ||
        !(*rec)["sha256"].is_string())
      return fmt::format("{} does not record {}", kDoneMarker, name);
    const fs::path p = fs::path(run_dir) / name;
    std::error_code ec;
    const auto size = fs::file_size(p, ec);
    if (ec) return fmt::format("{} is missing", name);
    const auto expected = (*rec)["bytes"].get<uint64_t>();
    if (size != expected)
      return fmt::format("{} has {} bytes, {} recorded {}{}", name, size, kDoneMarker, expected,
                         size < expected ? " (truncated)" : "");
    std::string sum;
    try {
      sum = sha256_file(p.string());
    } catch (const Error& e) {
      return e.what();
    }
    if (sum != (*rec)["sha256"].get<std::string>())
      return fmt::format("{} does not match its SHA-256 in {} (changed or damaged since the run finished)", name,
                         kDoneMarker);
  }
  return "";
}

std::string move_aside(const std::string& run_dir) {
  for (int n = 1;; ++n) {
    const std::string to = fmt::format("{}.corrupt-{}.partial", run_dir, n);
    std::error_code ec;
    if (fs::exists(to, ec)) continue;
    fs::rename(run_dir, to, ec);
    if (ec) throw_runtime("cannot move {} aside to {}: {}", run_dir, to, ec.message());
    return to;
  }
}

std::string sweep_lock_path(const std::string& exp_dir) {
  return (fs::path(exp_dir) / ".sweep.lock").string();
}

std::string run_lock_path(const std::string& exp_dir, const std::string& run_id) {
  return (fs::path(exp_dir) / ("." + run_id + ".lock")).string();
}

std::unique_ptr<FileLock> FileLock::try_lock(const std::string& path, std::string* holder,
                                             bool remove_when_released) {
  // Never through a link: a planted one would have us truncate its target below.
  const int fd = open_no_follow(path, O_RDWR | O_CREAT, 0644);
  int rc;
  while ((rc = ::flock(fd, LOCK_EX | LOCK_NB)) < 0 && errno == EINTR) {
  }
  if (rc < 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) {
      ::close(fd);
      throw_runtime("cannot lock {}: {}", path, std::strerror(err));
    }
    // The holder writes its name right after locking: an empty file is a holder just starting, so
    // its name is looked for again, for up to a second, before the refusal goes without it.
    char buf[256];
    ssize_t n = 0;
    for (int tries = 0; tries < 100 && (n = ::pread(fd, buf, sizeof buf - 1, 0)) <= 0; ++tries)
      ::usleep(10000);
    ::close(fd);
    std::string text = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (holder) *holder = text.empty() ? "another process" : text;
    return nullptr;
  }
  if (remove_when_released) {
    // The holder before us may have removed the file between our open and our lock: then this lock
    // guards nothing (a third process may create and lock a new file), so take the new one.
    struct stat mine {}, now {};
    if (::fstat(fd, &mine) != 0 || ::lstat(path.c_str(), &now) != 0 || mine.st_ino != now.st_ino ||
        mine.st_dev != now.st_dev) {
      ::close(fd);
      return try_lock(path, holder, remove_when_released);
    }
  }
  const std::string me = fmt::format("host {} pid {}\n", host_name(), ::getpid());
  // A stale name of an earlier holder must not outlive it: the file is rewritten whole.
  if (::ftruncate(fd, 0) == 0) {
    try {
      write_all(fd, me, path);
    } catch (const Error&) {
      // The lock itself holds; only the holder's name for a refused process is missing.
    }
  }
  return std::unique_ptr<FileLock>(new FileLock(fd, remove_when_released ? path : ""));
}

FileLock::~FileLock() {
  if (!remove_path_.empty()) ::unlink(remove_path_.c_str());  // while still held: see try_lock
  ::close(fd_);                                                // releases the flock
}

}  // namespace cnnscale
