"""Figures of training runs for `cnnscale report` (imported by report_plots.py): time and energy per
batch per batch-ranks (or batch-GPUs) combination as in Castro et al.'s Figs. 5-8 (time and energy
tables), the per-phase breakdown of the step (phases table), and one run's power trace per GPU (its
run.h5).
"""
import math

import matplotlib.pyplot as plt
import numpy as np

import report_plots_common as common
from report_plots_common import (by_network, device_colors, devices_text, error_bars, label, leave_out,
                                 legend_right, number, panel_grid, pick_unit, runs_of, runs_text, save,
                                 shared_line, shared_parts, tight_below_suptitle)

# The parts of a step in stacking order (phases.csv <part>_ms columns); they add up to total_ms.
PHASES = [("data", "data"), ("h2d", "h2d"), ("forward", "forward"), ("backward", "backward"),
          ("allreduce", "exposed allreduce"), ("update", "update"), ("other", "other")]


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
        ax.set_xlabel(f"batch-{common.DEVICES}")
        ax.set_ylabel(f"{unit} {per}")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    fig.suptitle(f"{title}\n({runs_text(ns)}){shared_line(shared)}", fontsize=11)
    tight_below_suptitle(fig, 3 if shared else 2)
    right = axes[0][-1].get_position().x1  # just right of the last subplot
    fig.legend(handles, [devices_text(g) for g in colors], loc="center left", bbox_to_anchor=(right + 0.005, 0.5),
               fontsize=8)
    save(fig, out, name)


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
        totals = [number(r["total_ms_mean"]) * scale for r in rs]
        ax.plot(x, totals, "k_", markersize=16, markeredgewidth=2, label="total (measured)")
        ax.set_xticks(x, [label(r, show_n, shared) for r in rs], rotation=45, ha="right", fontsize=8)
        ax.set_title(net)
        ax.set_xlabel(f"batch-{common.DEVICES}")
        ax.set_ylabel(f"{unit} per batch")
        # Room above the taller of the stack and the total's marker: autoscaling ends the axis at the
        # stack's top, where the marker and the last part's edge were cut off.
        ax.set_ylim(0, 1.08 * max(np.nanmax(np.append(bottom, totals)), 1e-12))
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
