#!/usr/bin/env python3
"""Check `cnnscale time --kernels --metrics` against Nsight Compute on the same kernels.

Usage: ncu-check.py OURS_KERNELS_CSV NCU_RAW_CSV PATTERN...
       ncu-check.py --all OURS_KERNELS_CSV NCU_RAW_CSV [MIN_US]
           (every kernel row of ours, at least MIN_US per launch, against ncu's launches of it: for
           an ncu run that profiled every kernel, as the work replay does)
       ncu-check.py --metrics            (the --metrics list to give ncu)
       ncu-check.py --pick OURS_KERNELS_CSV [GROUP/PASS...]
           (kernels of different kinds: the longest of each GROUP/PASS, by default a Convolution
           forward, an InnerProduct forward, a BatchNorm forward, the update and a ReLU forward;
           prints an ncu -k regex of their function names, then their names)

OURS_KERNELS_CSV is kernels.csv of a `time NET --kernels --metrics default --results DIR` folder;
NCU_RAW_CSV is `ncu --csv --page raw --print-kernel-base demangled --clock-control none
--cache-control none --metrics <the CUPTI metrics below, launch__*> cnnscale time NET ...` (the same
network, batch and precision, without --kernels: two profilers cannot share a process). Each PATTERN
(a substring of a kernel name) picks one kernel: its row with the most time per step in our file,
and every ncu launch of the same function name, grid and block whose duration is within a factor
1.5 of its mean (the same problem, not another layer's), whose median is compared. Launch
attributes must be equal; metric
values within 2 % (relative, or 0.5 points for a percentage below 25 %, where a relative bound is
stricter than the counters' own launch-to-launch spread). The "ncu spread" column is the range of
ncu's own launches, relative to their median: where it exceeds 2 %, ncu does not reproduce itself
to the bound either.

The formulas are written out again here, independently of src/measure/kernel_metric_set.cpp, so that
the check covers them too.
"""
import csv
import statistics
import sys

FORMULAS = {
    "achieved_occupancy": ("sm__warps_active.avg.pct_of_peak_sustained_active", None, 1.0),
    "sm_throughput": ("sm__throughput.avg.pct_of_peak_sustained_elapsed", None, 1.0),
    "issue_slot_use": ("sm__inst_issued.avg.pct_of_peak_sustained_active", None, 1.0),
    "ipc": ("sm__inst_executed.avg.per_cycle_active", None, 1.0),
    "warp_execution_efficiency": ("smsp__thread_inst_executed.sum", "smsp__inst_executed.sum", 100.0 / 32.0),
    "global_load_sectors_per_request": ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
                                        "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", 1.0),
    "global_store_sectors_per_request": ("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
                                         "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", 1.0),
    "shared_bank_conflict_rate": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
                                  "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", 100.0),
    "dram_throughput": ("dram__throughput.avg.pct_of_peak_sustained_elapsed", None, 1.0),
    "l2_throughput": ("lts__throughput.avg.pct_of_peak_sustained_elapsed", None, 1.0),
    "tensor_utilisation": ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", None, 1.0),
}
LAUNCH = {  # ours -> ncu
    "registers_per_thread": "launch__registers_per_thread",
    "static_shared_bytes": "launch__shared_mem_per_block_static",
    "dynamic_shared_bytes": "launch__shared_mem_per_block_dynamic",
}


DURATION = "gpu__time_duration.sum"  # ns: tells apart launches of one kernel on problems of other sizes


def ncu_metric_list():
    names = set(LAUNCH.values()) | {DURATION}
    for num, den, _ in FORMULAS.values():
        names.add(num)
        if den:
            names.add(den)
    return ",".join(sorted(names))


def number(text):
    text = (text or "").replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return None


def dims(text):  # "(256, 1, 1)"
    return tuple(int(v) for v in text.strip("() ").split(",")) if text else None


def read_ncu(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own messages are not CSV
    rows = list(csv.DictReader(lines))
    return [r for r in rows if r.get("ID", "").strip().isdigit()]  # the units row has no ID


def derived(row):
    out = {}
    for key, (num, den, scale) in FORMULAS.items():
        n = number(row.get(num))
        d = number(row.get(den)) if den else 1.0
        if n is not None and d not in (None, 0.0):
            out[key] = n / d * scale
    return out


PERCENTAGES = {"achieved_occupancy", "sm_throughput", "issue_slot_use", "warp_execution_efficiency",
               "shared_bank_conflict_rate", "dram_throughput", "l2_throughput", "tensor_utilisation"}


def close(key, ours, theirs):
    if key in PERCENTAGES and max(abs(ours), abs(theirs)) < 25:
        return abs(ours - theirs) <= 0.5
    return abs(ours - theirs) <= 0.02 * max(abs(ours), abs(theirs))


def spread(values):
    """(max - min) / median of ncu's launches, as a percentage; blank for one launch."""
    if len(values) < 2:
        return ""
    mid = statistics.median(values)
    return f"{(max(values) - min(values)) / abs(mid) * 100:.1f} %" if mid else "n/a"


def strip_trailing(text, open_, close_):
    """`text` without the bracketed list it ends with (nested lists counted)."""
    text = text.rstrip()
    if not text.endswith(close_):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += text[i] == close_
        depth -= text[i] == open_
        if depth == 0:
            return text[:i]
    return text


def function_name(name):
    """The function's own name, as ncu's -k matches it: the identifier before its template and
    argument lists."""
    head = strip_trailing(strip_trailing(name, "(", ")"), "<", ">")
    return head.split("::")[-1].split(" ")[-1]


DEFAULT_PICK = ["Convolution/forward", "InnerProduct/forward", "BatchNorm/forward", "update/update",
                "ReLU/forward"]


def pick(path, kinds):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    chosen = []
    for group, pass_ in (k.split("/", 1) for k in kinds or DEFAULT_PICK):
        cands = [r for r in rows if r["group"] == group and r["pass"] == pass_ and r["name"] not in chosen]
        cands.sort(key=lambda r: -float(r["ms_per_step"]))
        if cands:
            chosen.append(cands[0]["name"])
    print("regex:^(" + "|".join(sorted({function_name(n) for n in chosen})) + ")$")
    for n in chosen:
        print(n)


def launches_of(mine, ncu):
    """ncu's launches of the kernel of our row `mine`: the same function name, grid and block, and a
    duration within a factor 1.5 of ours (the same problem)."""
    grid = tuple(int(float(mine[f"grid_{a}"])) for a in "xyz")
    block = tuple(int(float(mine[f"block_{a}"])) for a in "xyz")
    # By function name, grid and block: ncu's demangler spells template arguments and namespaces
    # its own way ("<unnamed>" for "(anonymous namespace)", 1 for true, T1 in signatures).
    theirs = [r for r in ncu if function_name(r["Kernel Name"]) == function_name(mine["name"])
              and dims(r.get("Grid Size")) == grid and dims(r.get("Block Size")) == block]
    # One function with one grid and block can serve several layers of different sizes (a 3x3
    # convolution and a 1x1 projection of the same output): keep the launches whose duration is
    # within a factor 1.5 of ours, the same problem; the others are other layers' launches.
    ours_ns = number(mine.get("mean_us"))
    if ours_ns:
        same = [r for r in theirs if (d := number(r.get(DURATION))) and 1 / 1.5 <= d / (ours_ns * 1e3) <= 1.5]
        theirs = same or theirs
    return grid, block, theirs


def compare(mine, theirs):
    """(field, ours, ncu's median, ncu's launches, ncu's spread, within the bound) for every launch
    attribute and metric."""
    out = []
    for field, ncu_name in LAUNCH.items():
        a = number(mine[field])
        b = statistics.median(number(r[ncu_name]) for r in theirs)
        out.append((field, a, b, len(theirs), "", a == b))
    values = [derived(r) for r in theirs]
    for key in FORMULAS:
        a = number(mine.get(key))
        bs = [v[key] for v in values if key in v]
        if a is None and not bs:
            continue
        b = statistics.median(bs) if bs else None
        out.append((key, a, b, len(bs), spread(bs), a is not None and b is not None and close(key, a, b)))
    return out


def check_all(ours, ncu, min_us):
    """Every kernel row of ours that runs at least `min_us` per launch, against ncu's launches of it:
    per metric, how many rows agree and what share of the compared kernel time they are; then the
    rows that disagree, longest first."""
    step_ms = sum(number(r["ms_per_step"]) or 0 for r in ours)
    compared, unmatched, misses = [], [], []
    for mine in ours:
        if (number(mine.get("mean_us")) or 0) < min_us:
            continue
        _, _, theirs = launches_of(mine, ncu)
        if not theirs:
            unmatched.append(mine)
            continue
        rows = compare(mine, theirs)
        compared.append((mine, rows))
        misses += [(mine, r) for r in rows if not r[5]]
    ms = sum(number(m["ms_per_step"]) for m, _ in compared)
    print(f"{len(compared)} kernel rows of {len(ours)} compared ({ms:.3f} of {step_ms:.3f} ms per step; "
          f"rows under {min_us} us per launch left out); {len(unmatched)} without an ncu launch")
    print(f"{'field':34} {'rows agreeing':>14} {'share of compared time':>24}")
    for field in list(LAUNCH) + list(FORMULAS):
        hits = [(m, r) for m, rows in compared for r in rows if r[0] == field]
        if not hits:
            continue
        good = [m for m, r in hits if r[5]]
        t_all = sum(number(m["ms_per_step"]) for m, _ in hits)
        t_good = sum(number(m["ms_per_step"]) for m in good)
        print(f"{field:34} {len(good):>6} of {len(hits):<5} {100 * t_good / t_all if t_all else 0:>22.1f} %")
    print(f"\n{'owner':22} {'kernel':34} {'us':>7} {'field':32} {'cnnscale':>10} {'ncu':>10} {'n':>3} {'spread':>8}")
    for mine, (field, a, b, n, sp, _) in sorted(misses, key=lambda x: -number(x[0]["ms_per_step"])):
        print(f"{mine['owner'][:22]:22} {function_name(mine['name'])[:34]:34} {number(mine['mean_us']):7.1f} "
              f"{field[:32]:32} {a if a is not None else float('nan'):10.4g} "
              f"{b if b is not None else float('nan'):10.4g} {n:3} {sp:>8}")
    for mine in unmatched:
        print(f"{mine['owner'][:22]:22} {function_name(mine['name'])[:34]:34} no ncu launch")
    return 1 if misses or unmatched else 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--metrics":
        print(ncu_metric_list())
        return 0
    if len(argv) >= 3 and argv[1] == "--pick":
        pick(argv[2], argv[3:])
        return 0
    if len(argv) in (4, 5) and argv[1] == "--all":
        with open(argv[2], newline="") as f:
            ours = list(csv.DictReader(f))
        return check_all(ours, read_ncu(argv[3]), float(argv[4]) if len(argv) == 5 else 0.0)
    if len(argv) < 4:
        print(__doc__)
        return 2
    with open(argv[1], newline="") as f:
        ours = list(csv.DictReader(f))
    ncu = read_ncu(argv[2])
    failures = 0
    print(f"{'kernel':40} {'field':34} {'cnnscale':>12} {'ncu':>12} {'launches':>8} {'ncu spread':>10}  ok")
    for pattern in argv[3:]:
        rows = [r for r in ours if pattern in r["name"]]
        mine = max(rows, key=lambda r: float(r["ms_per_step"] or 0)) if rows else None  # most time per step
        if mine is None:
            print(f"{pattern}: no such kernel in {argv[1]}")
            failures += 1
            continue
        grid, block, theirs = launches_of(mine, ncu)
        short = pattern[:40]
        if not theirs:
            print(f"{short:40} no ncu launch of the same name, grid {grid} and block {block}")
            failures += 1
            continue
        for field, a, b, n, sp, ok in compare(mine, theirs):
            failures += not ok
            print(f"{short:40} {field:34} {a if a is not None else float('nan'):12.6g} "
                  f"{b if b is not None else float('nan'):12.6g} {n:8} {sp:>10}  {'yes' if ok else 'NO'}")
    print(f"{failures} disagreement(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
