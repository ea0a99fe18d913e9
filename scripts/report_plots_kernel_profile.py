"""The figure of `cnnscale time|bench conv --kernels --metrics` results for `cnnscale report` (imported
by report_plots.py), from the kernel_profile_metrics table: Li et al.'s Fig. 6 for today's GPUs --
per layer type (time) or cuDNN algorithm (bench conv) and pass, its share of the step's kernel time
and each hardware metric as the mean over its kernels weighted by their time, one panel per metric
and one bar per profile in each group.

A value whose kernels make less than 95 % of their group's kernel time is the value of that part
only: its bar is hatched and carries the share it covers, so it is never read as the group's.

The helpers (number, save, leave_out) are report_plots_common.py's, passed by report_plots.py.
"""
import math

import matplotlib.pyplot as plt

NAME = "kernel_profile_metrics.png"
COVERAGE = "_coverage_percent"
# Below this share of its group's time a value is marked as partial.
WHOLE_PERCENT = 95.0
# Groups shown: the longest ones (by their largest share of a step over the profiles).
MAX_GROUPS = 12


def _metrics(columns, rows, h):
    """[(value column, title, unit)] of the metrics some row has a value for, in the table's order."""
    out = []
    for col in columns:
        if not col.endswith(COVERAGE):
            continue
        base = col[: -len(COVERAGE)]
        value = base + "_percent" if base + "_percent" in columns else base
        if value in columns and any(not math.isnan(h.number(r[value])) for r in rows):
            title = base.upper() if len(base) <= 3 else base.replace("_", " ")  # ipc -> IPC
            out.append((value, col, title, "%" if value.endswith("_percent") else ""))
    return out


def _label(r):
    # The step's parts (update, unattributed, ...) are their own pass.
    return r["group"] if r["group"] == r["pass"] else f"{r['group']}, {r['pass']}"


def _slots(rows, h):
    """[(profile, row)] in drawing order: each profile's groups together, longest first (the table's
    order), at most MAX_GROUPS of each; and {profile: groups left out}."""
    by_profile = {}
    for r in rows:
        by_profile.setdefault(r["profile"], []).append(r)
    slots, left_out = [], {}
    for profile, groups in by_profile.items():
        groups = sorted(groups, key=lambda r: -h.number(r["share_of_step_percent"]))
        slots += [(profile, r) for r in groups[:MAX_GROUPS]]
        if len(groups) > MAX_GROUPS:
            left_out[profile] = len(groups) - MAX_GROUPS
    return slots, left_out


def metrics_figure(rows, out, h):
    if not rows:
        h.leave_out(out, NAME, "no kernel profile measured hardware metrics (--metrics)")
        return
    columns = list(rows[0].keys())
    metrics = _metrics(columns, rows, h)
    if not metrics:
        h.leave_out(out, NAME, "the kernel profiles' metrics have no value for any group")
        return
    slots, left_out = _slots(rows, h)
    profiles = list(dict.fromkeys(p for p, _ in slots))
    # A gap of one bar between profiles.
    xs, x = [], 0.0
    for i, (profile, _) in enumerate(slots):
        if i and profile != slots[i - 1][0]:
            x += 1.0
        xs.append(x)
        x += 1.0
    panels = [("share_of_step_percent", None, "share of the step's kernel time", "%")] + metrics
    cols = 2 if len(panels) > 1 else 1
    nrows = math.ceil(len(panels) / cols)
    width = max(6.0, 0.32 * len(slots) + 1.5)
    fig, axes = plt.subplots(nrows, cols, figsize=(cols * width, 3.4 * nrows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    cmap = plt.get_cmap("tab10")
    color = {p: cmap(i % 10) for i, p in enumerate(profiles)}
    for ax, (value, coverage, title, unit) in zip(axes.flat, panels):
        for x, (profile, r) in zip(xs, slots):
            v = h.number(r[value])
            if math.isnan(v):
                # Not measured, or no kernel of the group has it: said, so it is not read as 0.
                ax.annotate("n/a", (x, 0), ha="center", va="bottom", fontsize=6, color="grey", xytext=(0, 1),
                            textcoords="offset points")
                continue
            covered = h.number(r[coverage]) if coverage else 100.0
            partial = not math.isnan(covered) and covered < WHOLE_PERCENT
            ax.bar(x, v, width=0.8, color=color[profile], hatch="///" if partial else None,
                   edgecolor="white" if partial else None, linewidth=0)
            if partial:
                ax.annotate(f"{covered:.0f}%", (x, v), ha="center", va="bottom", fontsize=6, xytext=(0, 1),
                            textcoords="offset points")
        ax.set_xlim(-0.7, xs[-1] + 0.7)
        ax.set_xticks(xs)
        ax.set_xticklabels([_label(r) for _, r in slots], rotation=45, ha="right", fontsize=7)
        ax.set_title(f"{title} ({unit})" if unit else title, fontsize=9)
        ax.set_ylabel(unit, fontsize=8)  # other units are in the title (IPC, sectors per request)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(True, axis="y", alpha=0.3)
        ax.margins(y=0.12)
    handles = [plt.Rectangle((0, 0), 1, 1, color=color[p]) for p in profiles]
    names = [p + (f" ({left_out[p]} shorter groups not shown)" if p in left_out else "") for p in profiles]
    handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="grey", hatch="///", edgecolor="white"))
    names.append(f"value covers < {WHOLE_PERCENT:g} % of the group's kernel time (the share written on the bar)")
    fig.suptitle("Kernel profiles: runtime share and hardware metrics per layer type or algorithm and pass, "
                 "each kernel weighted by its time (Li et al., Fig. 6)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 0.965), ncol=min(3, len(names)), fontsize=8,
               frameon=False)
    h.save(fig, out, NAME)
