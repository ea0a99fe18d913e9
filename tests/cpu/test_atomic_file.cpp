// io/atomic_file's publishing of a file written by a library (as run.h5 and checkpoints are): whole
// files appear under their name, failures leave the old file and no temporary one.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "io/atomic_file.hpp"

namespace cnnscale {
namespace {

using testing::TempDir;

TEST(AtomicFile, WriteWithPublishesWholeFilesOnly) {
  TempDir dir;
  const std::string path = dir.file("out.bin");
  write_atomically_with(path, [](const std::string& tmp) { std::ofstream(tmp) << "first"; });
  EXPECT_EQ(dir.entries(), std::vector<std::string>({"out.bin"}));
  // A failing writer leaves the old file and no temporary one.
  EXPECT_THROW(write_atomically_with(path,
                                     [](const std::string& tmp) {
                                       std::ofstream(tmp) << "half";
                                       throw RuntimeError("injected");
                                     }),
               RuntimeError);
  EXPECT_EQ(dir.entries(), std::vector<std::string>({"out.bin"}));
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  EXPECT_EQ(text.str(), "first");
  // A writer that creates nothing is an error, not an empty file.
  EXPECT_THROW(write_atomically_with(dir.file("none.bin"), [](const std::string&) {}), RuntimeError);
  EXPECT_EQ(dir.entries(), std::vector<std::string>({"out.bin"}));
}

}  // namespace
}  // namespace cnnscale
