"""Figures of `cnnscale bench conv --sweep` results for `cnnscale report` (imported by report_plots.py),
from the conv_sweep table: Li et al.'s Figures 3 and 5 for today's cuDNN -- the time of each algorithm
and the device memory of its call (operands and workspace) against the swept parameter, one row of
panels per swept axis (and benchmark) and one panel per pass, one line per algorithm. An algorithm
cuDNN refuses at a value has no point there, so its line breaks where its shape limits are.

From the kernel_cases table, two figures of the DeepBench-style benchmarks: each benchmark's problems
sorted by the share of the peak their fastest variant reaches (how much of a set runs near the peak),
and, where energy was read, what the least-energy variant saves against the time it costs.

The helpers (number, save, leave_out) are report_plots_common.py's, passed by report_plots.py as
arguments.
"""
import math

import matplotlib.pyplot as plt

PASSES = ["fwd", "bwd_data", "bwd_filter"]
AXES = {"b": "batch size", "i": "input size (pixels a side)", "f": "filters", "k": "kernel size", "s": "stride"}


def _series(rows, h, column):
    """{(benchmark, axis): {pass: {algorithm: [(value, y)]}}} with the values ascending."""
    out = {}
    for r in rows:
        y = h.number(r[column])
        if math.isnan(y):
            continue
        key = (r["benchmark"], r["axis"])
        out.setdefault(key, {}).setdefault(r["pass"], {}).setdefault(r["algorithm"], []).append((float(r["value"]), y))
    for passes in out.values():
        for algos in passes.values():
            for pts in algos.values():
                pts.sort()
    return dict(sorted(out.items()))


def _figure(rows, out, h, column, ylabel, title, name):
    series = _series(rows, h, column)
    if not series:
        h.leave_out(out, name, "no convolution sweep with a supported algorithm")
        return
    algorithms = sorted({a for passes in series.values() for algos in passes.values() for a in algos})
    cmap = plt.get_cmap("tab10")
    color = {a: cmap(i % 10) for i, a in enumerate(algorithms)}
    fig, axes = plt.subplots(len(series), len(PASSES), figsize=(4.6 * len(PASSES), 3.4 * len(series)), squeeze=False,
                             layout="constrained")
    for row, ((bench, axis), passes) in enumerate(series.items()):
        for col, p in enumerate(PASSES):
            ax = axes[row][col]
            for algo, pts in sorted(passes.get(p, {}).items()):
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", markersize=3, color=color[algo],
                        label=algo)
            ax.set_yscale("log")
            ax.set_xlabel(AXES.get(axis, axis))
            ax.set_ylabel(ylabel)
            ax.set_title(f"{bench}: {p}", fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
    handles = [plt.Line2D([], [], color=color[a], marker="o", markersize=3) for a in algorithms]
    # Outside the panels on the right; savefig(bbox_inches="tight") keeps it in the image.
    fig.legend(handles, algorithms, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle(title)
    h.save(fig, out, name)


def time_figure(rows, out, h):
    _figure(rows, out, h, "median_ms", "ms per call (median)",
            "Convolution time per cuDNN algorithm against the swept parameter", "conv_sweep_time.png")


def memory_figure(rows, out, h):
    _figure(rows, out, h, "memory_mib", "MiB (operands + workspace)",
            "Device memory of the call per cuDNN algorithm against the swept parameter", "conv_sweep_memory.png")


# Two 0.5 s power windows of one variant agree to about this many percent
# (docs/measurements/2026-11-27-kernel-benchmarks-h100.md): smaller
# savings are drawn but shaded as within the repeatability.
REPEATABILITY_PERCENT = 5.0


def peak_figure(rows, out, h):
    by_bench = {}
    for r in rows:
        p = h.number(r["peak_percent"])
        if not math.isnan(p) and p > 0:
            by_bench.setdefault(r["benchmark"], []).append(p)
    if not by_bench:
        h.leave_out(out, "kernels_peak.png", "no benchmark measured a peak (--no-peak) or ran a variant")
        return
    fig, ax = plt.subplots(figsize=(7.5, 4.6), layout="constrained")
    for bench, values in sorted(by_bench.items()):
        values.sort(reverse=True)
        n = len(values)
        ax.plot([(i + 0.5) / n for i in range(n)], values, marker="o", markersize=2, label=f"{bench} ({n})")
    ax.set_yscale("log")
    ax.set_xlabel("share of the benchmark's problems (sorted by % of peak, fastest variant each)")
    ax.set_ylabel("% of the measured peak")
    ax.axhline(100, color="black", linewidth=0.8, linestyle="--")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Kernel benchmarks: fastest variant per problem against the peak", fontsize=10)
    h.save(fig, out, "kernels_peak.png")


def energy_figure(rows, out, h):
    points, counts = {}, {}
    for r in rows:
        if math.isnan(h.number(r["millijoules_per_call"])):
            continue
        bench = r["benchmark"]
        counts.setdefault(bench, [0, 0])
        counts[bench][1] += 1
        saved, cost = h.number(r["energy_saved_percent"]), h.number(r["time_cost_percent"])
        if math.isnan(saved) or math.isnan(cost):
            continue
        counts[bench][0] += 1
        points.setdefault(bench, []).append((cost, saved))
    if not counts:
        h.leave_out(out, "kernels_energy.png", "no benchmark read the energy of its variants (--energy-window 0, "
                    "or no energy counter)")
        return
    fig, ax = plt.subplots(figsize=(7.5, 4.6), layout="constrained")
    ax.axhspan(0, REPEATABILITY_PERCENT, color="grey", alpha=0.2,
               label=f"within the windows' repeatability ({REPEATABILITY_PERCENT:g} %)")
    for bench in sorted(counts):
        pts = points.get(bench, [])
        differ, total = counts[bench]
        ax.scatter([c for c, _ in pts], [s for _, s in pts], s=14,
                   label=f"{bench}: {differ} of {total} problems")
    ax.set_xlabel("time the least-energy variant costs over the fastest (%)")
    ax.set_ylabel("energy it saves (%)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Kernel benchmarks: where the least-energy variant is not the fastest", fontsize=10)
    h.save(fig, out, "kernels_energy.png")
