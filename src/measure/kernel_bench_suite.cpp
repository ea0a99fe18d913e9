// Running a kernel benchmark over a problem list.
#include "measure/kernel_bench_suite.hpp"

#include <fmt/format.h>

#include <chrono>
#include <map>
#include <thread>

#include "core/error.hpp"
#include "core/log.hpp"
#include "measure/bench_shapes.hpp"

namespace cnnscale::measure {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

PowerWindow power_of(Backend& backend, KernelCase& c, size_t v, double seconds_per_call, const KernelBenchOptions& o) {
  PowerWindowHooks h;
  h.counter_joules = o.counter_joules;
  h.enqueue = [&](int64_t n) {
    for (int64_t i = 0; i < n; ++i) c.run(v);
  };
  h.now_seconds = now_seconds;
  h.sleep_seconds = [](double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); };
  h.drain = [&] { backend.synchronize(); };
  return measure_power_window(h, seconds_per_call, o.energy_window_seconds, o.energy_settle_seconds);
}

// Times (and checks) every variant of one prepared case, appending its rows; then reads the power of
// those within --energy-within of the case's fastest (all, without it).
void run_case(Backend& backend, KernelCase& c, const KernelBenchRow& base, const Reference* ref, double tolerance,
              const KernelBenchOptions& o, KernelBenchResult& r) {
  std::vector<KernelBenchRow>& rows = r.rows;
  const double peak = r.peak_tflops;
  const auto& variants = c.variants();
  const size_t first = rows.size();
  double fastest_ms = 0;
  if (o.progress)
    for (const KernelVariant& v : variants)
      if (v.setup_ms && *v.setup_ms > 1000)
        o.progress(fmt::format("  {} {} prepared in {:.1f} s", v.library, v.algorithm, *v.setup_ms / 1e3));
  for (size_t v = 0; v < variants.size(); ++v) {
    if (o.stop_requested && o.stop_requested()) throw BenchStopped{};
    KernelBenchRow row = base;
    row.library = variants[v].library;
    row.algorithm = variants[v].algorithm;
    row.supported = variants[v].supported;
    row.status = variants[v].status;
    row.workspace_bytes = variants[v].workspace_bytes;
    row.setup_ms = variants[v].setup_ms;
    row.memory_bytes = c.operand_bytes() + variants[v].workspace_bytes;
    if (row.supported) {
      // The stop flag is polled before every call: a stop is answered within one call, not one variant.
      row.timing = time_calls(
          backend,
          [&] {
            if (o.stop_requested && o.stop_requested()) throw BenchStopped{};
            c.run(v);
          },
          o.timing);
      row.tflops = row.flops / (row.timing.median_ms * 1e-3) / 1e12;
      if (peak > 0) row.peak_fraction = row.tflops / peak;
      if (fastest_ms == 0 || row.timing.median_ms < fastest_ms) fastest_ms = row.timing.median_ms;
      if (o.profile_call) o.profile_call(row, [&] { c.run(v); });
      if (o.check) {
        if (ref) {
          row.check_error = normalized_error(c.output(v), *ref);
          row.check_tolerance = tolerance;
          row.check = *row.check_error <= row.check_tolerance ? "ok" : "MISMATCH";
        } else {
          row.check = fmt::format("not checked ({:.3g} MACs > --check-max-macs)", row.flops / 2);
        }
      }
    }
    rows.push_back(std::move(row));
  }
  if (o.energy_window_seconds <= 0 || !o.counter_joules) return;
  for (size_t v = 0; v < variants.size(); ++v) {
    KernelBenchRow& row = rows[first + v];
    if (!row.supported || row.timing.repeats == 0) continue;
    if (o.stop_requested && o.stop_requested()) throw BenchStopped{};
    if (o.energy_within > 0 && row.timing.median_ms > o.energy_within * fastest_ms) {
      row.energy_note = fmt::format("not read: {:.2f}x the fastest's time (--energy-within {:g})",
                                    row.timing.median_ms / fastest_ms, o.energy_within);
      continue;
    }
    const PowerWindow w = power_of(backend, c, v, row.timing.median_ms * 1e-3, o);
    row.watts = w.watts;
    row.energy_seconds = w.seconds;
    if (w.watts) row.joules_per_call = *w.watts * row.timing.median_ms * 1e-3;
    if (r.energy_method.empty() || w.watts) r.energy_method = w.method;
  }
}

// Runs problem i's work unless a stop was asked for before it; a stop asked for between its variants
// drops its rows (all its passes') and records it as the first problem not run. False: stop the loop.
bool run_problem(const KernelBenchOptions& o, size_t i, KernelBenchResult& r, const std::function<void()>& work) {
  const size_t first_row = r.rows.size();
  try {
    if (o.stop_requested && o.stop_requested()) throw BenchStopped{};
    work();
    return true;
  } catch (const BenchStopped&) {
    r.rows.resize(first_row);
    r.stopped_before = o.first_problem + static_cast<int64_t>(i);
    return false;
  }
}

// Runs one problem's work; a runtime failure (an allocation the device cannot make, a library error)
// becomes a row of that problem with the error as its status, so one problem never costs the rows of
// a long run. A configuration error (the request itself is wrong) still ends the run.
void survive_case(const KernelBenchRow& base, std::vector<KernelBenchRow>& rows, const std::function<void()>& work) {
  try {
    work();
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    KernelBenchRow row = base;
    row.library = "-";
    row.algorithm = "-";
    row.supported = false;
    row.status = e.what();
    rows.push_back(std::move(row));
    log::warn("{}{}: {}", base.label, base.pass.empty() ? "" : " " + base.pass, e.what());
  }
}

// The row every variant of problem i starts from: its index and label (its name first, where the
// list has names), after a progress line.
KernelBenchRow problem_row(const char* kind, size_t i, size_t count, const std::string& label, const std::string& pass,
                           const KernelBenchOptions& o) {
  KernelBenchRow base;
  base.problem = o.first_problem + static_cast<int64_t>(i);
  base.label = i < o.problem_names.size() ? o.problem_names[i] + ": " + label : label;
  base.pass = pass;
  if (o.progress)
    o.progress(fmt::format("{} {}/{}{}: {}", kind, o.first_problem + i + 1, o.first_problem + count,
                           pass.empty() ? "" : " " + pass, base.label));
  return base;
}

// The peak: the fastest variant of an n x n x n GEMM in the run's format, on the same device.
double measure_peak(Backend& backend, KernelBench& bench, const KernelBenchOptions& o, std::string* method) {
  if (o.peak_n <= 0) return 0;
  GemmProblem p{o.peak_n, o.peak_n, o.peak_n, false, false};
  std::unique_ptr<KernelCase> c = bench.gemm(p, o.precision, gemm_inputs(p, o.precision, o.seed));
  double best = 0;
  int repeats = 0;
  std::string how;
  for (size_t v = 0; v < c->variants().size(); ++v) {
    if (!c->variants()[v].supported) continue;
    const TimingStats t = time_calls(
        backend, [&] { c->run(v); }, o.timing);
    const double tflops = p.flops() / (t.median_ms * 1e-3) / 1e12;
    if (tflops > best) {
      best = tflops;
      repeats = t.repeats;
      how = c->variants()[v].library + " " + c->variants()[v].algorithm;
    }
  }
  *method = fmt::format(
      "fastest variant ({}) of a {}^3 {} GEMM on this device, median of {} repeats; every TFLOP/s counts a "
      "problem's direct FLOPs (2 m n k; 2 n k p q c r s), so FFT and Winograd algorithms, which compute fewer, can "
      "pass it",
      how, o.peak_n, kernel_precision_name(o.precision), repeats);
  return best;
}

// The result's header, and the peak measured before any problem.
KernelBenchResult start(Backend& backend, KernelBench& bench, const std::string& kind, const KernelBenchOptions& o) {
  KernelBenchResult r;
  r.kind = kind;
  r.device = backend.description();
  r.precision = kernel_precision_name(o.precision);
  r.layout = layout_name(o.layout);
  r.energy_window_seconds = o.energy_window_seconds;
  r.energy_settle_seconds = o.energy_settle_seconds;
  r.energy_within = o.energy_within;
  r.checked = o.check;
  r.sweep_axis = o.sweep_axis;
  if (o.energy_window_seconds <= 0)
    r.energy_method = "not measured (--energy-window 0)";
  else if (!o.counter_joules)
    r.energy_method = "not measured: no energy counter on this device";
  r.peak_tflops = measure_peak(backend, bench, o, &r.peak_method);
  return r;
}

}  // namespace

GemmProblem pad_for_int8(const GemmProblem& p) {
  auto up = [](int64_t v) { return (v + 3) / 4 * 4; };
  return {up(p.m), up(p.n), up(p.k), p.trans_a, p.trans_b};
}

void mark_best(std::vector<KernelBenchRow>& rows) {
  std::map<std::pair<int64_t, std::string>, std::pair<KernelBenchRow*, KernelBenchRow*>> best;
  for (KernelBenchRow& r : rows) {
    if (!r.supported || r.timing.repeats == 0) continue;
    auto& [fast, frugal] = best[{r.problem, r.pass}];
    if (!fast || r.timing.median_ms < fast->timing.median_ms) fast = &r;
    if (r.joules_per_call && (!frugal || *r.joules_per_call < *frugal->joules_per_call)) frugal = &r;
  }
  for (auto& [key, b] : best) {
    if (b.first) b.first->fastest = true;
    if (b.second) b.second->lowest_energy = true;
  }
}

KernelBenchResult run_gemm_bench(Backend& backend, KernelBench& bench, const std::vector<GemmProblem>& problems,
                                 const KernelBenchOptions& o) {
  KernelBenchResult r = start(backend, bench, "gemm", o);
  for (size_t i = 0; i < problems.size(); ++i) {
    const bool go_on = run_problem(o, i, r, [&] {
      const GemmProblem p = o.precision == KernelPrecision::INT8 ? pad_for_int8(problems[i]) : problems[i];
      KernelBenchRow base = problem_row("gemm", i, problems.size(), gemm_label(p), "", o);
      base.gemm = p;
      if (p != problems[i]) base.padded_from = gemm_label(problems[i]);
      base.flops = p.flops();
      survive_case(base, r.rows, [&] {
        const KernelInputs in = gemm_inputs(p, o.precision, o.seed);
        std::unique_ptr<KernelCase> c = bench.gemm(p, o.precision, in);
        std::optional<Reference> ref;
        if (o.check && p.flops() / 2 <= o.check_max_macs) ref = gemm_reference(p, in);
        run_case(backend, *c, base, ref ? &*ref : nullptr, check_tolerance(o.precision, p.k), o, r);
      });
    });
    if (!go_on) break;
  }
  mark_best(r.rows);
  return r;
}

KernelBenchResult run_spmm_bench(Backend& backend, KernelBench& bench, const std::vector<SparseProblem>& problems,
                                 const KernelBenchOptions& o) {
  KernelBenchResult r = start(backend, bench, "spmm", o);
  for (size_t i = 0; i < problems.size(); ++i) {
    const bool go_on = run_problem(o, i, r, [&] {
      const SparseProblem& p = problems[i];
      KernelBenchRow base = problem_row("spmm", i, problems.size(), sparse_label(p), "", o);
      base.sparse = p;
      const size_t first = r.rows.size();
      survive_case(base, r.rows, [&] {
        const SparseInputs in = sparse_inputs(p, o.seed);
        base.nnz = in.nnz();
        base.flops = 2.0 * static_cast<double>(in.nnz()) * static_cast<double>(p.n);
        std::unique_ptr<KernelCase> c = bench.spmm(p, in);
        std::optional<Reference> ref;
        if (o.check && base.flops / 2 <= o.check_max_macs) ref = sparse_reference(p, in);
        // Terms per output element: a row's non-zeros, about (1 - sparsity) k; the bound takes k.
        run_case(backend, *c, base, ref ? &*ref : nullptr, check_tolerance(o.precision, p.k), o, r);
      });
      // The dense baseline is the problem's last variant (KernelBench::spmm).
      const KernelBenchRow& dense = r.rows.back();
      if (r.rows.size() > first + 1 && dense.supported && dense.timing.repeats > 0)
        for (size_t k = first; k + 1 < r.rows.size(); ++k)
          if (r.rows[k].supported && r.rows[k].timing.repeats > 0)
            r.rows[k].speedup_vs_dense = dense.timing.median_ms / r.rows[k].timing.median_ms;
    });
    if (!go_on) break;
  }
  mark_best(r.rows);
  return r;
}

KernelBenchResult run_rnn_bench(Backend& backend, KernelBench& bench, const std::vector<RnnProblem>& problems,
                                const KernelBenchOptions& o) {
  KernelBenchResult r = start(backend, bench, "rnn", o);
  bench.stop_requested = o.stop_requested;  // polled while a problem's algorithms are prepared
  for (size_t i = 0; i < problems.size(); ++i) {
    const bool go_on = run_problem(o, i, r, [&] {
      const RnnProblem& p = problems[i];
      const RnnInputs in = rnn_inputs(p, o.precision, o.seed);
      std::optional<Reference> ref;
      if (o.check && p.flops(false) / 2 <= o.check_max_macs) ref = rnn_reference(p, in);
      for (RnnPass pass : o.rnn_passes) {
        KernelBenchRow base = problem_row("rnn", i, problems.size(), rnn_label(p), rnn_pass_name(pass), o);
        base.rnn = p;
        base.flops = p.flops(pass == RnnPass::Training);
        // Both passes' output is y (the training pass' forward): the backward is timed, not checked.
        survive_case(base, r.rows, [&] {
          std::unique_ptr<KernelCase> c = bench.rnn(p, pass, o.precision, in);
          run_case(backend, *c, base, ref ? &*ref : nullptr, rnn_check_tolerance(o.precision, p), o, r);
        });
      }
    });
    if (!go_on) break;
  }
  mark_best(r.rows);
  return r;
}

KernelBenchResult run_conv_bench(Backend& backend, KernelBench& bench, const std::vector<ConvProblem>& problems,
                                 const KernelBenchOptions& o) {
  KernelBenchResult r = start(backend, bench, "conv", o);
  for (size_t i = 0; i < problems.size(); ++i) {
    const bool go_on = run_problem(o, i, r, [&] {
      const ConvProblem& p = problems[i];
      for (ConvPass pass : o.passes) {
        KernelBenchRow base = problem_row("conv", i, problems.size(), conv_label(p), conv_pass_name(pass), o);
        base.conv = p;
        if (!o.sweep_axis.empty()) base.sweep_value = sweep_value(o.sweep_axis, p);
        base.flops = p.flops();
        survive_case(base, r.rows, [&] {
          const KernelInputs in = conv_inputs(p, pass, o.precision, o.seed);
          std::unique_ptr<KernelCase> c = bench.conv(p, pass, o.precision, o.layout, in);
          std::optional<Reference> ref;
          if (o.check && p.flops() / 2 <= o.check_max_macs) ref = conv_reference(p, pass, in);
          // Terms per output element: fwd c*r*s; bwd_data at most k*r*s; bwd_filter n*p*q.
          const int64_t terms = pass == ConvPass::Forward        ? p.c * p.r * p.s
                                : pass == ConvPass::BackwardData ? p.k * p.r * p.s
                                                                 : p.n * p.out_h() * p.out_w();
          run_case(backend, *c, base, ref ? &*ref : nullptr, check_tolerance(o.precision, terms), o, r);
        });
      }
    });
    if (!go_on) break;
  }
  mark_best(r.rows);
  return r;
}

}  // namespace cnnscale::measure
