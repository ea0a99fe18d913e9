// environment_with_prefix: the variables of one family, "NAME=value", sorted by name; others, and
// entries without '=', are not taken.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/environment.hpp"

namespace cnnscale {
namespace {

TEST(Environment, VariablesOfOnePrefixSorted) {
  const char* env[] = {"PATH=/bin", "NCCL_PROTO=LL", "NCCL_ALGO=Ring", "XNCCL_ALGO=no", "NCCL_BROKEN", "NCCL_=x",
                       nullptr};
  EXPECT_EQ(environment_with_prefix("NCCL_", env),
            (std::vector<std::string>{"NCCL_=x", "NCCL_ALGO=Ring", "NCCL_PROTO=LL"}));
  EXPECT_TRUE(environment_with_prefix("OMPI_MCA_", env).empty());
  const char* none[] = {nullptr};
  EXPECT_TRUE(environment_with_prefix("NCCL_", none).empty());
}

TEST(Environment, ReadsTheProcessEnvironment) {
  ASSERT_EQ(::setenv("CNNSCALE_ENVTEST_B", "2", 1), 0);
  ASSERT_EQ(::setenv("CNNSCALE_ENVTEST_A", "one=1", 1), 0);
  EXPECT_EQ(environment_with_prefix("CNNSCALE_ENVTEST_"),
            (std::vector<std::string>{"CNNSCALE_ENVTEST_A=one=1", "CNNSCALE_ENVTEST_B=2"}));
  EXPECT_EQ(environment_line("CNNSCALE_ENVTEST_"), "CNNSCALE_ENVTEST_A=one=1 CNNSCALE_ENVTEST_B=2");
  EXPECT_EQ(environment_line("CNNSCALE_ENVTEST_NONE_"), "");
  ::unsetenv("CNNSCALE_ENVTEST_A");
  ::unsetenv("CNNSCALE_ENVTEST_B");
}

}  // namespace
}  // namespace cnnscale
