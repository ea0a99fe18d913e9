// Tables of the kernel benchmarks' result folders.
#include "experiment/report_kernels.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "core/bench_timing.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "experiment/report_data.hpp"

namespace cnnscale::report {

namespace {

namespace fs = std::filesystem;

double num(const NumberFigure& f) {
  return f.value_or(kMissing);
}

std::string text(const TextFigure& f) {
  return f.value_or("");
}

// "NVIDIA H100 80GB HBM3" of the backend's description (the versions are in the result folder).
std::string device_name(const std::string& description) {
  return description.substr(0, description.find(" ("));
}

// kMissing is a NaN: never compared with ==.
bool missing(double v) {
  return std::isnan(v);
}

std::string fixed(double v, int digits) {
  return missing(v) ? "" : fmt::format("{:.{}f}", v, digits);
}

std::string variant(const KernelBenchCase& r) {
  return text(r.library) + " " + text(r.algorithm);
}

bool is_sweep(const KernelBenchFile& f) {
  return f.s.sweep_axis.has_value();
}

std::string bench_name(const KernelBenchFile& f) {
  std::string s = f.s.kind.value_or("?") + " " + f.s.precision.value_or("?");
  if (f.s.kind.value_or("") == "conv" && f.s.layout.has_value()) s += " " + f.s.layout.value();
  return s;
}

const std::vector<KernelBenchCase>& rows_of(const KernelBenchFile& f) {
  static const std::vector<KernelBenchCase> none;
  return f.s.rows.has_value() ? f.s.rows.value() : none;
}

using CaseKey = std::pair<int64_t, std::string>;  // problem, pass
CaseKey key_of(const KernelBenchCase& r) {
  return {r.problem.value_or(-1), text(r.pass)};
}

// The rows of each (problem, pass), in file order.
std::vector<std::vector<const KernelBenchCase*>> cases_of(const KernelBenchFile& f) {
  std::vector<std::vector<const KernelBenchCase*>> out;
  CaseKey key{-1, ""};
  for (const KernelBenchCase& r : rows_of(f)) {
    const CaseKey k = key_of(r);
    if (out.empty() || k != key) out.emplace_back();
    key = k;
    out.back().push_back(&r);
  }
  return out;
}

const KernelBenchCase* marked(const std::vector<const KernelBenchCase*>& rows, FlagFigure KernelBenchCase::*flag) {
  for (const KernelBenchCase* r : rows)
    if ((r->*flag).value_or(false)) return r;
  return nullptr;
}

}  // namespace

void for_each_result_summary(const std::string& results_dir, const std::string& kind,
                             const std::function<void(const std::string& path)>& read) {
  std::vector<std::string> paths;
  std::error_code ec;
  if (!fs::is_directory(results_dir, ec)) return;
  // Folder by folder, so that one that cannot be read is named and skipped, not the end of the walk
  // (a recursive iterator stops at its first error). Links are not followed, as the iterator would not.
  std::vector<fs::path> folders{results_dir};
  while (!folders.empty()) {
    const fs::path folder = folders.back();
    folders.pop_back();
    fs::directory_iterator it(folder, ec);
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
      const fs::path p = it->path();
      if (it->is_directory(ec) && !it->is_symlink(ec)) {
        folders.push_back(p);
      } else if (p.filename() == "summary.json" && p.parent_path().parent_path().filename() == kind &&
                 !p.parent_path().filename().string().starts_with(".tmp-")) {  // .tmp-: not (yet) published
        paths.push_back(p.string());
      }
    }
    if (ec) log::warn("report: skipping {}: {}", folder.string(), ec.message());
    ec.clear();
  }
  std::sort(paths.begin(), paths.end());
  for (const std::string& p : paths) {
    try {
      read(p);
    } catch (const std::exception& e) {
      const std::string why = e.what();  // the readers' own errors already begin with the file
      log::warn("report: skipping {}", why.starts_with(p) ? why : fmt::format("{}: {}", p, why));
    }
  }
}

std::vector<KernelBenchFile> find_kernel_benches(const std::string& results_dir) {
  std::vector<KernelBenchFile> out;
  for_each_result_summary(results_dir, "bench", [&](const std::string& p) {
    std::ifstream in(p);
    const nlohmann::json j = nlohmann::json::parse(in);
    out.push_back({p, kernel_bench_result_from_json(j, p)});
  });
  return out;
}

Table kernel_summary_table(const std::vector<KernelBenchFile>& files) {
  Table t;
  t.name = "kernels";
  t.title = "Kernel benchmarks (bench gemm, conv, rnn, spmm)";
  t.caption =
      "One row per benchmark: its problems (a problem of a conv benchmark counts once per pass), the variants that "
      "ran of those listed (unsupported ones are cuDNN's or cuBLAS' refusals), the peak its TFLOP/s are set against "
      "(the fastest square GEMM of the format on the same device), the problems whose fastest variant reached the "
      "highest and lowest share of it, and, where energy was measured, how often the fastest variant was not the "
      "one of least energy per call, how often the latter saves more than 5 % (the repeatability of two 0.5 s power "
      "windows of one variant, measured against 2 s windows: smaller differences are not findings), and the median "
      "energy that choosing it saves. A list split over runs (--from, or resumed after a stop) is one row, with how "
      "much of it the runs cover; an interrupted run says where its list stopped.";
  t.columns = {Column("benchmark", "benchmark", false),
               Column("problems from", "source", false),
               Column("device", "device", false),
               Column("problems", "problems", false),
               Column("variants ran / listed", "variants", false),
               Column("peak (TFLOP/s)", "peak_tflops", false),
               Column("best problem (% of peak)", "best", false),
               Column("worst problem (% of peak)", "worst", false),
               Column("median % of peak", "median_peak_percent", false),
               Column("fastest ≠ least energy", "fastest_not_least_energy", false),
               Column("… saving > 5 %", "least_energy_saves_over_5_percent", false),
               Column("median energy saved (%)", "median_energy_saved_percent", false)};
  // A list split over runs (--from/--limit, or resumed after a stop) is one benchmark: the files of
  // one kind, format, device and list merge, each (problem, pass) once (a later run's replaces an
  // earlier one's). Files are sorted by path, whose stamps order them in time.
  struct Group {
    std::vector<const KernelBenchFile*> files;
    std::map<CaseKey, std::vector<const KernelBenchCase*>> cases;
  };
  std::map<std::tuple<std::string, std::string, std::string>, Group> groups;
  std::vector<std::tuple<std::string, std::string, std::string>> order;
  for (const KernelBenchFile& f : files) {
    if (is_sweep(f)) continue;
    const std::string source = text(f.s.source);
    const std::tuple<std::string, std::string, std::string> key{bench_name(f), text(f.s.device),
                                                                source.substr(0, source.find(" (problems "))};
    if (!groups.count(key)) order.push_back(key);
    Group& g = groups[key];
    g.files.push_back(&f);
    for (const auto& rows : cases_of(f)) g.cases[key_of(*rows[0])] = rows;
  }
  for (const auto& key : order) {
    const Group& g = groups.at(key);
    const KernelBenchFile& f = *g.files.back();
    int ran = 0, listed = 0, with_energy = 0, differ = 0, beyond_noise = 0;
    std::vector<double> fractions, saved;
    const KernelBenchCase *best = nullptr, *worst = nullptr;
    std::set<int64_t> problems;
    for (const auto& [case_key, rows] : g.cases) {
      problems.insert(case_key.first);
      for (const KernelBenchCase* r : rows) {
        ++listed;
        ran += r->supported.value_or(false) ? 1 : 0;
      }
      const KernelBenchCase* fast = marked(rows, &KernelBenchCase::fastest);
      const KernelBenchCase* frugal = marked(rows, &KernelBenchCase::lowest_energy);
      if (fast && !missing(num(fast->peak_fraction))) {
        const double p = num(fast->peak_fraction);
        fractions.push_back(p);
        if (!best || p > num(best->peak_fraction)) best = fast;
        if (!worst || p < num(worst->peak_fraction)) worst = fast;
      }
      // Both with an energy figure: a variant whose window failed is no comparison.
      if (fast && frugal && !missing(num(fast->joules_per_call)) && !missing(num(frugal->joules_per_call))) {
        ++with_energy;
        if (fast != frugal) {
          ++differ;
          saved.push_back(100 * (1 - num(frugal->joules_per_call) / num(fast->joules_per_call)));
          beyond_noise += saved.back() > 5.0 ? 1 : 0;
        }
      }
    }
    auto describe = [&](const KernelBenchCase* r) {
      return r ? fmt::format("{}{} ({:.1f})", text(r->label), text(r->pass).empty() ? "" : ", " + text(r->pass),
                             100 * num(r->peak_fraction))
               : std::string();
    };
    // The list, and how much of it the runs cover: "(problems 20 to 160 of 160)" gives the length.
    std::string source = std::get<2>(key);
    const std::string last_source = text(f.s.source);
    const size_t of = last_source.rfind(" of ");
    const bool sliced = g.files.size() > 1 || last_source.find(" (problems ") != std::string::npos;
    if (sliced && of != std::string::npos)
      source += fmt::format(" ({} of {} problems, {} run{})", problems.size(),
                            last_source.substr(of + 4, last_source.find(')', of) - of - 4), g.files.size(),
                            g.files.size() > 1 ? "s" : "");
    if (f.s.status.value_or("complete") == "interrupted" && f.s.resume_from.has_value())
      source += fmt::format(", interrupted before problem {}", f.s.resume_from.value());
    // Each run measured its own peak; a merged benchmark shows their range.
    double peak_lo = kMissing, peak_hi = kMissing;
    for (const KernelBenchFile* x : g.files) {
      const double p = num(x->s.peak_tflops);
      if (missing(p)) continue;
      peak_lo = missing(peak_lo) ? p : std::min(peak_lo, p);
      peak_hi = missing(peak_hi) ? p : std::max(peak_hi, p);
    }
    const std::string peak = missing(peak_lo) || fixed(peak_lo, 1) == fixed(peak_hi, 1)
                                 ? fixed(peak_lo, 1)
                                 : fixed(peak_lo, 1) + "–" + fixed(peak_hi, 1);
    t.rows.push_back({Cell::of(std::get<0>(key)), Cell::of(source), Cell::of(device_name(std::get<1>(key))),
                      Cell::of(std::to_string(g.cases.size())), Cell::of(fmt::format("{} / {}", ran, listed)),
                      Cell::of(peak), Cell::of(describe(best)), Cell::of(describe(worst)),
                      Cell::of(fractions.empty() ? "" : fixed(100 * median_of(fractions), 1)),
                      Cell::of(with_energy ? fmt::format("{} of {}", differ, with_energy) : "no energy"),
                      Cell::of(with_energy ? fmt::format("{} of {}", beyond_noise, with_energy) : ""),
                      Cell::of(saved.empty() ? "" : fixed(median_of(saved), 1))});
  }
  return t;
}

Table kernel_cases_table(const std::vector<KernelBenchFile>& files) {
  Table t;
  t.name = "kernel_cases";
  t.title = "Kernel benchmarks per problem";
  t.caption =
      "The fastest variant of each problem (and pass): median time per call, TFLOP/s counted with the problem's "
      "direct FLOPs (FFT and Winograd compute fewer and can pass the peak), share of the peak, mean power and energy "
      "per call over a window between two energy-counter updates; then the variant of least energy where it is "
      "another, with the energy it saves and the time it costs.";
  t.columns = {Column("benchmark", "benchmark", false),
               Column("problem", "problem", false),
               Column("pass", "pass", false),
               Column("fastest variant", "fastest", false),
               Column("ms", "median_ms", false),
               Column("TFLOP/s", "tflops", false),
               Column("% of peak", "peak_percent", false),
               Column("W", "watts", false),
               Column("mJ per call", "millijoules_per_call", false),
               Column("least-energy variant", "least_energy", false),
               Column("energy saved (%)", "energy_saved_percent", false),
               Column("time cost (%)", "time_cost_percent", false)};
  for (const KernelBenchFile& f : files) {
    if (is_sweep(f)) continue;
    for (const auto& rows : cases_of(f)) {
      const KernelBenchCase* fast = marked(rows, &KernelBenchCase::fastest);
      if (!fast) {
        t.rows.push_back({Cell::of(bench_name(f)), Cell::of(text(rows[0]->label)), Cell::of(text(rows[0]->pass)),
                          Cell::of("no variant ran"), Cell::of(""), Cell::of(""), Cell::of(""), Cell::of(""),
                          Cell::of(""), Cell::of(""), Cell::of(""), Cell::of("")});
        continue;
      }
      const KernelBenchCase* frugal = marked(rows, &KernelBenchCase::lowest_energy);
      const double j_fast = num(fast->joules_per_call);
      const bool other = frugal && frugal != fast && !missing(j_fast);
      t.rows.push_back(
          {Cell::of(bench_name(f)), Cell::of(text(fast->label)), Cell::of(text(fast->pass)), Cell::of(variant(*fast)),
           Cell::of(fixed(num(fast->median_ms), 4)), Cell::of(fixed(num(fast->tflops), 1)),
           Cell::of(missing(num(fast->peak_fraction)) ? "" : fmt::format("{:.3g}", 100 * num(fast->peak_fraction))),
           Cell::of(fixed(num(fast->watts), 0)), Cell::of(missing(j_fast) ? "" : fixed(1e3 * j_fast, 4)),
           Cell::of(other    ? variant(*frugal)
                    : frugal ? "the fastest"
                             : ""),
           Cell::of(other ? fixed(100 * (1 - num(frugal->joules_per_call) / j_fast), 1) : ""),
           Cell::of(other ? fixed(100 * (num(frugal->median_ms) / num(fast->median_ms) - 1), 1) : "")});
    }
  }
  return t;
}

Table conv_sweep_table(const std::vector<KernelBenchFile>& files) {
  Table t;
  t.name = "conv_sweep";
  t.title = "Convolution sweeps (bench conv --sweep)";
  t.caption =
      "Li et al.'s one-axis sweeps around a base (batch b, input i, filters f, kernel k, stride s): every cuDNN "
      "algorithm's median time per call and the device memory of the call (operands and its workspace) at each "
      "value of the swept axis, per pass; an algorithm cuDNN refuses at a value has its status instead of a time.";
  t.columns = {Column("benchmark", "benchmark", false),
               Column("axis", "axis", false),
               Column("value", "value", false),
               Column("pass", "pass", false),
               Column("algorithm", "algorithm", false),
               Column("ms", "median_ms", false),
               Column("memory (MiB)", "memory_mib", false),
               Column("status", "status", false)};
  for (const KernelBenchFile& f : files) {
    if (!is_sweep(f)) continue;
    for (const KernelBenchCase& r : rows_of(f)) {
      const bool ran = r.supported.value_or(false);
      t.rows.push_back({Cell::of(bench_name(f)), Cell::of(f.s.sweep_axis.value()),
                        Cell::of(fmt::format("{}", r.sweep_value.value_or(0))), Cell::of(text(r.pass)),
                        Cell::of(text(r.algorithm)), Cell::of(ran ? fixed(num(r.median_ms), 4) : ""),
                        Cell::of(ran ? fixed(static_cast<double>(r.memory_bytes.value_or(0)) / 1048576.0, 1) : ""),
                        Cell::of(ran ? "" : text(r.status))});
    }
  }
  return t;
}

}  // namespace cnnscale::report
