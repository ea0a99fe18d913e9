"""Figures of `cnnscale bench allreduce` results for `cnnscale report` (imported by report_plots.py):
bus bandwidth against message size per setting and rank count (allreduce table), and energy per byte
of message, above the GPUs' idle power and in all (allreduce_energy table).
"""
import math
import os
import re

import matplotlib.pyplot as plt
import numpy as np

from report_plots_common import leave_out, number, read_table, save


def allreduce_series(rows, prefix):
    """(setting, ranks, column) of the <prefix>[_<setting>]_n<N>_mean columns of an allreduce table,
    by setting and then ranks ascending."""
    series = []
    for name in rows[0].keys() if rows else []:
        m = re.fullmatch(prefix + r"_(?:(.+)_)?n(\d+)_mean", name)
        if m:
            series.append((m.group(1) or "", int(m.group(2)), name))
    return sorted(series, key=lambda s: (s[0], s[1]))


def series_label(setting, n):
    return f"{n} rank" + ("" if n == 1 else "s") + (f", {setting.replace('_', ' ')}" if setting else "")


def message_size_axis(ax, rows):
    """A log2 x axis of the rows' message sizes (rows sorted by bytes), at most ~8 labelled ticks."""
    ax.set_xscale("log", base=2)
    ticks = [number(r["bytes"]) for r in rows]
    step = max(1, len(ticks) // 8)
    ax.set_xticks(ticks[::step], [r["size"] for r in rows][::step], rotation=30, fontsize=8)
    ax.set_xlabel("message size")
    ax.grid(True, which="major", alpha=0.3)


def allreduce_figure(rows, out):
    """nccl-tests' view: busbw against message size (log scale), one line per setting and rank count
    (the allreduce table's busbw_gbs[_<setting>]_n<N>_mean columns, ranks ascending)."""
    series = allreduce_series(rows, "busbw_gbs")
    title = "Allreduce bus bandwidth (busbw = algbw × 2(n−1)/n)"
    if not series:
        leave_out(out, "allreduce_busbw.png", "no allreduce results")
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    cmap = plt.get_cmap("tab10" if len(series) <= 10 else "tab20")
    rows = sorted(rows, key=lambda r: number(r["bytes"]))
    for i, (setting, n, col) in enumerate(series):
        pts = [(number(r["bytes"]), number(r[col]), number(r[col[:-len("mean")] + "std"])) for r in rows]
        pts = [p for p in pts if not math.isnan(p[1])]
        if not pts:
            continue
        stds = [p[2] for p in pts]  # NaN: a single file, no spread to draw
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts],
                    yerr=None if all(math.isnan(v) for v in stds) else np.nan_to_num(stds),
                    marker="o", markersize=3, color=cmap(i % cmap.N), label=series_label(setting, n), capsize=2)
    message_size_axis(ax, rows)
    ax.set_ylabel("busbw (GB/s)")
    ax.legend(fontsize=8)
    ax.set_title(title)
    save(fig, out, "allreduce_busbw.png")


def allreduce_energy_figure(tables, out):
    """Energy per byte of message against message size (log-log), one colour per setting and rank
    count: above the GPUs' idle power (solid, what the exchange costs) and in all (dashed), from the
    allreduce_energy table's [dynamic_]nj_per_byte[_<setting>]_n<N>_mean columns."""
    name = "allreduce_energy.png"
    if not os.path.exists(os.path.join(tables, "allreduce_energy.csv")):
        leave_out(out, name, "no allreduce results with energy (bench allreduce on GPUs, --energy-window > 0)")
        return
    rows = sorted(read_table(tables, "allreduce_energy"), key=lambda r: number(r["bytes"]))
    series = allreduce_series(rows, "dynamic_nj_per_byte")
    if not series:
        leave_out(out, name, "no energy columns in the allreduce_energy table")
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    cmap = plt.get_cmap("tab10" if len(series) <= 10 else "tab20")
    drawn = False
    for i, (setting, n, col) in enumerate(series):
        total = col[len("dynamic_"):]
        for c, style, what in ((col, "-", "above idle"), (total, "--", "in all")):
            pts = [(number(r["bytes"]), number(r[c])) for r in rows]
            pts = [p for p in pts if not math.isnan(p[1]) and p[1] > 0]  # log axis: the above-idle noise can dip <= 0
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", markersize=3,
                        color=cmap(i % cmap.N), label=f"{series_label(setting, n)}, {what}")
                drawn = True
    if not drawn:
        plt.close(fig)
        leave_out(out, name, "no positive energy figures to draw")
        return
    message_size_axis(ax, rows)
    ax.set_yscale("log")
    ax.set_ylabel("nJ per byte of message, all GPUs")
    ax.legend(fontsize=8)
    ax.set_title("Allreduce energy per byte (NVML counters; above idle: less the idle power)")
    save(fig, out, name)
