// `bench allreduce` results files and their report table: files of 2, 4 and 8 ranks (two repeats
// at 8) in a temp results tree give one row per size and busbw/time columns per rank count in
// ascending order, holding the inputs' mean and sample std; a size missing at one count is "—" in
// Markdown and empty in CSV; malformed files are skipped with a warning naming them. The file
// writer never replaces a file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/temp_dir.hpp"
#include "core/error.hpp"
#include "cpu/cli_runner.hpp"
#include "cpu/test_report_util.hpp"
#include "experiment/report.hpp"
#include "experiment/report_allreduce.hpp"

namespace cnnscale {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

struct Point {
  int64_t bytes;
  double time_us;
};

// A file as `bench allreduce` writes it; algbw and busbw follow from the time as the bench computes them.
json bench_json(int ranks, const std::vector<Point>& points, const std::string& device = "gpu",
                const std::string& algo = "ring") {
  json rows = json::array();
  for (const Point& p : points) {
    const double algbw = static_cast<double>(p.bytes) / 1e9 / (p.time_us * 1e-6);
    rows.push_back({{"bytes", p.bytes},
                    {"count", p.bytes / 4},
                    {"type", "float"},
                    {"time_us", p.time_us},
                    {"algbw_gbs", algbw},
                    {"busbw_gbs", algbw * 2.0 * (ranks - 1) / ranks},
                    {"wrong", 0}});
  }
  json devices = json::array();
  for (int r = 0; r < ranks; ++r) devices.push_back(fmt::format("node-a gpu:{} NVIDIA H200 GPU-0000000{}", r, r));
  return {{"benchmark", "allreduce"},
          {"format", report::kAllreduceBenchFormat},
          {"time", "2026-11-22T04:43:00Z"},
          {"host", "node-a"},
          {"op", "sum"},
          {"in_place", true},
          {"ranks", ranks},
          {"device", device},
          {"algo", algo},
          {"issue", device == "gpu" ? "graph" : "host"},
          {"library", "NCCL 2.28.9, NCCL_ALGO=Ring"},
          {"rank_devices", devices},
          {"warmup_iters", 5},
          {"iters", 20},
          {"time_definition", "mean per allreduce, max over ranks"},
          {"busbw_definition", "algbw * 2(n-1)/n"},
          {"checked", true},
          {"rows", rows}};
}

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

double busbw(int ranks, const Point& p) {
  return static_cast<double>(p.bytes) / 1e9 / (p.time_us * 1e-6) * 2.0 * (ranks - 1) / ranks;
}

size_t column(const report::Table& t, const std::string& header) {
  for (size_t c = 0; c < t.columns.size(); ++c)
    if (t.columns[c].header == header) return c;
  ADD_FAILURE() << "no column " << header;
  return 0;
}

// The Markdown cells of the row whose first cell is `label`.
std::vector<std::string> markdown_row(const std::string& md, const std::string& label) {
  std::istringstream is(md);
  for (std::string line; std::getline(is, line);) {
    if (!line.starts_with("| " + label + " |")) continue;
    std::vector<std::string> cells;
    for (size_t p = 1, q; (q = line.find(" |", p)) != std::string::npos; p = q + 2)
      cells.push_back(line.substr(p + 1, q - p - 1));
    return cells;
  }
  return {};
}

constexpr int64_t MiB = 1 << 20;

TEST(ReportAllreduce, ColumnsPerRankCountAscendingWithRepeatMeansAndNulls) {
  TempDir dir;
  const fs::path study = fs::path(dir.str()) / "study" / "allreduce";
  const std::vector<Point> n2 = {{MiB, 40.0}, {4 * MiB, 100.0}, {16 * MiB, 350.0}};
  const std::vector<Point> n4 = {{MiB, 45.0}, {16 * MiB, 300.0}};  // no 4 MiB
  const std::vector<Point> n8a = {{MiB, 60.0}, {4 * MiB, 120.0}, {16 * MiB, 380.0}};
  const std::vector<Point> n8b = {{MiB, 64.0}, {4 * MiB, 130.0}, {16 * MiB, 400.0}};
  // Written out of order and one level deeper for the second repeat: the scan is recursive and sorts.
  write_text(study / "gpu-n8-ring-20261122T050000Z.json", bench_json(8, n8a).dump(2));
  write_text(study / "gpu-n4-ring-20261122T040000Z.json", bench_json(4, n4).dump(2));
  write_text(study / "gpu-n2-ring-20261122T030000Z.json", bench_json(2, n2).dump(2));
  write_text(fs::path(dir.str()) / "again" / "node-b" / "allreduce" / "gpu-n8-ring-20261123T050000Z.json",
             bench_json(8, n8b).dump());
  // Not taken: another benchmark, JSON outside an allreduce folder, hidden temporaries, other files.
  json gemm = bench_json(2, n2);
  gemm["benchmark"] = "gemm";
  write_text(study / "gemm.json", gemm.dump());
  write_text(fs::path(dir.str()) / "study" / "other" / "x.json", bench_json(2, n2).dump());
  write_text(study / ".gpu-n2-ring-20261122T030000Z.123.tmp", "{");
  write_text(study / "notes.txt", "not json");
  // Malformed: skipped with a warning naming each.
  json no_rows = bench_json(2, n2);
  no_rows.erase("rows");
  write_text(study / "broken.json", "{\"benchmark\": \"allreduce\", ");
  write_text(study / "norows.json", no_rows.dump());

  int skipped = -1;
  ::testing::internal::CaptureStderr();
  const auto files = report::find_allreduce_benches(dir.str(), &skipped);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(skipped, 2);
  EXPECT_NE(err.find((study / "broken.json").string()), std::string::npos) << err;
  EXPECT_NE(err.find((study / "norows.json").string() + ": missing \"rows\""), std::string::npos) << err;
  EXPECT_EQ(err.find("gemm.json"), std::string::npos) << err;
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(files[0].bench.ranks, 8);  // again/... sorts before study/...
  EXPECT_EQ(files[0].host, "node-a");
  EXPECT_EQ(files[0].time, "2026-11-22T04:43:00Z");

  const report::Table t = report::allreduce_table(files);
  std::vector<std::string> headers;
  for (const auto& c : t.columns) headers.push_back(c.header);
  EXPECT_EQ(headers, (std::vector<std::string>{"size", "bytes", "busbw 2 GPUs (GB/s)", "busbw 4 GPUs (GB/s)",
                                               "busbw 8 GPUs (GB/s)", "time 2 GPUs (µs)", "time 4 GPUs (µs)",
                                               "time 8 GPUs (µs)"}));
  ASSERT_EQ(t.rows.size(), 3u);
  const std::vector<std::string> labels = {"1 MiB", "4 MiB", "16 MiB"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(t.rows[i][0].text, labels[i]);
    EXPECT_EQ(t.rows[i][1].text, std::to_string(n2[i].bytes));
    const report::Stat b2 = t.rows[i][column(t, "busbw 2 GPUs (GB/s)")].value;
    EXPECT_EQ(b2.n, 1);
    EXPECT_DOUBLE_EQ(b2.mean, busbw(2, n2[i]));
    EXPECT_TRUE(std::isnan(b2.std));
    EXPECT_DOUBLE_EQ(t.rows[i][column(t, "time 2 GPUs (µs)")].value.mean, n2[i].time_us);
    // Two repeats at 8: mean and sample std (n - 1) of the two values.
    const report::Stat b8 = t.rows[i][column(t, "busbw 8 GPUs (GB/s)")].value;
    const double x = busbw(8, n8a[i]), y = busbw(8, n8b[i]);
    EXPECT_EQ(b8.n, 2);
    EXPECT_DOUBLE_EQ(b8.mean, (x + y) / 2);
    EXPECT_NEAR(b8.std, std::abs(x - y) / std::sqrt(2.0), 1e-12 * x);
    const report::Stat t8 = t.rows[i][column(t, "time 8 GPUs (µs)")].value;
    EXPECT_DOUBLE_EQ(t8.mean, (n8a[i].time_us + n8b[i].time_us) / 2);
    EXPECT_NEAR(t8.std, std::abs(n8a[i].time_us - n8b[i].time_us) / std::sqrt(2.0), 1e-12);
  }
  EXPECT_DOUBLE_EQ(t.rows[2][column(t, "busbw 4 GPUs (GB/s)")].value.mean, busbw(4, n4[1]));
  EXPECT_TRUE(t.rows[1][column(t, "busbw 4 GPUs (GB/s)")].value.null());
  EXPECT_TRUE(t.rows[1][column(t, "time 4 GPUs (µs)")].value.null());

  // Markdown: "—" for the missing size, "mean ± std" for the repeats.
  const std::string md = report::render_markdown(t);
  const auto row4 = markdown_row(md, "4 MiB");
  ASSERT_EQ(row4.size(), 8u) << md;
  EXPECT_EQ(row4[column(t, "busbw 4 GPUs (GB/s)")], "—") << md;
  EXPECT_EQ(row4[column(t, "time 4 GPUs (µs)")], "—") << md;
  EXPECT_EQ(row4[column(t, "time 8 GPUs (µs)")], "125.0 ± 7.071") << md;
  EXPECT_EQ(row4[column(t, "time 2 GPUs (µs)")], "100.0") << md;

  // CSV: names per rank count, exact numbers, empty fields for the missing size.
  const auto records = testing::csv_records(report::render_csv(t));
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0],
            (std::vector<std::string>{"size", "bytes", "busbw_gbs_n2_mean", "busbw_gbs_n2_std", "busbw_gbs_n4_mean",
                                      "busbw_gbs_n4_std", "busbw_gbs_n8_mean", "busbw_gbs_n8_std", "time_us_n2_mean",
                                      "time_us_n2_std", "time_us_n4_mean", "time_us_n4_std", "time_us_n8_mean",
                                      "time_us_n8_std"}));
  EXPECT_EQ(records[2][1], "4194304");
  EXPECT_EQ(records[2][4], "");  // busbw_gbs_n4_mean
  EXPECT_EQ(records[2][5], "");
  EXPECT_EQ(records[2][10], "");  // time_us_n4_mean
  EXPECT_EQ(std::stod(records[2][6]), t.rows[1][column(t, "busbw 8 GPUs (GB/s)")].value.mean);
  EXPECT_EQ(records[1][3], "");  // one file at n = 2: no std
  EXPECT_EQ(std::stod(records[3][12]), (380.0 + 400.0) / 2);

  std::string notes;
  for (const auto& n : t.notes) notes += n + "\n";
  EXPECT_NE(notes.find("Library: NCCL 2.28.9, NCCL_ALGO=Ring."), std::string::npos) << notes;
  EXPECT_NE(notes.find("8 GPUs: 8 × NVIDIA H200 on 1 host"), std::string::npos) << notes;
  EXPECT_NE(notes.find("Files (repeats): 1 (2 GPUs, 4 GPUs); 2 (8 GPUs)."), std::string::npos) << notes;
  EXPECT_NE(notes.find("— : "), std::string::npos) << notes;
  EXPECT_NE(t.caption.find("busbw = algbw × 2(n−1)/n"), std::string::npos);
}

// GPU allreduces issued from the host (files written before graph replay, which have no "issue", or
// --issue host) are another setting than graph-replayed ones of the same ranks: their small sizes
// also time the host's enqueue. A value other than graph or host names the file.
TEST(ReportAllreduce, HostIssuedGpuFilesKeepApartFromGraphReplayedOnes) {
  TempDir dir;
  const fs::path d = fs::path(dir.str()) / "bench" / "allreduce";
  write_text(d / "graph.json", bench_json(4, {{1 << 20, 25.0}}).dump());
  json old = bench_json(4, {{1 << 20, 199.0}});
  old.erase("issue");
  write_text(d / "old.json", old.dump());
  const report::Table t = report::allreduce_table(report::find_allreduce_benches(dir.str()));
  std::vector<std::string> csv;
  for (const auto& c : t.columns) csv.push_back(c.csv);
  EXPECT_EQ(csv, (std::vector<std::string>{"size", "bytes", "busbw_gbs_gpu_ring_n4", "time_us_gpu_ring_n4",
                                           "busbw_gbs_gpu_ring_host_issued_n4", "time_us_gpu_ring_host_issued_n4"}));
  EXPECT_EQ(t.columns[4].header, "busbw 4 GPUs, ring host-issued (GB/s)");
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_DOUBLE_EQ(t.rows[0][3].value.mean, 25.0);
  EXPECT_DOUBLE_EQ(t.rows[0][5].value.mean, 199.0);

  // A CTA cap (--max-ctas) is a setting of its own too, never a repeat of NCCL's own choice.
  json capped = bench_json(4, {{1 << 20, 40.0}});
  capped["max_ctas"] = 8;
  write_text(d / "capped.json", capped.dump());
  const report::Table c = report::allreduce_table(report::find_allreduce_benches(dir.str()));
  std::vector<std::string> headers;
  for (const auto& col : c.columns) headers.push_back(col.header);
  EXPECT_NE(std::find(headers.begin(), headers.end(), "time 4 GPUs, ring <=8 CTAs (µs)"), headers.end());
  EXPECT_EQ(c.columns.size(), 8u);

  // So are a CTA policy (--cta-policy) and a low-priority stream (--priority); null is the default.
  json efficient = bench_json(4, {{1 << 20, 30.0}});
  efficient["cta_policy"] = "efficiency";
  write_text(d / "efficient.json", efficient.dump());
  json low = bench_json(4, {{1 << 20, 35.0}});
  low["cta_policy"] = nullptr;
  low["priority"] = "low";
  write_text(d / "low.json", low.dump());
  const report::Table p = report::allreduce_table(report::find_allreduce_benches(dir.str()));
  std::vector<std::string> csv_p, headers_p;
  for (const auto& col : p.columns) {
    csv_p.push_back(col.csv);
    headers_p.push_back(col.header);
  }
  EXPECT_EQ(p.columns.size(), 12u);
  EXPECT_NE(std::find(headers_p.begin(), headers_p.end(), "time 4 GPUs, ring efficiency (µs)"), headers_p.end());
  EXPECT_NE(std::find(headers_p.begin(), headers_p.end(), "busbw 4 GPUs, ring low priority (GB/s)"), headers_p.end());
  EXPECT_NE(std::find(csv_p.begin(), csv_p.end(), "time_us_gpu_ring_efficiency_n4"), csv_p.end());
  EXPECT_NE(std::find(csv_p.begin(), csv_p.end(), "busbw_gbs_gpu_ring_low_priority_n4"), csv_p.end());
  fs::remove(d / "efficient.json");
  fs::remove(d / "low.json");

  // A file with an unknown mode is malformed: the report skips it (with a warning naming it), as
  // it does every malformed bench file.
  json bad = bench_json(4, {{8, 20.0}});
  bad["issue"] = "stream";
  write_text(d / "bad.json", bad.dump());
  json bad_policy = bench_json(4, {{8, 20.0}});
  bad_policy["cta_policy"] = "fewest";
  write_text(d / "bad_policy.json", bad_policy.dump());
  json bad_priority = bench_json(4, {{8, 20.0}});
  bad_priority["priority"] = "medium";
  write_text(d / "bad_priority.json", bad_priority.dump());
  EXPECT_EQ(report::find_allreduce_benches(dir.str()).size(), 3u);  // graph, old and capped
}

// Rank counts sort as numbers (16 after 2), and two settings keep apart in labelled columns.
TEST(ReportAllreduce, ManyRanksAndSeveralSettings) {
  TempDir dir;
  const fs::path d = fs::path(dir.str()) / "bench" / "allreduce";
  write_text(d / "a.json", bench_json(16, {{8, 30.0}}).dump());
  write_text(d / "b.json", bench_json(2, {{8, 10.0}}).dump());
  write_text(d / "c.json", bench_json(2, {{8, 12.0}}, "gpu", "tree").dump());
  write_text(d / "d.json", bench_json(4, {{8, 20.0}}, "cpu", "mpi").dump());
  write_text(d / "e.json", bench_json(2, {{8, 14.0}}).dump());
  const report::Table t = report::allreduce_table(report::find_allreduce_benches(dir.str()));
  std::vector<std::string> csv;
  for (const auto& c : t.columns) csv.push_back(c.csv);
  EXPECT_EQ(csv, (std::vector<std::string>{"size", "bytes", "busbw_gbs_gpu_ring_n2", "busbw_gbs_gpu_ring_n16",
                                           "time_us_gpu_ring_n2", "time_us_gpu_ring_n16", "busbw_gbs_gpu_tree_n2",
                                           "time_us_gpu_tree_n2", "busbw_gbs_cpu_mpi_n4", "time_us_cpu_mpi_n4"}));
  EXPECT_EQ(t.columns[3].header, "busbw 16 GPUs, ring (GB/s)");
  EXPECT_EQ(t.columns[8].header, "busbw 4 CPU ranks, mpi (GB/s)");
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(t.rows[0][0].text, "8 B");
  EXPECT_DOUBLE_EQ(t.rows[0][7].value.mean, 12.0);
  EXPECT_DOUBLE_EQ(t.rows[0][4].value.mean, 12.0);  // ring on 2: 10 and 14
  std::string notes;
  for (const auto& n : t.notes) notes += n + "\n";
  EXPECT_NE(notes.find("Files (repeats): 2 (2 GPUs ring); 1 (16 GPUs ring, 2 GPUs tree, 4 CPU ranks mpi)."),
            std::string::npos)
      << notes;
  EXPECT_NE(notes.find("16 GPUs, ring: 16 × NVIDIA H200 on 1 host"), std::string::npos) << notes;
}

TEST(ReportAllreduce, SizeLabelsAndEmptyInput) {
  TempDir dir;
  const fs::path d = fs::path(dir.str()) / "bench" / "allreduce";
  write_text(d / "a.json", bench_json(2, {{1000, 1.0}, {1536, 1.0}, {int64_t{1} << 30, 1.0}}).dump());
  const report::Table t = report::allreduce_table(report::find_allreduce_benches(dir.str()));
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.rows[0][0].text, "1000 B");
  EXPECT_EQ(t.rows[1][0].text, "1.5 KiB");
  EXPECT_EQ(t.rows[2][0].text, "1 GiB");
  const report::Table none = report::allreduce_table({});
  EXPECT_TRUE(none.rows.empty());
  EXPECT_TRUE(none.all_null());
  EXPECT_THROW(report::find_allreduce_benches(dir.file("missing")), ConfigError);
}

TEST(ReportAllreduce, WriterNeverReplacesAFileAndLeavesNoTemporaries) {
  TempDir dir;
  const std::string d = report::allreduce_bench_dir(dir.str(), "bench");
  report::prepare_allreduce_bench_dir(d);
  AllreduceBenchResult r;
  r.device = "gpu";
  r.ranks = 8;
  r.algo = "^nvls,ring";
  const std::string stem = report::allreduce_bench_stem(r, "20261122T044300Z");
  EXPECT_EQ(stem, "gpu-n8-_nvls_ring-20261122T044300Z");
  auto summary = [](int k) { return json{{"k", k}, {"rows", json::array({json{{"bytes", 8}, {"time_us", k}}})}}; };
  const std::string a = report::write_allreduce_bench_folder(d, stem, summary(1));
  const std::string b = report::write_allreduce_bench_folder(d, stem, summary(2));
  const std::string c = report::write_allreduce_bench_folder(d, stem, summary(3));
  EXPECT_EQ(a, (fs::path(d) / stem).string());
  EXPECT_EQ(b, (fs::path(d) / (stem + "-1")).string());
  EXPECT_EQ(c, (fs::path(d) / (stem + "-2")).string());
  EXPECT_EQ(json::parse(testing::slurp(a + "/summary.json"))["k"], 1);
  EXPECT_EQ(json::parse(testing::slurp(b + "/summary.json"))["k"], 2);
  const auto rows = testing::read_csv(c + "/cases.csv");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].at("time_us"), "3");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(d)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{stem, stem + "-1", stem + "-2"}));  // no temporary left
  // A root that is a file cannot hold the folder.
  std::ofstream(dir.file("plain")) << "x";
  EXPECT_THROW(report::prepare_allreduce_bench_dir(report::allreduce_bench_dir(dir.file("plain"), "bench")),
               ConfigError);
}

// Files that measured energy make the allreduce_energy table: "above idle", "energy" and "power"
// columns per rank count, holding the files' figures; a file without energy (energy off, or written
// before it existed) has no column there, a one-rank file is left out with a note (nothing moves),
// and the busbw/time table carries no energy column. `cnnscale report` writes the table and, where
// matplotlib is importable, its figure.
TEST(ReportAllreduce, EnergyTableOfTheFilesThatMeasuredEnergy) {
  TempDir dir;
  const fs::path study = fs::path(dir.str()) / "study" / "allreduce";
  auto with_energy = [](json j, double idle, const std::vector<double>& nj, const std::vector<double>& dynamic) {
    j["energy_method"] = "NVML total energy counter";
    j["energy_window_seconds"] = 2.0;
    j["idle_watts_per_device"] = idle;
    for (size_t i = 0; i < j["rows"].size(); ++i) {
      json& row = j["rows"][i];
      row["energy_iters"] = 1000;
      row["energy_seconds"] = 2.1;
      row["joules"] = nj[i] * row["bytes"].get<double>() * 1e-9;
      row["nj_per_byte"] = nj[i];
      row["dynamic_nj_per_byte"] = dynamic[i];
      row["watts_per_device"] = 300.0;
    }
    return j;
  };
  write_text(study / "gpu-n2-ring-a.json",
             with_energy(bench_json(2, {{MiB, 40.0}, {4 * MiB, 100.0}}), 70.0, {0.5, 0.25}, {0.2, 0.1}).dump());
  write_text(study / "gpu-n1-ring-a.json", with_energy(bench_json(1, {{MiB, 2.0}}), 70.0, {0.1}, {0.0}).dump());
  write_text(study / "gpu-n4-ring-a.json", bench_json(4, {{MiB, 60.0}}).dump());
  const auto files = report::find_allreduce_benches(dir.str());
  ASSERT_EQ(files.size(), 3u);
  const report::AllreduceBenchFile& two = files[1];  // sorted by path: n1, n2, n4
  ASSERT_EQ(two.bench.ranks, 2);
  EXPECT_EQ(two.bench.idle_watts, 70.0);
  EXPECT_EQ(two.bench.rows[1].watts, 300.0);
  EXPECT_TRUE(std::isnan(files[2].bench.rows[0].nj_per_byte));
  const report::Table t = report::allreduce_energy_table(files);
  EXPECT_EQ(t.name, "allreduce_energy");
  ASSERT_EQ(t.columns.size(), 5u) << "size, bytes and the three figures of 2 GPUs only";
  const size_t d2 = column(t, "above idle 2 GPUs (nJ/B)"), e2 = column(t, "energy 2 GPUs (nJ/B)"),
               w2 = column(t, "power 2 GPUs (W per GPU)");
  EXPECT_EQ(t.columns[d2].csv, "dynamic_nj_per_byte_n2");
  EXPECT_EQ(t.columns[e2].csv, "nj_per_byte_n2");
  EXPECT_EQ(t.columns[w2].csv, "watts_n2");
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_DOUBLE_EQ(t.rows[0][e2].value.mean, 0.5);
  EXPECT_DOUBLE_EQ(t.rows[1][d2].value.mean, 0.1);
  EXPECT_DOUBLE_EQ(t.rows[1][w2].value.mean, 300.0);
  std::string notes;
  for (const std::string& n : t.notes) notes += n + "\n";
  EXPECT_NE(notes.find("Idle power per GPU, over a window before the sweep: 70 W."), std::string::npos) << notes;
  EXPECT_NE(notes.find("Files of one rank are left out"), std::string::npos) << notes;
  for (const auto& c : report::allreduce_table(files).columns)
    EXPECT_EQ(c.header.find("energy"), std::string::npos) << c.header;
  EXPECT_TRUE(report::allreduce_energy_table({files[2]}).rows.empty());

  const bool plots = std::system("/usr/bin/python3 -c 'import matplotlib, numpy' >/dev/null 2>&1") == 0;
  std::vector<std::string> args = {"report", dir.str()};
  if (!plots) args.push_back("--no-plots");
  testing::CliResult rep = testing::run_cnnscale(args);
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const fs::path out = fs::path(dir.str()) / "report";
  EXPECT_NE(testing::slurp((out / "allreduce_energy.csv").string()).find("dynamic_nj_per_byte_n2_mean"),
            std::string::npos);
  if (plots) {
    EXPECT_GT(fs::file_size(out / report::kAllreduceEnergyFigure), 1000u);
  }
}

}  // namespace
}  // namespace cnnscale
