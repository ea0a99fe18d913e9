"""GPU models compared for `cnnscale report` (imported by report_plots.py), as Castro et al.'s Figs. 5-8
compare Maxwell and Pascal: per network, time per batch (left) and joules per batch (right) of the full
training step, a group of bars per batch-GPUs combination and one bar per GPU model, from the
gpu_models table (model k's columns end in _m<k>, gpu_m<k> names it, m1 is the reference).
"""
import math

import matplotlib.pyplot as plt
import numpy as np

from report_plots_common import error_bars, leave_out, number, pick_unit, runs_text, save, tight_below_suptitle

NAME = "gpu_models.png"
# (CSV stem, quantity, axis label after the unit, panel title)
PANELS = [("seconds_per_batch", "s", "per batch", "time per batch (slowest rank)"),
          ("joules_per_batch", "J", "per batch", "joules per batch (all GPUs of the job)")]


def models_of(rows):
    """The models in column order (m1, the reference, first)."""
    models, k = [], 1
    while rows and f"gpu_m{k}" in rows[0]:
        models.append(rows[0][f"gpu_m{k}"])
        k += 1
    return models


def runs(row, k):
    n = number(row.get(f"runs_m{k}", ""))
    return 0 if math.isnan(n) else int(n)


def bar_label(row, counts):
    """Castro et al.'s bar names (batch_size-number_of_GPUs), the variant where rows have one, and, with
    `counts`, each model's runs in legend order (0: that model did not run it, hence no bar)."""
    text = f"{row['batch']}-{row['gpus']}"
    if row.get("variant"):
        text += f"\n{row['variant']}"
    if counts:
        text += "\nn=" + "/".join(str(runs(row, k)) for k in range(1, counts + 1))
    return text


def gpu_models_figure(rows, out):
    models = models_of(rows)
    if not rows or len(models) < 2:
        leave_out(out, NAME, "no configuration was measured on two or more GPU models")
        return
    nets = {}
    # In the table's order: a variant's (a precision's) bars side by side, not interleaved with another's.
    for r in rows:
        nets.setdefault(r["net"], []).append(r)
    every = [runs(r, k) for r in rows for k in range(1, len(models) + 1)]
    ns = [n for n in every if n > 0]
    # Runs per bar under each group where they differ (or a model lacks a configuration).
    counts = len(models) if len(set(every)) > 1 else 0
    longest = max(len(rs) for rs in nets.values())
    width = max(4.5, 0.28 * len(models) * longest + 1.8)
    fig, axes = plt.subplots(len(nets), 2, figsize=(2 * width, 3.6 * len(nets) + 0.6), squeeze=False)
    colors = [plt.get_cmap("tab10")(k % 10) for k in range(len(models))]
    for (net, rs), pair in zip(nets.items(), axes):
        x = np.arange(len(rs))
        step = 0.8 / len(models)
        for ax, (stem, quantity, per, title) in zip(pair, PANELS):
            unit, si = pick_unit(quantity, [number(r[f"{stem}_m{k}_mean"]) for r in rs
                                            for k in range(1, len(models) + 1)])
            top = 0.0
            for k, model in enumerate(models, start=1):
                means = np.array([number(r[f"{stem}_m{k}_mean"]) / si for r in rs])
                stds = [number(r[f"{stem}_m{k}_std"]) / si for r in rs]
                at = x - 0.4 + step * (k - 0.5)
                # A model that did not run a configuration has no bar there, not a bar of height 0.
                ran = ~np.isnan(means)
                e = error_bars(list(means), stds, [runs(r, k) for r in rs])
                ax.bar(at[ran], means[ran], step, yerr=None if e is None else np.array(e)[ran], capsize=2,
                       color=colors[k - 1], label=model + (" (reference)" if k == 1 else ""))
                reach = means + np.nan_to_num(np.array(e if e else [0.0] * len(rs)))
                top = max(top, np.nanmax(reach) if ran.any() else 0.0)
                # Over one other model's bars only: beside a third, the words ran into the next bars.
                if k == 1 or len(models) > 2:
                    continue
                # The table's difference from the reference over each other model's bar, in words: the
                # table's sign (positive: less than the reference) would read as "more" on a bar.
                for i, r in enumerate(rs):
                    p = number(r.get(f"{stem}_vs_reference_percent_m{k}_mean", ""))
                    if ran[i] and not math.isnan(p):
                        ax.annotate(f"{abs(p):.0f}%\n{'less' if p > 0 else 'more' if p < 0 else 'same'}",
                                    (at[i], reach[i]), xytext=(0, 2), textcoords="offset points", ha="center",
                                    va="bottom", fontsize=6.5, linespacing=0.9)
            ax.set_ylim(0, top * 1.15 if top > 0 else 1)
            ax.set_xticks(x, [bar_label(r, counts) for r in rs], fontsize=8)
            ax.set_xlabel("batch-GPUs")
            ax.set_ylabel(f"{unit} {per}")
            ax.set_title(f"{net}: {title}", fontsize=10)
    handles, labels = axes[0][0].get_legend_handles_labels()
    note = "; over the other model's bars: its difference from the reference" if len(models) == 2 else ""
    spread = runs_text(ns) if not counts else (
        "mean ± sample std; n = each model's runs in legend order, 0 where it did not run the configuration"
        + ("; bars of 1 run have no error bar" if 1 in ns else ""))
    fig.suptitle("GPU models compared (Castro et al., Figs. 5–8): the full training step per batch on each GPU "
                 f"model\n({spread}{note})", fontsize=11)
    # The models' legend under the title, above the panels (their titles included), where the eye starts:
    # the panels go down by a legend line's height to make room for it.
    tight_below_suptitle(fig, 2)
    inch = 1 / fig.get_figheight()
    fig.subplots_adjust(top=fig.subplotpars.top - 0.3 * inch)
    renderer = fig.canvas.get_renderer()
    reach = max(ax.get_tightbbox(renderer).y1 for ax in fig.axes) / (fig.get_figheight() * fig.dpi)
    fig.legend(handles, labels, loc="lower center", ncol=min(len(models), 3), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, reach + 0.02 * inch), borderaxespad=0)
    save(fig, out, NAME)
