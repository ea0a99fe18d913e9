"""Scaling figures for `cnnscale report` (imported by report_plots.py): strong-scaling curves over
every rank count in the data (by_gpus table), with the ideal from each line's 1-rank rate, and
weak-scaling efficiency against the rank count (weak_scaling table). On CPU ranks that ran another
BLAS thread count each than the 1-rank run, save draws the tables' note on it under the figure
(figure_notes.csv).
"""
import math
import re

import matplotlib.pyplot as plt

import report_plots_common as common
from report_plots_common import (LEGEND_LINE, error_bars, leave_out, legend_below, legend_label, legend_lines,
                                 number, runs_text, save, shared_line, shared_parts, tight_below_suptitle,
                                 variant_of)


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
    one = common.DEVICES[:-1] if common.DEVICES.endswith("s") else common.DEVICES
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
        ax.set_xlabel(common.DEVICES)
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
    one = common.DEVICES[:-1] if common.DEVICES.endswith("s") else common.DEVICES
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
        ax.set_xlabel(common.DEVICES)
        ax.set_ylabel("weak-scaling efficiency")
        ax.set_ylim(max(0.0, math.floor((min(lowest, 1.0) - 0.03) * 20) / 20), max(1.05, ax.get_ylim()[1]))
        ax.grid(True, alpha=0.3)
        legend_below(ax)
    for ax in axes[0]:
        ax.set_xticks(sorted(counts), [f"{g:g}" for g in sorted(counts)])
    fig.suptitle(f"Weak scaling: samples/s on N {common.DEVICES} / (N × the 1-{one} rate at the same batch per {one})\n"
                 f"({runs_text(all_ns or [1], 'point')}; dashed: ideal){shared_line(shared)}", fontsize=11)
    tight_below_suptitle(fig, 3 if shared else 2)
    save(fig, out, "weak_scaling.png")
