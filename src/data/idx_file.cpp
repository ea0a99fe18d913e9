// IDX reading through zlib's gzread (transparently handles uncompressed files too), with every
// header field and the exact payload length checked, so a bad download fails loudly and early.
#include "data/idx_file.hpp"

#include <fmt/ranges.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "core/checked_math.hpp"
#include "core/error.hpp"

namespace cnnscale {

namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// Reads up to `bytes`; returns how many were read. Corrupt compressed data is an error.
size_t read_some(gzFile f, const std::string& file, void* dst, size_t bytes) {
  size_t done = 0;
  auto* out = static_cast<unsigned char*>(dst);
  while (done < bytes) {
    // gzread takes an unsigned int count: read in chunks of at most 1 GiB.
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(bytes - done, size_t{1} << 30));
    int n = gzread(f, out + done, chunk);
    if (n < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      throw_config("{}: corrupt gzip data: {}", file, msg ? msg : "unknown zlib error");
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  // A gzip stream cut short reads as end of data; zlib reports it as an error afterwards.
  int errnum = 0;
  const char* msg = gzerror(f, &errnum);
  if (errnum != Z_OK && errnum != Z_STREAM_END) throw_config("{}: corrupt gzip data: {}", file, msg);
  return done;
}

uint32_t big_endian_u32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The payload's size from the header's extents, checked against what the file can hold before any of
// it is allocated: a plain file holds exactly the header and the payload; a gzip one at most 1032
// bytes per compressed byte (deflate's largest ratio, zlib's FAQ).
int64_t checked_payload(const std::string& file, const std::vector<int64_t>& dims, const std::string& what,
                        int64_t file_bytes, int64_t header_bytes, bool plain) {
  const std::string shape = fmt::format("{}", fmt::join(dims, " x "));
  const auto total = bounded_product(dims, kMaxElements);
  if (!total) throw_config("{}: the header's {} {} bytes are more than 2^40", file, shape, what);
  if (plain && *total != file_bytes - header_bytes)
    throw_config("{}: the header announces {} = {} {} bytes, but the file holds {} after its {}-byte header", file,
                 shape, *total, what, file_bytes - header_bytes, header_bytes);
  if (!plain && *total / 1032 > file_bytes)
    throw_config("{}: the header announces {} = {} {} bytes, more than a {}-byte gzip file can hold", file, shape,
                 *total, what, file_bytes);
  return *total;
}

}  // namespace

IdxArray read_idx_ubyte(const std::string& file, int expected_rank, const std::string& what) {
  // Before opening: a FIFO would block the open, and the payload is checked against the size.
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) throw_config("{}: cannot open: {}", file, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw_config("{}: not a regular file", file);
  errno = 0;
  GzHandle f(gzopen(file.c_str(), "rb"));
  if (!f) throw_config("{}: cannot open: {}", file, errno ? std::strerror(errno) : "zlib could not open it");
  gzbuffer(f.get(), 1 << 20);

  unsigned char magic[4];
  size_t got = read_some(f.get(), file, magic, 4);
  if (got < 4) throw_config("{}: truncated: expected a 4-byte IDX header, got {} bytes", file, got);
  const uint32_t want_magic = 0x00000800u | static_cast<uint32_t>(expected_rank);
  if (big_endian_u32(magic) != want_magic)
    throw_config("{}: bad magic number 0x{:08x}: expected 0x{:08x} (unsigned-byte IDX with {} dimensions)", file,
                 big_endian_u32(magic), want_magic, expected_rank);

  std::vector<unsigned char> header(4 * static_cast<size_t>(expected_rank));
  got = read_some(f.get(), file, header.data(), header.size());
  if (got < header.size()) throw_config("{}: truncated: expected {} dimension bytes, got {}", file, header.size(), got);

  IdxArray out;
  for (int d = 0; d < expected_rank; ++d) {
    int64_t extent = big_endian_u32(header.data() + 4 * d);
    if (extent <= 0 || extent > (int64_t{1} << 31)) throw_config("{}: invalid dimension {}: {}", file, d, extent);
    out.dims.push_back(extent);
  }
  const int64_t total = checked_payload(file, out.dims, what, static_cast<int64_t>(st.st_size),
                                        4 + static_cast<int64_t>(header.size()), gzdirect(f.get()) == 1);

  // In steps, so that a gzip stream that ends early has not had its whole claimed size allocated.
  size_t done = 0;
  while (done < static_cast<size_t>(total)) {
    const size_t step = std::min<size_t>(static_cast<size_t>(total) - done, size_t{64} << 20);
    out.data.resize(done + step);
    const size_t n = read_some(f.get(), file, out.data.data() + done, step);
    done += n;
    if (n < step) break;
  }
  if (done < static_cast<size_t>(total))
    throw_config("{}: truncated: expected {} {} bytes, got {}", file, total, what, done);
  unsigned char extra;
  if (read_some(f.get(), file, &extra, 1) != 0)
    throw_config("{}: unexpected data after the {} {} bytes the header announces", file, total, what);
  return out;
}

}  // namespace cnnscale
