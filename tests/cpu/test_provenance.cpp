// Provenance (io/provenance.hpp): the build's version, the command line's shell form, distinct
// hosts, a resumed run's start and resumes, and the JSON and run.h5 forms read back as written (null
// git_describe included; resumed_at absent from files written before it was recorded).
#include <gtest/gtest.h>

#include "common/temp_dir.hpp"
#include "core/build_info.hpp"
#include "core/error.hpp"
#include "io/provenance.hpp"

namespace cnnscale {
namespace {

Provenance example() {
  Provenance p;
  p.version = "0.1.0";
  p.git_describe = "v0.1.0-3-gabc1234-dirty";
  p.command_line = {"cnnscale", "train", "--tag", "note=a b", "--lr", "0.1"};
  p.start_time = "2026-12-06T09:13:06Z";
  p.end_time = "2026-12-06T09:14:00Z";
  p.hosts = {"node1", "node0"};
  return p;
}

TEST(Provenance, BuildVersionAndStartAreSet) {
  EXPECT_EQ(cnnscale_version(), CNNSCALE_VERSION);
  const Provenance p = start_provenance();
  EXPECT_EQ(p.version, CNNSCALE_VERSION);
  EXPECT_EQ(p.git_describe, cnnscale_git_describe());
  EXPECT_EQ(p.start_time.size(), 20u) << p.start_time;  // 2026-12-06T09:13:06Z
  EXPECT_EQ(p.start_time.back(), 'Z');
  EXPECT_TRUE(p.end_time.empty());
  EXPECT_NE(cnnscale_version_line().find(CNNSCALE_VERSION), std::string::npos);
}

TEST(Provenance, UtcIsoAndDistinctHosts) {
  EXPECT_EQ(utc_iso(std::chrono::system_clock::from_time_t(0)), "1970-01-01T00:00:00Z");
  EXPECT_EQ(distinct_hosts({"b", "a", "b", "c", "a"}), (std::vector<std::string>{"b", "a", "c"}));
}

TEST(Provenance, ShellLineQuotesWhatAShellWouldSplit) {
  EXPECT_EQ(shell_line({"cnnscale", "train", "--milestones", "1,2", "--data", "hdf5:/x/y"}),
            "cnnscale train --milestones 1,2 --data hdf5:/x/y");
  EXPECT_EQ(shell_line({"a b", "", "it's"}), "'a b' '' 'it'\\''s'");
}

Provenance resumed_twice() {
  Provenance p = example();
  p.resumed_at = {"2026-12-06T10:00:00Z", "2026-12-06T11:00:00Z"};
  return p;
}

TEST(Provenance, AResumedRunKeepsTheStartItContinuesAndListsItsResumes) {
  Provenance mine = example();
  mine.start_time = "2026-12-06T12:00:00Z";
  const Provenance once = resumed_provenance(mine, example());
  EXPECT_EQ(once.start_time, example().start_time);
  EXPECT_EQ(once.resumed_at, (std::vector<std::string>{"2026-12-06T12:00:00Z"}));
  EXPECT_EQ(once.command_line, mine.command_line);
  const Provenance again = resumed_provenance(mine, resumed_twice());
  EXPECT_EQ(again.start_time, example().start_time);
  EXPECT_EQ(again.resumed_at,
            (std::vector<std::string>{"2026-12-06T10:00:00Z", "2026-12-06T11:00:00Z", "2026-12-06T12:00:00Z"}));
  // No interrupted run's provenance: the earlier start is unknown, the resume still recorded.
  const Provenance alone = resumed_provenance(mine, std::nullopt);
  EXPECT_EQ(alone.start_time, "2026-12-06T12:00:00Z");
  EXPECT_EQ(alone.resumed_at, (std::vector<std::string>{"2026-12-06T12:00:00Z"}));
}

TEST(Provenance, JsonRoundTrip) {
  const Provenance p = example();
  EXPECT_EQ(provenance_from_json(provenance_json(p), "x"), p);
  EXPECT_EQ(provenance_from_json(provenance_json(resumed_twice()), "x"), resumed_twice());
  nlohmann::json older = provenance_json(p);
  older.erase("resumed_at");  // written before it was recorded
  EXPECT_EQ(provenance_from_json(older, "x"), p);
  Provenance bare = p;
  bare.git_describe.clear();
  const nlohmann::json j = provenance_json(bare);
  EXPECT_TRUE(j["git_describe"].is_null());
  EXPECT_EQ(provenance_from_json(j, "x"), bare);
}

TEST(Provenance, JsonErrorsNameTheKey) {
  nlohmann::json j = provenance_json(example());
  j["hosts"] = {"a", 3};
  try {
    provenance_from_json(j, "f.json");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("f.json: provenance.hosts[1]"), std::string::npos) << e.what();
  }
  j = provenance_json(example());
  j.erase("start_time");
  EXPECT_THROW(provenance_from_json(j, "f.json"), ConfigError);
}

TEST(Provenance, H5RoundTripAndAbsentGroup) {
  testing::TempDir dir;
  const std::string path = dir.file("p.h5");
  Provenance bare = example();
  bare.git_describe.clear();
  {
    h5::Writer w(path, "test file");
    write_provenance_h5(w, "/provenance", example());
    write_provenance_h5(w, "/other/provenance", bare);
    write_provenance_h5(w, "/resumed/provenance", resumed_twice());
    {  // as written before resumed_at was recorded
      h5::Handle g = w.group("/older/provenance");
      w.attr_str(g.get(), "version", example().version);
      w.attr_str(g.get(), "git_describe", example().git_describe);
      w.attr_str(g.get(), "start_time", example().start_time);
      w.attr_str(g.get(), "end_time", example().end_time);
      w.strings(g.get(), "command_line", example().command_line);
      w.strings(g.get(), "hosts", example().hosts);
    }
    w.close();
  }
  const h5::Reader in(path, "test file");
  EXPECT_EQ(read_provenance_h5(in, "provenance"), example());
  EXPECT_EQ(read_provenance_h5(in, "other/provenance"), bare);
  EXPECT_EQ(read_provenance_h5(in, "resumed/provenance"), resumed_twice());
  EXPECT_EQ(read_provenance_h5(in, "older/provenance"), example());
  EXPECT_FALSE(read_provenance_h5(in, "missing").has_value());
}

TEST(Provenance, CsvColumns) {
  const auto columns = provenance_columns(example());
  ASSERT_EQ(columns.size(), 7u);
  EXPECT_EQ(columns[0], (std::pair<std::string, std::string>{"version", "0.1.0"}));
  EXPECT_EQ(columns[2].second, "cnnscale train --tag 'note=a b' --lr 0.1");
  EXPECT_EQ(columns[5].second, "node1,node0");
  EXPECT_EQ(columns[6], (std::pair<std::string, std::string>{"resumed_at", ""}));
  EXPECT_EQ(provenance_columns(resumed_twice())[6].second, "2026-12-06T10:00:00Z,2026-12-06T11:00:00Z");
}

}  // namespace
}  // namespace cnnscale
