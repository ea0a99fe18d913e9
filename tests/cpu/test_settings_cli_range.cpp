// A whole or real number setting's range is checked on the command line as the experiment schema
// checks it, both from the table's entry (infer --seconds 4000 is refused by both), and --help shows
// each entry's unit and range.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu/cli_runner.hpp"
#include "cpu/experiment_test_util.hpp"
#include "experiment/command_settings.hpp"
#include "experiment/train_settings.hpp"

namespace cnnscale::testing {
namespace {

// A value just outside the entry's range, above it or below, as a command line writes it; "" where
// there is none (no upper bound, or none below a lower bound of a count's type).
std::string range_outside(const Setting& s, bool above) {
  if (above && s.max >= kUnbounded) return "";
  if (s.type == SettingType::Integer) {
    const double v = above ? s.max + 1 : s.min - 1;
    return std::abs(v) < 9e18 ? std::to_string(static_cast<int64_t>(v)) : "";
  }
  return fmt::format("{}", above ? s.max * 2 + 1 : s.min_open ? s.min : s.min - 1);
}

// Every number setting of `table` whose range the command line leaves to the code: refused at the
// command line outside the table's range, in the table's words.
void expect_ranges_checked(const std::vector<std::string>& command, const SettingTable& table) {
  size_t checked = 0;
  for (const Setting& s : table) {
    if ((s.type != SettingType::Integer && s.type != SettingType::Number) || s.cli_check == CliCheck::Range) continue;
    for (const bool above : {false, true}) {
      const std::string v = range_outside(s, above);
      if (v.empty() || (!above && s.cli_check == CliCheck::AtLeast)) continue;
      std::vector<std::string> args = command;
      args.insert(args.end(), {s.flag.substr(s.flag.rfind(',') + 1), v});
      const CliResult r = run_cnnscale(args);
      EXPECT_EQ(r.exit_code, 2) << s.flag << " " << v << ": " << r.err;
      EXPECT_NE(r.err.find("must be " + s.range_text()), std::string::npos) << s.flag << " " << v << ": " << r.err;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0u);
}

TEST(SettingsCliRange, TheCommandLineChecksTheTablesRange) {
  const CliResult r = run_cnnscale({"infer", "--net", "lenet", "--seconds", "4000"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--seconds: must be in (0, 3600], got 4000"), std::string::npos) << r.err;
  // The experiment schema, from the same entry, in the same words.
  expect_error("name: i\nmode: infer\ndevice: cpu\ninfer: {batch: [1], seconds: 4000}\nmatrix: {network: [lenet]}\n",
               {"infer.seconds: must be in (0, 3600], got 4000"});
  // An upper bound of a count checked from its lower one (at least 1) up: --lr-base-batch's.
  const CliResult base = run_cnnscale({"train", "--net", "lenet", "--data", "synthetic", "--no-results",
                                       "--lr-base-batch", "2000000000"});
  EXPECT_EQ(base.exit_code, 2) << base.err;
  EXPECT_NE(base.err.find("--lr-base-batch: must be in [1, 1073741824], got 2000000000"), std::string::npos)
      << base.err;
  expect_ranges_checked({"train", "--net", "lenet", "--data", "synthetic", "--no-results"}, train_settings());
  expect_ranges_checked({"infer", "--net", "lenet"}, infer_settings());
}

TEST(SettingsCliRange, HelpShowsEachEntrysUnitAndRange) {
  const CliResult infer = run_cnnscale({"infer", "--help"});
  ASSERT_EQ(infer.exit_code, 0) << infer.err;
  const Setting& seconds = *find_setting(infer_settings(), "seconds");
  EXPECT_EQ(seconds.help_text(), seconds.help + " (s, in (0, 3600])");
  EXPECT_EQ(find_train_setting("display")->help_text(), find_train_setting("display")->help + " (iterations, at least 1)");
  EXPECT_EQ(find_train_setting("bucket_mb")->help_text(), find_train_setting("bucket_mb")->help + " (MiB, > 0)");
  const CliResult train = run_cnnscale({"train", "--help"});
  ASSERT_EQ(train.exit_code, 0) << train.err;
  // CLI11 wraps a long description: its last words, with the unit and range, stay on one line.
  EXPECT_NE(infer.out.find("(s, in (0, 3600])"), std::string::npos) << infer.out;
  EXPECT_NE(train.out.find("(MiB, > 0)"), std::string::npos) << train.out;
  EXPECT_NE(train.out.find("(iterations, at least 1)"), std::string::npos) << train.out;
}

}  // namespace
}  // namespace cnnscale::testing
