"""Figures of `cnnscale infer` results for `cnnscale report` (imported by report_plots.py), from the
inference table (offline files, mean and std over the files that repeat a setting): throughput
against batch size, energy efficiency (images/J) against batch size, and p99 latency against
throughput, each with one panel per network and one line per device and precision (and rank count,
for jobs of several ranks: their images/s and energy are the job's).

The helpers (number, save, leave_out) are report_plots_common.py's, passed by report_plots.py as
arguments, so that these figures follow its file naming and left-out list.
"""
import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import ticker


def _networks(rows):
    """{network: {"device, precision[, N ranks (sum)][, setting=value...]": [rows by ascending batch]}},
    networks and series sorted; a job of several ranks (mpirun) is a series of its own, and so are the
    files of each value of a grouping setting that varies (the table's setting.<name> columns)."""
    nets = {}
    for r in rows:
        series = nets.setdefault(r["net"], {})
        ranks = r.get("ranks", "1")
        label = f'{r["device"]}, {r["precision"]}' + ("" if ranks == "1" else f", {ranks} ranks (sum)")
        label += "".join(f", {k[len('setting.'):]}={v}" for k, v in r.items() if k.startswith("setting."))
        series.setdefault(label, []).append(r)
    for series in nets.values():
        for rs in series.values():
            rs.sort(key=lambda r: int(r["batch"]))
    return {k: dict(sorted(v.items())) for k, v in sorted(nets.items())}


def _panels(count):
    fig, axes = plt.subplots(1, count, figsize=(max(5.0, 4.8 * count), 4.2), squeeze=False, layout="constrained")
    return fig, axes[0]


def _legend_below(ax):
    """The legend under the panel: multi-GPU series climb through the middle of the plot, where a
    legend inside would cover them."""
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)


def _plain_log_ticks(axis, limits):
    """Log-scale ticks as plain numbers (6, 10, 2,000 rather than 6×10⁰). Minor ticks are labelled
    as far as they fit: all of them within a decade, where they carry the only labels; those
    starting with 2 or 5 over up to two and a half decades; none beyond."""
    def plain(v, _=None):
        return f"{v:,.0f}" if v >= 10 else f"{v:g}"

    lo, hi = limits
    decades = math.log10(hi / lo) if lo > 0 and hi > lo else 0.0

    def minor(v, _):
        lead = round(v / 10 ** math.floor(math.log10(v)))
        return plain(v) if decades < 1 or (decades < 2.5 and lead in (2, 5)) else ""

    axis.set_major_formatter(ticker.FuncFormatter(plain))
    axis.set_minor_formatter(ticker.FuncFormatter(minor))


def _spread(h, rows, column):
    """Std per row where a setting was repeated (NaN otherwise: nothing to draw)."""
    stds = [h.number(r[column + "_std"]) for r in rows]
    return None if all(math.isnan(s) for s in stds) else np.nan_to_num(stds)


def _against_batch(rows, out, h, column, ylabel, title, name, empty):
    if not any(not math.isnan(h.number(r[column + "_mean"])) for r in rows):
        h.leave_out(out, name, empty)
        return
    nets = _networks(rows)
    repeated = any(int(r["files"]) > 1 for r in rows)
    fig, axes = _panels(len(nets))
    for ax, (net, series) in zip(axes, nets.items()):
        for label, rs in series.items():
            pts = [(int(r["batch"]), h.number(r[column + "_mean"]), r) for r in rs]
            pts = [p for p in pts if not math.isnan(p[1])]
            if not pts:
                continue
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=_spread(h, [p[2] for p in pts], column),
                        marker="o", markersize=4, capsize=2, label=label)
        batches = sorted({int(r["batch"]) for rs in series.values() for r in rs})
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches, [str(b) for b in batches], fontsize=8)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.05)  # rates from zero (a 5% dip looks like one)
        ax.set_xlabel("batch size")
        ax.set_ylabel(ylabel)
        ax.set_title(net)
        ax.grid(True, alpha=0.3)
        _legend_below(ax)
    fig.suptitle(title + ("\nerror bars: ± std over the files that repeat a setting" if repeated else ""))
    h.save(fig, out, name)


def throughput_figure(rows, out, h):
    _against_batch(rows, out, h, "images_per_s", "images/s",
                   "Inference throughput against batch size (offline, back-to-back batches)",
                   "inference_throughput.png", "no offline inference results")


def efficiency_figure(rows, out, h):
    _against_batch(rows, out, h, "images_per_joule", "images/J",
                   "Inference energy efficiency against batch size (images per joule of the device)",
                   "inference_efficiency.png", "no inference result measured energy (no NVML or RAPL counter)")


def latency_figure(rows, out, h):
    """p99 latency of a batch timed alone against the throughput at that batch size: each point a
    batch size (labelled), so the cost in latency of each gain in throughput reads off the curve."""
    name = "inference_latency.png"
    if not any(not math.isnan(h.number(r["latency_p99_s_mean"])) for r in rows):
        h.leave_out(out, name, "no offline inference results")
        return
    nets = _networks(rows)
    fig, axes = _panels(len(nets))
    for ax, (net, series) in zip(axes, nets.items()):
        for label, rs in series.items():
            pts = [(h.number(r["images_per_s_mean"]), 1e3 * h.number(r["latency_p99_s_mean"]), r["batch"]) for r in rs]
            pts = [p for p in pts if not (math.isnan(p[0]) or math.isnan(p[1]))]
            if not pts:
                continue
            line = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=4, label=label)[0]
            for x, y, batch in pts:
                ax.annotate(batch, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7,
                            color=line.get_color())
        ax.set_xscale("log")
        ax.set_yscale("log")
        low, high = ax.get_ylim()
        ax.set_ylim(low, high * 1.3)  # room above the top point for its batch label
        _plain_log_ticks(ax.yaxis, ax.get_ylim())
        _plain_log_ticks(ax.xaxis, ax.get_xlim())
        ax.tick_params(axis="both", which="both", labelsize=7)
        ax.set_xlabel("images/s")
        ax.set_ylabel("p99 latency (ms)")
        ax.set_title(net)
        ax.grid(True, which="major", alpha=0.3)
        _legend_below(ax)
    fig.suptitle("Inference latency against throughput (points labelled with the batch size)")
    h.save(fig, out, name)
