"""Figures of `cnnscale bench conv --sweep` results for `cnnscale report` (imported by report_plots.py),
from the conv_sweep table: Li et al.'s Figures 3 and 5 for today's cuDNN -- the time of each algorithm
and the device memory of its call (operands and workspace) against the swept parameter, one row of
panels per swept axis (and benchmark) and one panel per pass, one line per algorithm. An algorithm
cuDNN refuses at a value has no point there, so its line breaks where its shape limits are.

The helpers (number, save, leave_out) come from report_plots.py as arguments.
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
