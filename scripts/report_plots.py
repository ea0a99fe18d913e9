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
(report_plots_kernels.py); where the runs measured more than one GPU model, time and joules per batch
of each model per batch-GPUs combination (gpu_models table; report_plots_models.py); for kernel
profiles with hardware metrics, the runtime share and each metric per layer type or algorithm
(kernel_profile_metrics table; report_plots_kernel_profile.py).

This script reads the arguments and calls the figure modules beside it: report_plots_training.py
(time, energy, phases, power), report_plots_scaling.py (strong and weak scaling),
report_plots_allreduce.py, report_plots_hetero.py, report_plots_infer.py,
report_plots_kernels.py, report_plots_models.py and report_plots_kernel_profile.py; what they share (units, labels, legends, saving) is report_plots_common.py.

A figure without data is not drawn: its name and the reason go to the --left-out file instead.
A figure with a note in figure_notes.csv (what its data can and cannot show: an emulated mix of
ranks, BLAS threads per CPU rank) carries it as a footnote under the plot.
Error bars are drawn only over 2 or more runs, and the number of runs is shown.
Run by `cnnscale report` with Debian's /usr/bin/python3 (python3-matplotlib, python3-h5py).
Exit codes: 0 ok, 2 bad arguments/inputs, 3 matplotlib or numpy not importable.
"""
import argparse
import os
import sys
import types

try:
    import matplotlib

    matplotlib.use("Agg")  # no display on build machines
    # Imported here only to find out whether they can be: the figure modules below use them.
    import matplotlib.pyplot  # noqa: F401
    import numpy  # noqa: F401
except ImportError as e:  # the C++ side turns exit code 3 into "install python3-matplotlib"
    print(f"report_plots: {e}", file=sys.stderr)
    sys.exit(3)

# The figure modules lie beside this script (Python puts its folder on sys.path); imported only once
# matplotlib is known to be there, so that its absence is exit code 3 and not a traceback.
import report_plots_common as common
from report_plots_allreduce import allreduce_energy_figure, allreduce_figure
from report_plots_common import (leave_out, legend_right, number, panel_grid, pick_unit, read_table,
                                 save, tight_below_suptitle)
from report_plots_scaling import scaling_figure, weak_scaling_figure
from report_plots_training import bars_per_network, phases_figure, power_figure


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", required=True,
                        help="folder with time.csv, energy.csv, by_gpus.csv, phases.csv, figure_notes.csv")
    parser.add_argument("--out", required=True, help="folder for the PNG files")
    parser.add_argument("--power-h5", default="", help="run.h5 whose /power samples are drawn")
    parser.add_argument("--power-label", default="", help="description of that run")
    parser.add_argument("--figures", default="training",
                        help="comma separated: training (the five figures of the runs), hetero (hetero_ranks.csv, "
                             "split_history.csv), allreduce (allreduce.csv), inference (inference.csv), weak "
                             "(weak_scaling.csv), sweep (conv_sweep.csv), kernels (kernel_cases.csv), models "
                             "(gpu_models.csv), profiles (kernel_profile_metrics.csv)")
    parser.add_argument("--devices", default="GPUs", choices=["GPUs", "ranks"],
                        help="what the parallel units are called in legends and axes (ranks: CPU runs)")
    parser.add_argument("--left-out", default="",
                        help="file that receives 'name<TAB>reason' for each figure not drawn (no data)")
    a = parser.parse_args()
    common.DEVICES = a.devices
    common.NOTES = {r["figure"]: r["note"] for r in read_table(a.tables, "figure_notes")}
    wanted = set(a.figures.split(","))
    if not wanted or not wanted <= {"training", "hetero", "allreduce", "inference", "weak", "sweep", "kernels",
                                   "models", "profiles"}:
        print(f"report_plots: --figures: expected training, hetero, allreduce, inference, weak, sweep, kernels, "
              f"models and/or profiles, got "
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
    if "profiles" in wanted:
        import report_plots_kernel_profile as profile  # beside this script, as report_plots_hetero

        helpers = types.SimpleNamespace(number=number, save=save, leave_out=leave_out)
        profile.metrics_figure(read_table(a.tables, "kernel_profile_metrics"), a.out, helpers)
    if "training" in wanted:
        time_rows = read_table(a.tables, "time")
        bars_per_network(time_rows, "seconds_per_batch", "s", "per batch",
                         "Time per batch of the full training step (data, forward, backward, allreduce, update)",
                         a.out, "time_per_batch.png", "no timed iterations")
        energy_of = "all GPUs" if common.DEVICES == "GPUs" else "GPUs or RAPL of each host"
        bars_per_network(read_table(a.tables, "energy"), "joules_per_batch", "J", "per batch",
                         f"Energy per batch of the full training step ({energy_of})", a.out, "joules_per_batch.png",
                         "no energy counters were readable (CPU run without NVML/RAPL, or NVML unavailable)")
        scaling_figure(read_table(a.tables, "by_gpus"), a.out)
        power_figure(a.power_h5, a.power_label, a.out)
        phases_figure(read_table(a.tables, "phases"), a.out)
    if "models" in wanted:
        from report_plots_models import gpu_models_figure

        gpu_models_figure(read_table(a.tables, "gpu_models"), a.out)
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
            for name, reason in common.LEFT_OUT:
                f.write(f"{name}\t{reason}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
