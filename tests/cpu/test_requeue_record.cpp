// The requeue record rank 0 writes for its launcher: one line, created exclusively; a link planted
// at its name is refused by name (its target untouched) and a file already there is not replaced,
// each with a warning line instead (the launcher then keeps mpirun's code, as for a failure).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/temp_dir.hpp"
#include "io/requeue_record.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;

std::string read_record(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Sets $CNNSCALE_REQUEUE_RECORD for the test's length.
class RecordPath {
 public:
  explicit RecordPath(const std::string& path) { ::setenv(kRequeueRecordEnv, path.c_str(), 1); }
  ~RecordPath() { ::unsetenv(kRequeueRecordEnv); }
};

TEST(RequeueRecord, WrittenOnceNeverThroughALink) {
  testing::TempDir dir;
  const std::string record = dir.file("requeue");
  {
    RecordPath env(record);
    EXPECT_EQ(write_requeue_record(2, "node-1"), "");
    EXPECT_EQ(read_record(record).rfind("stopped for requeue: 2 rank(s), rank 0 on host node-1 pid ", 0), 0u)
        << read_record(record);
    const std::string first = read_record(record);
    const std::string again = write_requeue_record(2, "node-1");
    EXPECT_NE(again.find(record + ": cannot open: File exists"), std::string::npos) << again;
    EXPECT_EQ(read_record(record), first);
  }

  const std::string victim = dir.file("victim.txt");
  std::ofstream(victim) << "another user's file\n";
  const std::string linked = dir.file("linked");
  fs::create_symlink(victim, linked);
  RecordPath env(linked);
  const std::string warning = write_requeue_record(2, "node-1");
  EXPECT_NE(warning.find(linked + ": is a symbolic link"), std::string::npos) << warning;
  EXPECT_NE(warning.find("the launcher reports its own exit code"), std::string::npos) << warning;
  EXPECT_EQ(read_record(victim), "another user's file\n");
  EXPECT_TRUE(fs::is_symlink(linked));

  ::unsetenv(kRequeueRecordEnv);
  EXPECT_EQ(write_requeue_record(2, "node-1"), "");  // no launcher asked for one
}

}  // namespace
}  // namespace cnnscale
