// Checkpoints that are damaged, diverged or cannot be written: a flipped bit is refused naming the
// file and the array (CRC-32 per array), a NaN or infinity likewise, a file of format 1 (before
// checksums) loads; the rotation removes a damaged file before an intact one, needs room for only
// the two it keeps, and a write that fails (a file-size limit in CI, a tiny tmpfs where mounting
// is allowed) leaves no temporary file and the newest intact checkpoint. A file that cannot be read
// for another reason (here a lock another program holds) may be intact: it is never removed as
// damaged. A new checkpoint removes the newer ones of a branch the run abandoned.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/error_of.hpp"
#include "common/temp_dir.hpp"
#include "solver/checkpoint.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

using testing::error_of;
using testing::TempDir;

// Weights of `floats` values in all (split over two arrays), momentum and one state array.
CheckpointContents contents(int64_t iteration, int64_t floats = 64) {
  CheckpointContents c;
  auto array = [](const std::string& name, int64_t n, float base) {
    CheckpointArray a{name, {n}, {}};
    for (int64_t i = 0; i < n; ++i) a.values.push_back(base + 0.25f * static_cast<float>(i % 97));
    return a;
  };
  c.weights = {array("conv1/weight", floats / 2, 1.0f), array("fc/bias", floats / 2, -2.0f)};
  c.history = {array("conv1/weight", floats / 2, 0.5f), array("fc/bias", floats / 2, 0.0f)};
  c.state = {array("bn/running_mean", 4, 0.1f)};
  c.meta.iteration = iteration;
  c.meta.run_config = R"({"net":"n"})";
  return c;
}

// Byte offset in the file of a contiguous dataset's values.
haddr_t offset_of(const std::string& file, const std::string& dataset) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  const haddr_t at = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  return at;
}

void flip_bit(const std::string& file, std::streamoff at, int bit) {
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(at);
  char byte = 0;
  io.read(&byte, 1);
  byte = static_cast<char>(byte ^ (1 << bit));
  io.seekp(at);
  io.write(&byte, 1);
}

TEST(CheckpointFaults, AFlippedBitIsRefusedNamingTheFileAndTheArray) {
  TempDir dir;
  const std::string path = dir.file("c.h5");
  write_checkpoint(path, contents(5));
  // One bit of the mantissa of history/fc/bias[3]: still a finite value, only the checksum can tell.
  const haddr_t at = offset_of(path, "history/fc/bias");
  ASSERT_NE(at, HADDR_UNDEF);
  flip_bit(path, static_cast<std::streamoff>(at + 3 * sizeof(float)), 2);
  const std::string e = error_of([&] { read_checkpoint(path); });
  EXPECT_NE(e.find(path + ": checkpoint array history/fc/bias is damaged: its CRC-32 is "), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_NE(checkpoint_problem(path).find("history/fc/bias"), std::string::npos);
  EXPECT_THROW(read_checkpoint(path), ConfigError);
  // The loader's position: the run would resume silently elsewhere in its data.
  write_checkpoint(path, contents(5));
  flip_bit(path, static_cast<std::streamoff>(offset_of(path, "rng/loader_position")), 1);
  const std::string m = error_of([&] { read_checkpoint(path); });
  EXPECT_NE(m.find(path + ": checkpoint metadata (solver/, rng/, config/) is damaged"), std::string::npos) << m;
}

TEST(CheckpointFaults, ANonFiniteValueIsRefusedNamingTheArray) {
  TempDir dir;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    CheckpointContents c = contents(5);
    c.weights[1].values[7] = bad;  // the checksum is of these values: only the finiteness check refuses it
    write_checkpoint(dir.file("n.h5"), c);
    const std::string e = error_of([&] { read_checkpoint(dir.file("n.h5")); });
    EXPECT_NE(e.find(dir.file("n.h5") + ": checkpoint array weights/fc/bias holds "), std::string::npos) << e;
    EXPECT_NE(e.find(" at index 7: refused"), std::string::npos) << e;
  }
}

// Format 1 had no checksums: such a file loads (unverified, with a warning) so that a run
// interrupted across the upgrade can go on; its values are still checked for finiteness.
TEST(CheckpointFaults, AFileOfFormatOneLoads) {
  TempDir dir;
  const std::string path = dir.file("old.h5");
  write_checkpoint(path, contents(9));
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    bytes = ss.str();
  }
  const size_t at = bytes.find("cnnscale-checkpoint-2");
  ASSERT_NE(at, std::string::npos);
  bytes[at + std::strlen("cnnscale-checkpoint-")] = '1';
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  flip_bit(path, static_cast<std::streamoff>(offset_of(path, "weights/conv1/weight")), 0);
  EXPECT_EQ(read_checkpoint(path).meta.iteration, 9);
}

// After --resume auto skipped a truncated newest checkpoint, the next save must drop that one,
// not the intact older one it resumed from.
TEST(CheckpointFaults, RotationRemovesTheDamagedFileNotTheNewestIntactOne) {
  TempDir dir;
  CheckpointDir cd(dir.file("ckpt"));
  cd.save(contents(10));
  cd.save(contents(20));
  fs::resize_file(cd.path_for(20), fs::file_size(cd.path_for(20)) / 2);
  cd.save(contents(30));
  EXPECT_EQ(cd.list(), std::vector<std::string>({cd.path_for(10), cd.path_for(30)}));
  EXPECT_EQ(read_checkpoint(cd.path_for(10)).meta.iteration, 10);
  // A damaged file newer than the one written goes too: it would be the first --resume auto tries.
  cd.save(contents(40));
  std::ofstream(cd.path_for(90)) << "not a checkpoint";
  cd.save(contents(50));
  EXPECT_EQ(cd.list(), std::vector<std::string>({cd.path_for(40), cd.path_for(50)}));
}

// Holds an exclusive flock on a file, as a program writing it through HDF5 does: HDF5 (1.10 and
// later) then refuses to open it, while the file itself is intact. A stand-in for the failures of
// reading a good file (NFS ESTALE, EIO, no file descriptor left) that cannot be made on demand.
struct ForeignLock {
  int fd;
  explicit ForeignLock(const std::string& path) : fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    EXPECT_GE(fd, 0) << path;
    EXPECT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0) << path;
  }
  ~ForeignLock() { ::close(fd); }
};

// Files this process wrote are remembered as intact by size and modification time: a new time
// makes the rotation read them again.
void forget_intact(const std::string& path) {
  fs::last_write_time(path, fs::last_write_time(path) + std::chrono::seconds(1));
}

TEST(CheckpointFaults, DamageIsToldApartFromAFileThatCannotBeReadNow) {
  TempDir dir;
  const std::string path = dir.file("c.h5");
  write_checkpoint(path, contents(5));
  forget_intact(path);
  if (const char* locking = std::getenv("HDF5_USE_FILE_LOCKING"); locking && std::string(locking) == "FALSE")
    GTEST_SKIP() << "HDF5 file locking is switched off here: a lock cannot make a good file unreadable";
  {
    ForeignLock lock(path);
    const CheckpointCheck check = check_checkpoint(path);
    EXPECT_EQ(check.state, CheckpointCheck::State::unreadable) << check.why;
    EXPECT_NE(check.why.find(path), std::string::npos) << check.why;
    try {
      read_checkpoint(path);
      ADD_FAILURE() << "a locked file was read";
    } catch (const DamagedCheckpoint& e) {
      ADD_FAILURE() << "a locked, intact file was called damaged: " << e.what();
    } catch (const ConfigError&) {
    }
  }
  EXPECT_EQ(check_checkpoint(path).state, CheckpointCheck::State::intact);
  // Cut short (a full disk, a copy that died) and not HDF5 at all: damaged, and said why.
  fs::resize_file(path, fs::file_size(path) / 2);
  EXPECT_THROW(read_checkpoint(path), DamagedCheckpoint);
  const std::string cut = error_of([&] { read_checkpoint(path); });
  EXPECT_NE(cut.find("(it is cut short: "), std::string::npos) << cut;
  EXPECT_EQ(check_checkpoint(path).state, CheckpointCheck::State::damaged);
  std::ofstream(path, std::ios::trunc) << "not a checkpoint";
  const std::string foreign = error_of([&] { read_checkpoint(path); });
  EXPECT_NE(foreign.find("(it does not begin with HDF5's signature)"), std::string::npos) << foreign;
  EXPECT_EQ(check_checkpoint(path).state, CheckpointCheck::State::damaged);
}

// The rotation removes damaged files only: two intact checkpoints that cannot be read at the time
// of the next save stay (they are not counted as intact either, so none of them is rotated away);
// once readable again they are rotated as usual.
TEST(CheckpointFaults, RotationKeepsCheckpointsThatCannotBeReadNow) {
  if (const char* locking = std::getenv("HDF5_USE_FILE_LOCKING"); locking && std::string(locking) == "FALSE")
    GTEST_SKIP() << "HDF5 file locking is switched off here: a lock cannot make a good file unreadable";
  TempDir dir;
  CheckpointDir cd(dir.file("ckpt"));
  cd.save(contents(10));
  cd.save(contents(20));
  forget_intact(cd.path_for(10));
  forget_intact(cd.path_for(20));
  {
    ForeignLock lock10(cd.path_for(10)), lock20(cd.path_for(20));
    cd.save(contents(30));
  }
  EXPECT_EQ(cd.list(), std::vector<std::string>({cd.path_for(10), cd.path_for(20), cd.path_for(30)}));
  for (const auto& f : cd.list()) EXPECT_EQ(checkpoint_problem(f), "") << f;
  cd.save(contents(40));
  EXPECT_EQ(cd.list(), std::vector<std::string>({cd.path_for(30), cd.path_for(40)}));
}

// A run resumed from checkpoint 100 by path while 200 is there: its first checkpoint (110) makes
// 200 the future of a branch it left, which --resume auto would otherwise take after a stop.
TEST(CheckpointFaults, ANewCheckpointRemovesTheNewerOnesOfAnAbandonedBranch) {
  TempDir dir;
  CheckpointDir cd(dir.file("ckpt"));
  cd.save(contents(100));
  cd.save(contents(200));
  cd.save(contents(110));
  EXPECT_EQ(cd.list(), std::vector<std::string>({cd.path_for(100), cd.path_for(110)}));
  EXPECT_EQ(cd.latest(), cd.path_for(110));
  cd.save(contents(120));
  EXPECT_EQ(cd.list(), std::vector<std::string>({cd.path_for(110), cd.path_for(120)}));
}

// The write of checkpoint 30 fails in a child process whose file-size limit is below a
// checkpoint's size (EFBIG, as a full disk gives ENOSPC): one error naming the file and the
// system's reason, no temporary file, and the newest intact checkpoint still there. Only one old
// checkpoint may be there while the new one is written: room for two files is enough.
TEST(CheckpointFaults, AFailedWriteLeavesTheNewestIntactCheckpointAndNoTemporaryFile) {
  TempDir dir;
  CheckpointDir cd(dir.file("ckpt"));
  const int64_t floats = 64 * 1024;  // 512 KiB of arrays
  cd.save(contents(10, floats));
  cd.save(contents(20, floats));
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    std::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead of killing
    const rlimit limit{128 * 1024, 128 * 1024};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    int code = 0;
    std::string message;
    try {
      cd.save(contents(30, floats));
    } catch (const RuntimeError& e) {
      code = 1;
      message = e.what();
    } catch (const std::exception& e) {
      code = 2;
      message = e.what();
    }
    if (::write(pipe_fds[1], message.data(), message.size()) < 0) code = 3;
    ::_exit(code);
  }
  ::close(pipe_fds[1]);
  std::string message;
  char buf[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) message.append(buf, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << message;
  EXPECT_NE(message.find(cd.path_for(30)), std::string::npos) << message;
  EXPECT_NE(message.find(std::strerror(EFBIG)), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(cd.dir())) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>({"checkpoint-000000020.h5"}));
  EXPECT_EQ(read_checkpoint(cd.path_for(20)).meta.iteration, 20);
}

// The same on a real full filesystem: a tmpfs with room for two checkpoints and a half. Needs the
// right to mount (root in a container allows it); skipped where CI does not have it.
TEST(CheckpointFaults, ATmpfsWithRoomForTwoCheckpointsKeepsTwoAndFailsCleanlyWhenFull) {
  TempDir dir;
  const int64_t floats = 64 * 1024;
  write_checkpoint(dir.file("probe.h5"), contents(1, floats));
  const uintmax_t size = fs::file_size(dir.file("probe.h5"));
  const std::string mnt = dir.file("mnt");
  fs::create_directories(mnt);
  const uintmax_t room = (size * 5 / 2 + 4095) / 4096 * 4096;
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, fmt::format("size={}", room).c_str()) != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  struct Unmount {
    std::string at;
    ~Unmount() { ::umount2(at.c_str(), MNT_DETACH); }
  } unmount{mnt};
  CheckpointDir cd(mnt + "/ckpt");
  for (int64_t it : {10, 20, 30, 40}) ASSERT_NO_THROW(cd.save(contents(it, floats))) << it;
  EXPECT_EQ(cd.list(), std::vector<std::string>({cd.path_for(30), cd.path_for(40)}));
  // Fill what is left and more: the next write finds no room even for itself.
  {
    std::ofstream filler(mnt + "/filler", std::ios::binary);
    const std::string block(4096, 'x');
    while (filler.write(block.data(), static_cast<std::streamsize>(block.size()))) {
    }
  }
  // Twice the size: the room the rotation frees by removing 30 first is not enough either.
  const std::string e = error_of([&] { cd.save(contents(50, 2 * floats)); });
  EXPECT_NE(e.find(cd.path_for(50)), std::string::npos) << e;
  EXPECT_NE(e.find(std::strerror(ENOSPC)), std::string::npos) << e;
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(cd.dir())) left.push_back(entry.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>({"checkpoint-000000040.h5"}));
  EXPECT_EQ(read_checkpoint(cd.path_for(40)).meta.iteration, 40);
}

}  // namespace
}  // namespace cnnscale
