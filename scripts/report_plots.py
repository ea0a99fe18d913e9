#!/usr/bin/python3
"""Figures of `cnnscale report` (PNG, matplotlib): time and joules per batch per batch-GPUs
combination as in the study's Figs. 5-8, strong-scaling curves over every GPU count in the data
(by_gpus table), one run's power trace per GPU and the per-phase breakdown, from the CSV tables
`cnnscale report` wrote and one run.h5; and, for `bench allreduce` results, bus bandwidth against
message size per rank count (allreduce table).

Run by `cnnscale report` with Debian's /usr/bin/python3 (python3-matplotlib, python3-h5py).
Exit codes: 0 ok, 2 bad arguments/inputs, 3 matplotlib or numpy not importable.
"""
import argparse
import csv
import math
import os
import re
import sys

try:
    import matplotlib

    matplotlib.use("Agg")  # no display on build machines
    import matplotlib.pyplot as plt
    import numpy as np
except ImportError as e:  # the C++ side turns exit code 3 into "install python3-matplotlib"
    print(f"report_plots: {e}", file=sys.stderr)
    sys.exit(3)

PHASES = ["data", "h2d", "forward", "backward", "allreduce", "update"]  # disjoint parts of a step


def number(text):
    """CSV field -> float; empty (null) -> NaN."""
    try:
        return float(text) if text not in ("", None) else math.nan
    except ValueError:
        return math.nan


def read_table(tables, name):
    path = os.path.join(tables, name + ".csv")
    if not os.path.exists(path):
        print(f"report_plots: missing table {path}", file=sys.stderr)
        sys.exit(2)
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def label(row):
    """The study's bar names: batch_size-number_GPUs, plus the variant when configurations differ."""
    text = f"{row['batch']}-{row['gpus']}"
    return f"{text}\n{row['variant']}" if row.get("variant") else text


def by_network(rows):
    nets = {}
    for r in rows:
        nets.setdefault(r["net"], []).append(r)
    for rs in nets.values():
        rs.sort(key=lambda r: (number(r["batch"]), number(r["gpus"]), r.get("variant", "")))
    return nets


def gpu_colors(rows):
    """One color per GPU count in the data (any number of counts), the same in every subplot."""
    counts = sorted({number(r["gpus"]) for r in rows if not math.isnan(number(r["gpus"]))})
    cmap = plt.get_cmap("tab10" if len(counts) <= 10 else "tab20")
    return {g: cmap(i % cmap.N) for i, g in enumerate(counts)}


def gpus_text(g):
    return f"{g:g} GPU" + ("" if g == 1 else "s")


def save(fig, out, name):
    """Written under a temporary name and renamed, like every other report file."""
    path = os.path.join(out, name)
    fig.savefig(path + ".tmp", format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    os.replace(path + ".tmp", path)


def message_figure(out, name, title, text):
    fig, ax = plt.subplots(figsize=(7, 2.5))
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True)
    save(fig, out, name)


def bars_per_network(rows, column, ylabel, title, out, name, empty_text):
    nets = by_network(rows)
    if not any(not math.isnan(number(r[column + "_mean"])) for r in rows):
        message_figure(out, name, title, empty_text)
        return
    colors = gpu_colors(rows)
    # Each network's subplot as wide as its bars need (batches × GPU counts × variants).
    widths = [max(4.5, 0.4 * len(rs) + 1.5) for rs in nets.values()]
    fig, axes = plt.subplots(1, len(nets), figsize=(max(sum(widths), 6), 4), squeeze=False,
                             gridspec_kw={"width_ratios": widths})
    for ax, (net, rs) in zip(axes[0], nets.items()):
        means = [number(r[column + "_mean"]) for r in rs]
        stds = [number(r[column + "_std"]) for r in rs]
        x = np.arange(len(rs))
        ax.bar(x, np.nan_to_num(means), yerr=np.nan_to_num(stds), capsize=3,
               color=[colors.get(number(r["gpus"]), "grey") for r in rs])
        ax.set_xticks(x, [label(r) for r in rs], rotation=45, ha="right", fontsize=8)
        ax.set_title(net)
        ax.set_xlabel("batch-GPUs")
        ax.set_ylabel(ylabel)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    right = axes[0][-1].get_position().x1  # just right of the last subplot
    fig.legend(handles, [gpus_text(g) for g in colors], loc="center left", bbox_to_anchor=(right + 0.005, 0.5),
               fontsize=8)
    fig.suptitle(title)
    save(fig, out, name)


def gpu_counts(rows):
    """The GPU counts of the by_gpus table, ascending, from its samples_per_s_g<N>_mean columns."""
    counts = []
    for name in rows[0].keys() if rows else []:
        m = re.fullmatch(r"samples_per_s_g(\d+(?:\.\d+)?)_mean", name)
        if m:
            counts.append(float(m.group(1)))
    return sorted(counts)


def scaling_figure(rows, out):
    """One line per by_gpus row (network x batch x variant: gpu_mix runs are not in it), over every
    GPU count in the data; dashed: N x the row's 1-GPU rate up to its largest N."""
    counts = gpu_counts(rows)
    title = "Strong scaling (dashed: ideal, N × the 1-GPU rate)"
    if not any(not math.isnan(number(r[f"samples_per_s_g{g:g}_mean"])) for r in rows for g in counts):
        message_figure(out, "scaling.png", title, "no throughput was measured")
        return
    nets = {}
    for r in rows:
        nets.setdefault(r["net"], []).append(r)
    fig, axes = plt.subplots(1, len(nets), figsize=(max(4.5 * len(nets), 6), 4), squeeze=False)
    for ax, (net, rs) in zip(axes[0], nets.items()):
        rs.sort(key=lambda r: (number(r["batch"]), r.get("variant", "")))
        cmap = plt.get_cmap("tab10" if len(rs) <= 10 else "tab20")
        for i, r in enumerate(rs):
            color = cmap(i % cmap.N)
            pts = [(g, number(r[f"samples_per_s_g{g:g}_mean"]), number(r[f"samples_per_s_g{g:g}_std"]))
                   for g in counts]
            pts = [p for p in pts if not math.isnan(p[1])]
            if not pts:
                continue
            name = f"batch {r['batch']}" + (f" {r['variant']}" if r.get("variant") else "")
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=np.nan_to_num([p[2] for p in pts]),
                        marker="o", color=color, label=name, capsize=3)
            base = number(r["samples_per_s_g1_mean"]) if 1.0 in counts else math.nan
            if not math.isnan(base) and pts[-1][0] > 1:
                ideal = [g for g in counts if g <= pts[-1][0]]
                ax.plot(ideal, [base * g for g in ideal], linestyle="--", color=color, alpha=0.6,
                        label=f"ideal ({name})")
        ax.set_xticks(counts, [f"{g:g}" for g in counts])
        ax.set_title(net)
        ax.set_xlabel("GPUs (ranks)")
        ax.set_ylabel("samples/s")
        ax.legend(fontsize=7)
    fig.suptitle(title)
    save(fig, out, "scaling.png")


def phases_figure(rows, out):
    rows = sorted(rows, key=lambda r: (r["net"], number(r["batch"]), number(r["gpus"]), r.get("variant", "")))
    if not rows or all(math.isnan(number(r[p + "_ms_mean"])) for r in rows for p in PHASES):
        message_figure(out, "phases.png", "Phase breakdown", "no phase timings were recorded")
        return
    fig, ax = plt.subplots(figsize=(max(0.6 * len(rows) + 2, 6), 4.5))
    x = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for i, p in enumerate(PHASES):
        v = np.nan_to_num([number(r[p + "_ms_mean"]) for r in rows])
        ax.bar(x, v, bottom=bottom, label=p, color=f"C{i}")
        bottom += v
    total = [number(r["total_ms_mean"]) for r in rows]
    ax.plot(x, total, "k_", markersize=14, label="total (whole step)")
    ax.set_xticks(x, [f"{r['net']}\n{label(r)}" for r in rows], rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("ms per batch")
    ax.set_title("Phase breakdown per configuration (slowest rank)")
    ax.legend(fontsize=7, ncol=2)
    save(fig, out, "phases.png")


def power_figure(h5_path, run_label, out):
    title = "Power per GPU: " + (run_label or "no run")
    if not h5_path:
        message_figure(out, "power_trace.png", title, "no run selected")
        return
    import h5py  # only here: the tables' figures need no HDF5

    with h5py.File(h5_path, "r") as f:
        count = int(f["power"].attrs.get("count", 0)) if "power" in f else 0
        traces = []
        for k in range(count):
            if f"gpu{k}" not in f["power"]:
                continue
            g = f[f"power/gpu{k}"]
            traces.append((k, int(g.attrs.get("rank", k)), g["t_s"][:], g["power_w"][:]))
    if not any(len(t) for _, _, t, _ in traces):
        message_figure(out, "power_trace.png", title,
                       "no power samples in this run (CPU run, or NVML unavailable)")
        return
    if len(traces) <= 4:
        fig, ax = plt.subplots(figsize=(8, 4))
        for k, rank, t, w in traces:
            ax.plot(t, w, label=f"GPU {k} (rank {rank})", linewidth=1)
        ax.set_xlabel("time since run start (s)")
        ax.set_ylabel("power (W)")
        ax.set_title(title)
        ax.legend(fontsize=7)
        save(fig, out, "power_trace.png")
        return
    # More GPUs: one small panel each (shared axes), as overlapping lines of similar power would
    # hide one another; every panel also shows the other GPUs in grey for comparison.
    cols = min(4, len(traces))
    rows = math.ceil(len(traces) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.3 * rows + 0.6), sharex=True, sharey=True,
                             squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= len(traces):
            ax.axis("off")
            continue
        k, rank, t, w = traces[i]
        for j, (_, _, t2, w2) in enumerate(traces):
            if j != i:
                ax.plot(t2, w2, color="0.85", linewidth=0.6)
        ax.plot(t, w, color=f"C{i % 10}", linewidth=1)
        ax.set_title(f"GPU {k} (rank {rank})" + ("" if len(t) else ": no samples"), fontsize=8)
        ax.tick_params(labelsize=7)
        if i % cols == 0:
            ax.set_ylabel("power (W)", fontsize=8)
        if i + cols >= len(traces):  # nothing below it
            ax.set_xlabel("time (s)", fontsize=8)
    fig.suptitle(title)
    save(fig, out, "power_trace.png")


def allreduce_figure(rows, out):
    """nccl-tests' view: busbw against message size (log scale), one line per setting and rank count
    (the allreduce table's busbw_gbs[_<setting>]_n<N>_mean columns, ranks ascending)."""
    series = []
    for name in rows[0].keys() if rows else []:
        m = re.fullmatch(r"busbw_gbs_(?:(.+)_)?n(\d+)_mean", name)
        if m:
            series.append((m.group(1) or "", int(m.group(2)), name))
    series.sort(key=lambda s: (s[0], s[1]))
    title = "Allreduce bus bandwidth (busbw = algbw × 2(n−1)/n)"
    if not series:
        message_figure(out, "allreduce_busbw.png", title, "no allreduce results")
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    cmap = plt.get_cmap("tab10" if len(series) <= 10 else "tab20")
    rows = sorted(rows, key=lambda r: number(r["bytes"]))
    for i, (setting, n, col) in enumerate(series):
        pts = [(number(r["bytes"]), number(r[col]), number(r[col[:-len("mean")] + "std"])) for r in rows]
        pts = [p for p in pts if not math.isnan(p[1])]
        if not pts:
            continue
        name = f"{n} rank" + ("" if n == 1 else "s") + (f", {setting.replace('_', ' ')}" if setting else "")
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=np.nan_to_num([p[2] for p in pts]),
                    marker="o", markersize=3, color=cmap(i % cmap.N), label=name, capsize=2)
    ax.set_xscale("log", base=2)
    ticks = [number(r["bytes"]) for r in rows]
    step = max(1, len(ticks) // 8)
    ax.set_xticks(ticks[::step], [r["size"] for r in rows][::step], rotation=30, fontsize=8)
    ax.set_xlabel("message size")
    ax.set_ylabel("busbw (GB/s)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    save(fig, out, "allreduce_busbw.png")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", required=True, help="folder with time.csv, energy.csv, by_gpus.csv, phases.csv")
    parser.add_argument("--out", required=True, help="folder for the PNG files")
    parser.add_argument("--power-h5", default="", help="run.h5 whose /power samples are drawn")
    parser.add_argument("--power-label", default="", help="description of that run")
    parser.add_argument("--figures", default="training",
                        help="comma separated: training (the five figures of the runs), allreduce (allreduce.csv)")
    a = parser.parse_args()
    wanted = set(a.figures.split(","))
    if not wanted or not wanted <= {"training", "allreduce"}:
        print(f"report_plots: --figures: expected training and/or allreduce, got '{a.figures}'", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    if "allreduce" in wanted:
        allreduce_figure(read_table(a.tables, "allreduce"), a.out)
    if "training" not in wanted:
        return 0
    time_rows = read_table(a.tables, "time")
    bars_per_network(time_rows, "seconds_per_batch", "seconds per batch", "Time per batch (forward + backward)",
                     a.out, "time_per_batch.png", "no timed iterations")
    bars_per_network(read_table(a.tables, "energy"), "joules_per_batch", "joules per batch",
                     "Energy per batch (all GPUs)", a.out, "joules_per_batch.png",
                     "no energy counters were readable (CPU run without NVML/RAPL, or NVML unavailable)")
    scaling_figure(read_table(a.tables, "by_gpus"), a.out)
    power_figure(a.power_h5, a.power_label, a.out)
    phases_figure(read_table(a.tables, "phases"), a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
