#!/usr/bin/python3
"""Figures of `cnnscale report` (PNG, matplotlib): time and energy per batch per batch-ranks (or
batch-GPUs) combination as in Castro et al.'s Figs. 5-8, strong-scaling curves over every rank count in
the data (by_gpus table) and weak-scaling efficiency (weak_scaling table), one run's power trace per
GPU and the per-phase breakdown, from the CSV
tables `cnnscale report` wrote and one run.h5; for unequal ranks, each rank's busy and waiting time
and the `auto` split's history (report_plots_hetero.py); for `bench allreduce` results, bus
bandwidth against message size per rank count (allreduce table); and, for `infer` results,
throughput, images/J and p99 latency against batch size and throughput (report_plots_infer.py); for
`bench conv --sweep` results, time and memory per cuDNN algorithm against the swept parameter
(report_plots_kernels.py).

A figure without data is not drawn: its name and the reason go to the --left-out file instead.
Error bars are drawn only over 2 or more runs, and the number of runs is shown.
Run by `cnnscale report` with Debian's /usr/bin/python3 (python3-matplotlib, python3-h5py).
Exit codes: 0 ok, 2 bad arguments/inputs, 3 matplotlib or numpy not importable.
"""
import argparse
import csv
import math
import os
import re
import sys
import textwrap
import types

try:
    import matplotlib

    matplotlib.use("Agg")  # no display on build machines
    import matplotlib.pyplot as plt
    import numpy as np
except ImportError as e:  # the C++ side turns exit code 3 into "install python3-matplotlib"
    print(f"report_plots: {e}", file=sys.stderr)
    sys.exit(3)

# The parts of a step in stacking order (phases.csv <part>_ms columns); they add up to total_ms.
PHASES = [("data", "data"), ("h2d", "h2d"), ("forward", "forward"), ("backward", "backward"),
          ("allreduce", "exposed allreduce"), ("update", "update"), ("other", "other")]

# Units by magnitude, as the Markdown tables pick them: 98.85 ms, not 9.885e-05 ks.
UNITS = {"s": [("µs", 1e-6), ("ms", 1e-3), ("s", 1.0), ("ks", 1e3)],
         "J": [("mJ", 1e-3), ("J", 1.0), ("kJ", 1e3), ("MJ", 1e6), ("GJ", 1e9)]}

LEFT_OUT = []  # (figure name, reason) for figures with nothing to draw


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


def pick_unit(quantity, values):
    """(name, SI value of one unit): the largest unit that keeps the largest |value| at or above 1."""
    finite = [abs(v) for v in values if not math.isnan(v)]
    largest = max(finite) if finite else 0.0
    units = UNITS[quantity]
    best = units[0] if largest > 0 else next(u for u in units if u[1] == 1.0)
    for u in units:
        if largest > 0 and largest / u[1] >= 1 - 1e-12:
            best = u
    return best


def runs_of(row):
    """Number of runs behind a long table's row (its `runs` column)."""
    n = number(row.get("runs", ""))
    return 0 if math.isnan(n) else int(n)


def variant_tokens(variant):
    """A variant ("allreduce_dtype=bf16 allreduce_tuning=update per bucket, bf16 gradients summed in
    place nccl_env=NCCL_ALGO=Ring NCCL_NVLS_ENABLE=0", or a bare "bf16") as (key, item) tokens in
    order: a part starts at each lower-case `key=`; its value is a list of items, split at ", "
    (allreduce_tuning's phrases), nccl_env's at spaces (its variables)."""
    parts = re.split(r" (?=[a-z_.]+=)", variant) if variant else []
    tokens = []
    for part in parts:
        key, eq, value = part.partition("=")
        if not eq or not re.fullmatch(r"[a-z_.]+", key):
            key, value = "", part
        items = value.split(" ") if key == "nccl_env" else value.split(", ")
        tokens += [(key, item) for item in items if item]
    return tokens


def render_tokens(tokens):
    """(key, item) tokens back as "key=item, item key=item": each key once, its items in order."""
    keys, items = [], {}
    for key, item in tokens:
        if key not in items:
            keys.append(key)
            items[key] = []
        items[key].append(item)
    out = []
    for key in keys:
        sep = " " if key == "nccl_env" else ", "
        out.append((f"{key}=" if key else "") + sep.join(items[key]))
    return " ".join(out)


def shared_parts(rows):
    """The parts every variant of a figure's rows has (the NCCL environment every multi-GPU run
    records, the exchange's settings every run shares): said once in the title rather than in each
    of its labels, which otherwise crowd the panels out. None where fewer than two distinct variants
    are drawn."""
    variants = sorted({r.get("variant", "") for r in rows if r.get("variant")})
    if len(variants) < 2:
        return []
    first, *others = [variant_tokens(v) for v in variants]
    return [t for t in first if all(t in o for o in others)]


def variant_of(row, shared):
    """The row's variant less the parts every variant of its figure shares."""
    return render_tokens([t for t in variant_tokens(row.get("variant", "")) if t not in shared])


def shared_line(shared):
    """The title line naming what every variant shares ("" when nothing is left out)."""
    return f"\nevery variant: {render_tokens(shared)}" if shared else ""


def legend_below(ax):
    """A line chart's legend under its panel: with many variants a legend inside covered the lines
    (the figure leaves LEGEND_LINE inches a variant for it)."""
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)


LEGEND_LINE = 0.17  # inches a legend line takes at fontsize 7


def legend_label(text):
    """A legend_below entry wrapped to a panel's width: one wider than its panel ran into the next."""
    return textwrap.fill(text, width=70, subsequent_indent="  ")


def legend_lines(labels):
    """The lines legend_below needs for these (wrapped) labels, for the figure's height."""
    return sum(label.count("\n") + 1 for label in labels)


def label(row, show_n=False, shared=()):
    """Castro et al.'s bar names: batch_size-number_of_ranks, plus the variant when configurations
    differ (less what every variant shares), and the number of runs when the bars do not all have
    the same."""
    text = f"{row['batch']}-{row['gpus']}"
    if show_n:
        text += f" (n={runs_of(row)})"
    variant = variant_of(row, shared)
    return f"{text}\n{variant}" if variant else text


def error_bars(means, stds, ns):
    """Sample std where it rests on 2 or more runs; no bar (0, and no cap) otherwise."""
    return [s if n >= 2 and not math.isnan(s) else 0.0 for s, n in zip(stds, ns)] if any(
        n >= 2 for n in ns) else None


def runs_text(ns, unit="bar"):
    """What the error bars are and how many runs they rest on, for a title (`unit`: what carries
    one mean, a bar or a line's point)."""
    ns = sorted(set(ns))
    if ns == [1]:
        return "1 run each, no error bars"
    if len(ns) == 1:
        each = f"n = {ns[0]} runs each"
    elif unit == "bar":
        each = "n runs per bar as labelled"
    else:
        each = f"{ns[0]}–{ns[-1]} runs per {unit}"
    return f"mean ± sample std, {each}" + (f"; {unit}s of 1 run have no error bar" if 1 in ns else "")


def by_network(rows):
    nets = {}
    for r in rows:
        nets.setdefault(r["net"], []).append(r)
    for rs in nets.values():
        rs.sort(key=lambda r: (number(r["batch"]), number(r["gpus"]), r.get("variant", "")))
    return nets


def device_colors(rows):
    """One color per rank count in the data (any number of counts), the same in every subplot."""
    counts = sorted({number(r["gpus"]) for r in rows if not math.isnan(number(r["gpus"]))})
    cmap = plt.get_cmap("tab10" if len(counts) <= 10 else "tab20")
    return {g: cmap(i % cmap.N) for i, g in enumerate(counts)}


DEVICES = "GPUs"  # --devices: "ranks" for CPU runs, "GPUs" when every run is a GPU run


def devices_text(g):
    one = DEVICES[:-1] if DEVICES.endswith("s") else DEVICES
    return f"{g:g} " + (one if g == 1 else DEVICES)


def describe(fig):
    """The figure's words (titles, axis labels, legends) as text, stored in the PNG's Description:
    for screen readers and for tests that check what the figure says."""
    parts = []
    if fig._suptitle is not None:
        parts.append("title: " + fig._suptitle.get_text().replace("\n", " "))
    legends = list(fig.legends)
    for ax in fig.axes:
        if not ax.axison:
            continue
        parts += [f"{k}: {v.replace(chr(10), ' ')}" for k, v in
                  (("axes", ax.get_title()), ("x", ax.get_xlabel()), ("y", ax.get_ylabel())) if v]
        if ax.get_legend() is not None:
            legends.append(ax.get_legend())
    for legend in legends:
        parts.append("legend: " + ", ".join(t.get_text() for t in legend.get_texts()))
    return " | ".join(parts)


def save(fig, out, name):
    """Written under a temporary name and renamed, like every other report file."""
    path = os.path.join(out, name)
    fig.savefig(path + ".tmp", format="png", dpi=110, bbox_inches="tight", metadata={"Description": describe(fig)})
    plt.close(fig)
    os.replace(path + ".tmp", path)


def leave_out(out, name, reason):
    """No figure without data: the reason goes to report.md, and an older image of that name goes."""
    LEFT_OUT.append((name, reason))
    path = os.path.join(out, name)
    if os.path.exists(path):
        os.remove(path)


def bars_per_network(rows, column, quantity, per, title, out, name, empty_text):
    nets = by_network(rows)
    if not any(not math.isnan(number(r[column + "_mean"])) for r in rows):
        leave_out(out, name, empty_text)
        return
    unit, si = pick_unit(quantity, [number(r[column + "_mean"]) for r in rows])
    colors = device_colors(rows)
    ns = [runs_of(r) for r in rows]
    show_n = len(set(ns)) > 1
    shared = shared_parts(rows)
    # Each network's subplot as wide as its bars need (batches × rank counts × variants).
    widths = [max(4.5, (0.55 if show_n else 0.4) * len(rs) + 1.5) for rs in nets.values()]
    fig, axes = plt.subplots(1, len(nets), figsize=(max(sum(widths), 6), 4.2), squeeze=False,
                             gridspec_kw={"width_ratios": widths})
    for ax, (net, rs) in zip(axes[0], nets.items()):
        means = [number(r[column + "_mean"]) / si for r in rs]
        stds = [number(r[column + "_std"]) / si for r in rs]
        x = np.arange(len(rs))
        ax.bar(x, np.nan_to_num(means), yerr=error_bars(means, stds, [runs_of(r) for r in rs]), capsize=3,
               color=[colors.get(number(r["gpus"]), "grey") for r in rs])
        ax.set_xticks(x, [label(r, show_n, shared) for r in rs], rotation=45, ha="right", fontsize=8)
        ax.set_title(net)
        ax.set_xlabel(f"batch-{DEVICES}")
        ax.set_ylabel(f"{unit} {per}")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    fig.suptitle(f"{title}\n({runs_text(ns)}){shared_line(shared)}", fontsize=11)
    tight_below_suptitle(fig, 3 if shared else 2)
    right = axes[0][-1].get_position().x1  # just right of the last subplot
    fig.legend(handles, [devices_text(g) for g in colors], loc="center left", bbox_to_anchor=(right + 0.005, 0.5),
               fontsize=8)
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
    rank count in the data; dashed: N x the row's 1-rank rate up to its largest N."""
    counts = gpu_counts(rows)
    one = DEVICES[:-1] if DEVICES.endswith("s") else DEVICES
    title = f"Strong scaling of the full training step (dashed: ideal, N × the 1-{one} rate)"
    if not any(not math.isnan(number(r[f"samples_per_s_g{g:g}_mean"])) for r in rows for g in counts):
        leave_out(out, "scaling.png", "no throughput was measured")
        return
    nets = {}
    for r in rows:
        nets.setdefault(r["net"], []).append(r)
    all_ns = []
    shared = shared_parts(rows)

    def name_of(r):
        variant = variant_of(r, shared)
        name = f"batch {r['batch']}" + (f" {variant}" if variant else "")
        if r.get("threads_per_rank"):  # CPU: 1 rank × 2 threads against 2 ranks × 1 thread is no 2x
            name += f", threads/rank {r['threads_per_rank']}"
        return legend_label(name)

    height = max(legend_lines(name_of(r) for r in rs) for rs in nets.values())
    fig, axes = plt.subplots(1, len(nets), figsize=(max(6.5 * len(nets), 6.5), 4.6 + LEGEND_LINE * height),
                             squeeze=False)
    for ax, (net, rs) in zip(axes[0], nets.items()):
        rs.sort(key=lambda r: (number(r["batch"]), r.get("variant", "")))
        cmap = plt.get_cmap("tab10" if len(rs) <= 10 else "tab20")
        for i, r in enumerate(rs):
            color = cmap(i % cmap.N)
            ns = [int(n) if n.isdigit() else 0 for n in r.get("runs", "").split("/")]
            ns += [0] * (len(counts) - len(ns))
            pts = [(g, number(r[f"samples_per_s_g{g:g}_mean"]), number(r[f"samples_per_s_g{g:g}_std"]), n)
                   for g, n in zip(counts, ns)]
            pts = [p for p in pts if not math.isnan(p[1])]
            if not pts:
                continue
            all_ns += [p[3] for p in pts]
            name = name_of(r)
            yerr = error_bars([p[1] for p in pts], [p[2] for p in pts], [p[3] for p in pts])
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=yerr, marker="o", color=color, label=name,
                        capsize=3)
            base = number(r["samples_per_s_g1_mean"]) if 1.0 in counts else math.nan
            if not math.isnan(base) and pts[-1][0] > 1:
                ideal = [g for g in counts if g <= pts[-1][0]]
                ax.plot(ideal, [base * g for g in ideal], linestyle="--", color=color, alpha=0.6)
        ax.set_xticks(counts, [f"{g:g}" for g in counts])
        ax.set_title(net)
        ax.set_xlabel(DEVICES)
        ax.set_ylabel("samples/s")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        legend_below(ax)
    fig.suptitle(f"{title}\n({runs_text(all_ns or [1], 'point')}){shared_line(shared)}", fontsize=11)
    tight_below_suptitle(fig, 3 if shared else 2)
    save(fig, out, "scaling.png")


def weak_scaling_figure(rows, out):
    """Weak-scaling efficiency (samples/s on N over N x the 1-rank rate at the same per-rank batch)
    against the rank count, one subplot per network, one line per per-rank batch and variant, from
    the weak_scaling table; each line starts at 1 on one rank (its own baseline). The efficiency
    axis spans the data and the ideal, not 0 to 1: the differences that matter are a few percent,
    which a full axis flattens into one line."""
    one = DEVICES[:-1] if DEVICES.endswith("s") else DEVICES
    rows = [r for r in rows if not math.isnan(number(r["efficiency_mean"]))]
    if not rows:
        leave_out(out, "weak_scaling.png", "no configuration has both values")
        return
    nets = {}
    for r in rows:
        nets.setdefault(r["net"], {}).setdefault((number(r["batch_per_rank"]), r.get("variant", "")), []).append(r)
    all_ns, counts = [], set([1.0])
    shared = shared_parts(rows)
    labels = {}
    for net, lines in nets.items():
        for per_rank, variant in lines:
            short = variant_of({"variant": variant}, shared)
            labels[(net, per_rank, variant)] = legend_label(f"{per_rank:g} per {one}" + (f" {short}" if short else ""))
    height = max(legend_lines(labels[(net, *k)] for k in lines) for net, lines in nets.items())
    fig, axes = plt.subplots(1, len(nets), figsize=(max(6.5 * len(nets), 6.5), 5.0 + LEGEND_LINE * height),
                             squeeze=False)
    lowest = min(number(r["efficiency_mean"]) - max(0.0, number(r["efficiency_std"]) if r["runs"] != "1" else 0.0)
                 for r in rows)
    for ax, (net, lines) in zip(axes[0], nets.items()):
        cmap = plt.get_cmap("tab10" if len(lines) <= 10 else "tab20")
        for i, ((per_rank, variant), rs) in enumerate(sorted(lines.items())):
            rs.sort(key=lambda r: number(r["gpus"]))
            ns = [1.0] + [number(r["gpus"]) for r in rs]
            eff = [1.0] + [number(r["efficiency_mean"]) for r in rs]
            runs = [2] + [int(r["runs"]) if r["runs"].isdigit() else 1 for r in rs]
            yerr = error_bars(eff, [0.0] + [number(r["efficiency_std"]) for r in rs], runs)
            counts.update(ns)
            all_ns += runs[1:]
            ax.errorbar(ns, eff, yerr=yerr, marker="o", color=cmap(i % cmap.N), label=labels[(net, per_rank, variant)],
                        capsize=3)
        ax.axhline(1.0, linestyle="--", color="grey", alpha=0.6)
        ax.set_title(net)
        ax.set_xlabel(DEVICES)
        ax.set_ylabel("weak-scaling efficiency")
        ax.set_ylim(max(0.0, math.floor((min(lowest, 1.0) - 0.03) * 20) / 20), max(1.05, ax.get_ylim()[1]))
        ax.grid(True, alpha=0.3)
        legend_below(ax)
    for ax in axes[0]:
        ax.set_xticks(sorted(counts), [f"{g:g}" for g in sorted(counts)])
    fig.suptitle(f"Weak scaling: samples/s on N {DEVICES} / (N × the 1-{one} rate at the same batch per {one})\n"
                 f"({runs_text(all_ns or [1], 'point')}; dashed: ideal){shared_line(shared)}", fontsize=11)
    tight_below_suptitle(fig, 3 if shared else 2)
    save(fig, out, "weak_scaling.png")


def panel_grid(count, width, height, legend_room=1.5):
    """A figure of `count` panels of `width` x `height` inches, in a grid rather than one row: a
    sweep's panels (a network, or a network, batch and mix, each) side by side made figures tens to
    hundreds of inches wide. Two to a row while that stays under 18 inches, else one; the cells left
    over are hidden. Returns the figure and the panels in order."""
    cols = 2 if count > 1 and 2 * width <= 18 else 1
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(max(cols * width + legend_room, 7), height * rows), squeeze=False)
    for ax in axes.flat[count:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:count])


def tight_below_suptitle(fig, lines=2):
    """tight_layout leaving the top for a suptitle of `lines` lines (it ignores the suptitle, which
    then overlapped a single row's panel title)."""
    top = 1 - (0.12 + 0.22 * lines) / fig.get_figheight()
    fig.tight_layout(rect=(0, 0, 1, top))
    # tight_layout gives up (with a warning) where long tick labels leave it no room: keep the top.
    fig.subplots_adjust(top=min(fig.subplotpars.top, top - 0.3 / fig.get_figheight()))


def legend_right(fig, axes, handles, names, **kwargs):
    """The figure's legend to the right of its rightmost panel, outside every panel."""
    right = max(ax.get_position().x1 for ax in axes)
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(right + 0.005, 0.5), **kwargs)


def phases_figure(rows, out):
    """Stacked parts of the step, one subplot per network: each with its own scale and unit, as
    networks differ by orders of magnitude and a shared axis would flatten the small ones."""
    rows = sorted(rows, key=lambda r: (r["net"], number(r["batch"]), number(r["gpus"]), r.get("variant", "")))
    if not rows or all(math.isnan(number(r["total_ms_mean"])) for r in rows):
        leave_out(out, "phases.png", "no phase timings were recorded")
        return
    nets = {}
    for r in rows:
        nets.setdefault(r["net"], []).append(r)
    ns = [runs_of(r) for r in rows]
    show_n = len(set(ns)) > 1
    shared = shared_parts(rows)
    # The bars' labels hang at 45 degrees below the panels: the figure grows by their height (about
    # 0.055 inches a character at fontsize 8), so that tight_layout need not squash the bars for them.
    longest = max(len(line) for r in rows for line in label(r, show_n, shared).split("\n"))
    fig, axes = panel_grid(len(nets), max(max(3.5, 0.55 * len(rs) + 1.5) for rs in nets.values()),
                           3.4 + 0.055 * longest)
    for ax, (net, rs) in zip(axes, nets.items()):
        unit, si = pick_unit("s", [number(r["total_ms_mean"]) * 1e-3 for r in rs])
        scale = 1e-3 / si  # the table's ms -> this subplot's unit
        x = np.arange(len(rs))
        bottom = np.zeros(len(rs))
        for i, (part, name) in enumerate(PHASES):
            v = np.nan_to_num([number(r.get(part + "_ms_mean", "")) * scale for r in rs])
            ax.bar(x, v, bottom=bottom, label=name, color=f"C{i}", width=0.7)
            bottom += v
        ax.plot(x, [number(r["total_ms_mean"]) * scale for r in rs], "k_", markersize=16, markeredgewidth=2,
                label="total (measured)")
        ax.set_xticks(x, [label(r, show_n, shared) for r in rs], rotation=45, ha="right", fontsize=8)
        ax.set_title(net)
        ax.set_xlabel(f"batch-{DEVICES}")
        ax.set_ylabel(f"{unit} per batch")
        ax.set_ylim(bottom=0)
    handles, names = axes[0].get_legend_handles_labels()
    fig.suptitle("Parts of the full training step (slowest rank; they add up to the measured total)\n"
                 + (f"(means of n = {ns[0]} run{'s' if ns[0] != 1 else ''} each)" if len(set(ns)) == 1
                    else "(means of n runs per bar as labelled)") + shared_line(shared), fontsize=11)
    tight_below_suptitle(fig, 3 if shared else 2)
    # Top of the stack first, as the eye reads the bars; outside the axes so no bar is covered.
    order = [names.index("total (measured)")] + [i for i in reversed(range(len(names))) if names[i] != "total (measured)"]
    legend_right(fig, axes, [handles[i] for i in order], [names[i] for i in order], fontsize=8)
    save(fig, out, "phases.png")


def power_figure(h5_path, run_label, out):
    title = "Power per GPU: " + (run_label or "no run")
    if not h5_path:
        leave_out(out, "power_trace.png", "no run selected")
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
        leave_out(out, "power_trace.png",
                  "no power samples in " + (run_label or "the run") + ": a CPU run, or NVML unavailable")
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", required=True, help="folder with time.csv, energy.csv, by_gpus.csv, phases.csv")
    parser.add_argument("--out", required=True, help="folder for the PNG files")
    parser.add_argument("--power-h5", default="", help="run.h5 whose /power samples are drawn")
    parser.add_argument("--power-label", default="", help="description of that run")
    parser.add_argument("--figures", default="training",
                        help="comma separated: training (the five figures of the runs), hetero (hetero_ranks.csv, "
                             "split_history.csv), allreduce (allreduce.csv), inference (inference.csv), weak "
                             "(weak_scaling.csv), sweep (conv_sweep.csv)")
    parser.add_argument("--devices", default="GPUs", choices=["GPUs", "ranks"],
                        help="what the parallel units are called in legends and axes (ranks: CPU runs)")
    parser.add_argument("--left-out", default="",
                        help="file that receives 'name<TAB>reason' for each figure not drawn (no data)")
    a = parser.parse_args()
    global DEVICES
    DEVICES = a.devices
    wanted = set(a.figures.split(","))
    if not wanted or not wanted <= {"training", "hetero", "allreduce", "inference", "weak", "sweep", "kernels"}:
        print(f"report_plots: --figures: expected training, hetero, allreduce, inference, weak, sweep and/or kernels, got "
              f"'{a.figures}'", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    if "allreduce" in wanted:
        allreduce_figure(read_table(a.tables, "allreduce"), a.out)
        allreduce_energy_figure(a.tables, a.out)
    if "inference" in wanted:
        import report_plots_infer as infer  # beside this script, as report_plots_hetero

        helpers = types.SimpleNamespace(number=number, save=save, leave_out=leave_out)
        rows = read_table(a.tables, "inference")
        infer.throughput_figure(rows, a.out, helpers)
        infer.efficiency_figure(rows, a.out, helpers)
        infer.latency_figure(rows, a.out, helpers)
    if "sweep" in wanted:
        import report_plots_kernels as kernels  # beside this script, as report_plots_hetero

        helpers = types.SimpleNamespace(number=number, save=save, leave_out=leave_out)
        rows = read_table(a.tables, "conv_sweep")
        kernels.time_figure(rows, a.out, helpers)
        kernels.memory_figure(rows, a.out, helpers)
    if "kernels" in wanted:
        import report_plots_kernels as kernels  # beside this script, as report_plots_hetero

        helpers = types.SimpleNamespace(number=number, save=save, leave_out=leave_out)
        rows = read_table(a.tables, "kernel_cases")
        kernels.peak_figure(rows, a.out, helpers)
        kernels.energy_figure(rows, a.out, helpers)
    if "training" in wanted:
        time_rows = read_table(a.tables, "time")
        bars_per_network(time_rows, "seconds_per_batch", "s", "per batch",
                         "Time per batch of the full training step (data, forward, backward, allreduce, update)",
                         a.out, "time_per_batch.png", "no timed iterations")
        energy_of = "all GPUs" if DEVICES == "GPUs" else "GPUs or RAPL of each host"
        bars_per_network(read_table(a.tables, "energy"), "joules_per_batch", "J", "per batch",
                         f"Energy per batch of the full training step ({energy_of})", a.out, "joules_per_batch.png",
                         "no energy counters were readable (CPU run without NVML/RAPL, or NVML unavailable)")
        scaling_figure(read_table(a.tables, "by_gpus"), a.out)
        power_figure(a.power_h5, a.power_label, a.out)
        phases_figure(read_table(a.tables, "phases"), a.out)
    if "weak" in wanted:
        weak_scaling_figure(read_table(a.tables, "weak_scaling"), a.out)
    if "hetero" in wanted:
        import report_plots_hetero as hetero  # beside this script: Python puts its folder on sys.path

        helpers = types.SimpleNamespace(number=number, pick_unit=pick_unit, save=save, leave_out=leave_out,
                                        panel_grid=panel_grid, legend_right=legend_right,
                                        tight_below_suptitle=tight_below_suptitle)
        hetero.rank_balance_figure(read_table(a.tables, "hetero_ranks"), a.out, helpers)
        hetero.split_history_figure(read_table(a.tables, "split_history"), a.out, helpers)
    if a.left_out:
        with open(a.left_out, "w") as f:
            for name, reason in LEFT_OUT:
                f.write(f"{name}\t{reason}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
