"""Figures of unequal ranks for `cnnscale report` (imported by report_plots.py): each rank's busy
and waiting time per batch for every mix and split policy (hetero_ranks table), and the shares of the
global batch per rank over the iterations of the splits refined online (auto, energy, edp;
split_history.csv).

The helpers (number, pick_unit, save, leave_out, panel_grid, legend_right, tight_below_suptitle) are
report_plots_common.py's, passed by report_plots.py as arguments, so that both figures follow its
units, file naming and left-out list; save also draws each figure's note (what an emulated mix of
SM partitions or CPU slowdowns does not reproduce, or the GPU models of a real mix), which the
report writes once for the tables and the figures (figure_notes.csv).
"""
import math

import matplotlib.pyplot as plt
import numpy as np


def _sets(rows):
    """Rows grouped by network, batch, mix and variant (one subplot each), in table order."""
    sets = {}
    for r in rows:
        sets.setdefault((r["net"], r["batch"], r["mix"], r.get("variant", "")), []).append(r)
    return sets


def _set_title(key):
    net, batch, mix, variant = key
    return f"{net}, batch {batch}\n{mix}" + (f", {variant}" if variant else "")


def _short_speed(speed):
    """Tick-sized speed: "slowdown 3" -> "×3 slower", "132 SMs" kept."""
    return "×" + speed[len("slowdown "):] + " slower" if speed.startswith("slowdown ") else speed


def rank_balance_figure(rows, out, h):
    """Stacked bars per rank: compute (busy) and imbalance wait (waiting for the slowest rank), one
    cluster of bars per split policy, one subplot per network, batch and mix."""
    name = "rank_balance.png"
    if not any(not math.isnan(h.number(r["compute_s_mean"])) for r in rows):
        h.leave_out(out, name, "no rank recorded its compute time (runs without per-rank balance figures)")
        return
    sets = _sets(rows)
    # Panels as wide as the widest set needs (the full heterogeneous study has 24 sets of 20 bars).
    fig, axes = h.panel_grid(len(sets), max(max(3.5, 0.75 * len(rs) + 1.5) for rs in sets.values()), 4.8)
    ns = set()
    for ax, (key, rs) in zip(axes, sets.items()):
        tops = [h.number(r["compute_s_mean"]) + np.nan_to_num(h.number(r["imbalance_wait_s_mean"])) for r in rs]
        unit, si = h.pick_unit("s", tops)
        x, ticks, labels, centres, splits = 0.0, [], [], [], []
        for split in dict.fromkeys(r["split"] for r in rs):
            ranks = [r for r in rs if r["split"] == split]
            xs = x + np.arange(len(ranks))
            busy = np.nan_to_num([h.number(r["compute_s_mean"]) / si for r in ranks])
            wait = np.nan_to_num([h.number(r["imbalance_wait_s_mean"]) / si for r in ranks])
            ax.bar(xs, busy, width=0.8, color="C0", label="compute (busy)")
            ax.bar(xs, wait, width=0.8, bottom=busy, color="C3", hatch="//", alpha=0.8,
                   label="imbalance wait (waiting for the slowest rank)")
            ticks += list(xs)
            labels += [f"r{r['rank']}" + (f"\n{_short_speed(r['speed'])}" if r.get("speed") else "") +
                       (f"\nb={h.number(r['local_batch_mean']):.4g}" if not math.isnan(
                           h.number(r["local_batch_mean"])) else "") for r in ranks]
            centres.append(xs.mean())
            splits.append(split)
            ns.update(int(h.number(r["runs"])) for r in ranks if not math.isnan(h.number(r["runs"])))
            x += len(ranks) + 0.8
        ax.set_xticks(ticks, labels, fontsize=7)
        for c, split in zip(centres, splits):  # the policy under its cluster, below the rank labels
            ax.annotate(split, (c, 0), xycoords=("data", "axes fraction"), xytext=(0, -44),
                        textcoords="offset points", ha="center", va="top", fontsize=8, fontweight="bold")
        ax.set_title(_set_title(key), fontsize=9)
        ax.set_xlabel("rank (speed, local batch), grouped by split policy", labelpad=34)
        ax.set_ylabel(f"{unit} per batch")
        finite = [v / si for v in tops if not math.isnan(v)]
        ax.set_ylim(0, 1.1 * max(finite) if finite and max(finite) > 0 else 1)  # headroom over the tallest bar
        ax.grid(True, axis="y", alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    seen = dict(zip(names, handles))
    runs = sorted(ns) or [1]
    fig.suptitle("Busy and waiting time per batch of each rank\n"
                 + (f"(means of n = {runs[0]} run{'s' if runs[0] != 1 else ''} each)" if len(runs) == 1
                    else f"(means of {runs[0]}–{runs[-1]} runs per bar)"), fontsize=11)
    h.tight_below_suptitle(fig)
    h.legend_right(fig, axes, list(reversed(seen.values())), list(reversed(seen.keys())), fontsize=8)
    h.save(fig, out, name)


def split_history_figure(rows, out, h):
    """Step plot of each rank's share (samples of the global batch) against the iteration, one
    subplot per configuration refined online (its first run that recorded changes)."""
    name = "split_history.png"
    if not rows:
        h.leave_out(out, name, "no run refined its split online (auto, energy, edp) with a recorded split history")
        return
    sets = {}
    for r in rows:
        key = (r["net"], r["batch"], r["mix"], r.get("variant", ""), r["split"], r["run_id"])
        sets.setdefault(key, []).append(r)
    cols = min(3, len(sets))
    nrows = math.ceil(len(sets) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.6 * nrows + 0.4), squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= len(sets):
            ax.axis("off")
            continue
        key, rs = list(sets.items())[i]
        end = max(int(h.number(r["end_iteration"])) for r in rs)
        for rank in dict.fromkeys(r["rank"] for r in rs):
            pts = sorted((int(h.number(r["iteration"])), int(h.number(r["share"]))) for r in rs if r["rank"] == rank)
            its = [p[0] for p in pts] + [end]
            shares = [p[1] for p in pts] + [pts[-1][1]]
            speed = next((r["speed"] for r in rs if r["rank"] == rank and r.get("speed")), "")
            # Dashed every other rank: equal shares (the even start) would hide one line under the other.
            ax.step(its, shares, where="post", linewidth=1.6, linestyle="-" if int(rank) % 2 == 0 else "--",
                    label=f"rank {rank}" + (f" ({speed})" if speed else ""))
        changes = len({r["iteration"] for r in rs}) - 1
        # auto, energy and edp of one mix are drawn side by side: the title names the policy.
        ax.set_title(_set_title(key[:4]) + f"\n{key[4]}: {changes} change{'s' if changes != 1 else ''} of the split",
                     fontsize=9)
        ax.set_xlabel("iteration")
        ax.set_ylabel("share (samples of the global batch)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle("Split of the global batch over the iterations, refined online (one run each)", fontsize=11)
    h.tight_below_suptitle(fig, 1)  # plain tight_layout ignores the suptitle: it overlapped the top titles
    h.save(fig, out, name)

