"""What every figure of `cnnscale report` shares (imported by report_plots.py and its report_plots_*.py
figure modules); it draws no figure itself: reading the CSV tables, units by magnitude, the bars' and
variants' labels, error bars and the number of runs behind them, legend placement, panel grids, and
saving a PNG (its words in the Description) or leaving a figure out with the reason (LEFT_OUT).

DEVICES, NOTES and LEFT_OUT are this module's state, set and read by report_plots.py: the figure
modules read them as report_plots_common.DEVICES at drawing time, not through a name bound at import.
save() draws a figure's note from NOTES (figure_notes.csv, written by `cnnscale report`: what the
figure's data can and cannot show) as a footnote under everything else the figure draws.
"""
import csv
import math
import os
import re
import sys
import textwrap

import matplotlib.pyplot as plt

# Units by magnitude, as the Markdown tables pick them: 98.85 ms, not 9.885e-05 ks.
UNITS = {"s": [("µs", 1e-6), ("ms", 1e-3), ("s", 1.0), ("ks", 1e3)],
         "J": [("mJ", 1e-3), ("J", 1.0), ("kJ", 1e3), ("MJ", 1e6), ("GJ", 1e9)]}

LEFT_OUT = []  # (figure name, reason) for figures with nothing to draw
NOTES = {}  # figure name -> its note (figure_notes.csv)
NOTE_GID = "note"  # the footnote's Text, told apart from the figure's other texts


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
    parts += ["note: " + t.get_text().replace("\n", " ") for t in fig.texts if t.get_gid() == NOTE_GID]
    return " | ".join(parts)


def footnote(fig, text, fontsize=8):
    """`text` as a paper's figure note: under the lowest thing the figure draws (tick labels, axis
    labels, legends below panels), left-aligned with it and wrapped to its width. Drawn last, after
    the layout, since it goes below what the layout placed; save's tight bounding box takes it in."""
    fig.canvas.draw()  # the layout's text extents are known only once drawn
    box = fig.get_tightbbox(fig.canvas.get_renderer())  # inches
    width_in, height_in = fig.get_size_inches()
    # About 0.5 em a character: the note runs as wide as the figure's content, no wider, and its
    # lines no longer than a page's (a sweep's wide figures would make them a screen long).
    chars = min(170, max(60, int(box.width * 72 / (0.5 * fontsize))))
    wrapped = textwrap.fill("Note: " + text, chars, break_on_hyphens=False, break_long_words=False)
    fig.text(max(box.x0, 0) / width_in, (box.y0 - 0.12) / height_in, wrapped, ha="left", va="top",
             fontsize=fontsize, color="0.2", gid=NOTE_GID)


def save(fig, out, name):
    """Written under a temporary name and renamed, like every other report file; with the figure's
    note from NOTES, where it has one."""
    if NOTES.get(name):
        footnote(fig, NOTES[name])
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
    """tight_layout with the panels (their titles included) below the suptitle of `lines` lines.
    Since matplotlib 3.3 tight_layout makes room for the suptitle itself: reserving that room again
    left a gap of about an inch above the panels. Where the suptitle is still overlapped (an older
    matplotlib, or tight_layout giving up with a warning where long tick labels leave it no room),
    the top is set from the suptitle's measured bottom instead."""
    fig.tight_layout()
    title = fig._suptitle
    if title is None:
        return
    renderer = fig.canvas.get_renderer()
    height = fig.get_figheight() * fig.dpi
    title_bottom = title.get_window_extent(renderer).y0 / height
    panels = [ax for ax in fig.axes if ax.get_visible()]
    reach = max(ax.get_tightbbox(renderer).y1 for ax in panels) / height if panels else 0
    if reach > title_bottom:
        # Lower the panels' tops by the overlap plus a small gap (0.05 inch).
        overlap = reach - title_bottom + 0.05 * fig.dpi / height
        fig.subplots_adjust(top=fig.subplotpars.top - overlap)


def legend_right(fig, axes, handles, names, **kwargs):
    """The figure's legend to the right of its rightmost panel, outside every panel."""
    right = max(ax.get_position().x1 for ax in axes)
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(right + 0.005, 0.5), **kwargs)
