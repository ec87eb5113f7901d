#!/usr/bin/env python3
"""executor="auto": measure where a process pool starts to pay, and check
that "auto" is never much slower than the better of the two.

On delta datasets (a base segment plus one delta per append, built by
pylance) of increasing size, times ``optimize`` in fresh processes with
``executor="local"`` (in process: threads; the kernel releases the GIL),
``executor="processes"`` (a spawn-started pool, start-up included) and
``executor="auto"``, in alternating order, medians of ``--repeats`` runs.
Fits ``t = a + b * segments + c * rows`` per executor (least squares,
coefficients at least 0), prints the constants for
``python/lance_segmerge/_costmodel.py`` and where the pool would start to
pay, and writes a report to ``bench/results/auto-<preset>-<date>.{md,json}``.

    python bench/executor_auto.py --preset quick     # a few minutes on 2 cores
    python bench/executor_auto.py                    # default: up to 2M rows
    python bench/executor_auto.py --preset smoke     # seconds

Timings on a shared or virtual machine are noisy: compare medians, and
rerun on a quiet machine before changing the constants.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_merge as bm
import cost_model

HERE = Path(__file__).resolve().parent
os.environ.setdefault("LANCE_LOG", "error")  # pylance warns about every empty IVF partition
sys.path.insert(0, str(HERE.parent / "python"))

# (rows, deltas): the work grows in both.
PRESETS: dict[str, dict[str, Any]] = {
    "smoke": {"points": [(6_000, 4), (12_000, 8)], "dim": 32, "partitions": 16, "delta_rows": 500, "repeats": 1},
    "quick": {"points": [(50_000, 10), (200_000, 20), (400_000, 40)], "dim": 64, "partitions": 64,
              "delta_rows": 1000, "repeats": 3},
    "default": {"points": [(100_000, 10), (400_000, 20), (1_000_000, 40), (2_000_000, 80)], "dim": 128,
                "partitions": 128, "delta_rows": 1000, "repeats": 5},
}
EXECUTORS = ["local", "processes", "auto"]


def run(uri: str, executor: str, workers: int) -> float:
    setup = "import lance_segmerge as ls"
    work = f"ls.optimize({uri!r}, 'vec_idx', executor={executor!r}, max_workers={workers}, fan_in=32, progress=False)"
    return float(bm.run_child(setup, work)["seconds"])


def lstsq_nonneg(xs: list[tuple[float, float]], ys: list[float]) -> tuple[float, float, float]:
    """t = a + b*x0 + c*x1, least squares, then each coefficient clamped at
    0 and the rest refitted (enough for three unknowns)."""
    import numpy as np

    A = np.array([[1.0, s, r] for s, r in xs])
    y = np.array(ys)
    free = [0, 1, 2]
    coef = np.zeros(3)
    while free:
        sol, *_ = np.linalg.lstsq(A[:, free], y, rcond=None)
        if (sol >= 0).all():
            coef[:] = 0
            coef[free] = sol
            break
        free.pop(int(np.argmin(sol)))
    return float(coef[0]), float(coef[1]), float(coef[2])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="default", choices=sorted(PRESETS))
    ap.add_argument("--type", default="IVF_RQ")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--work", help="scratch directory (kept, and reused, when given)")
    args = ap.parse_args(argv)
    p = PRESETS[args.preset]
    repeats = args.repeats or p["repeats"]
    root = Path(args.work or tempfile.mkdtemp(prefix="segmerge-auto-"))
    root.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"preset": args.preset, "type": args.type, "workers": args.workers, "repeats": repeats,
                           "machine": bm.machine(), "points": []}
    try:
        for rows, deltas in p["points"]:
            src = cost_model.build(root, args.type, rows, deltas, p["delta_rows"], p["dim"], p["partitions"])
            times: dict[str, list[float]] = {e: [] for e in EXECUTORS}
            for rep in range(repeats):
                order = EXECUTORS[rep % 3:] + EXECUTORS[:rep % 3]
                for e in order:
                    uri = bm.copy_dataset(src, str(root / "run"))
                    times[e].append(run(uri, e, args.workers))
            med = {e: statistics.median(ts) for e, ts in times.items()}
            pt = {"rows": rows, "segments": deltas + 1, "times": times, "median": med}
            res["points"].append(pt)
            print(f"{rows:>9} rows {deltas + 1:>4} segments: " + "  ".join(f"{e} {med[e]:.2f}s" for e in EXECUTORS),
                  flush=True)
    finally:
        if not args.work:
            shutil.rmtree(root, ignore_errors=True)
    xs = [(float(pt["segments"]), float(pt["rows"])) for pt in res["points"]]
    fits = {e: lstsq_nonneg(xs, [pt["median"][e] for pt in res["points"]]) for e in ("local", "processes")}
    res["fit"] = fits
    analyse(res)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = out / f"auto-{args.preset}-{stamp}"
    base.with_suffix(".json").write_text(json.dumps(res, indent=2))
    base.with_suffix(".md").write_text(report_markdown(res))
    print(report_markdown(res))
    print(f"report: {base}.md")
    return 0


def analyse(res: dict[str, Any]) -> None:
    from lance_segmerge import _costmodel

    (al, bl, cl), (ap_, bp, cp) = res["fit"]["local"], res["fit"]["processes"]
    margin = _costmodel.MARGIN
    # Where the pool, charged like the model charges it, wins by the margin,
    # at the measured ratio of segments to rows.
    seg_per_row = sum(pt["segments"] for pt in res["points"]) / sum(pt["rows"] for pt in res["points"])
    threshold = None
    rows = 1_000
    while rows <= 10**10:
        s = rows * seg_per_row
        if ap_ + bp * s + cp * rows < (1 - margin) * (al + bl * s + cl * rows):
            threshold = rows
            break
        rows = int(rows * 1.25) + 1
    res["threshold_rows"] = threshold
    worst = 0.0
    for pt in res["points"]:
        m = pt["median"]
        pt["auto_over_best"] = m["auto"] / min(m["local"], m["processes"])
        worst = max(worst, pt["auto_over_best"])
    res["auto_over_best_worst"] = worst


def report_markdown(res: dict[str, Any]) -> str:
    lines = [
        f"# executor=\"auto\": {res['type']}, preset {res['preset']}, {res['workers']} workers, "
        f"medians of {res['repeats']}",
        "",
        f"Machine: {res['machine'].get('cpu', '?')}, {res['machine'].get('cores', '?')} cores.",
        "",
        "| rows | segments | local (s) | processes (s) | auto (s) | processes / local | auto / best (≤ 1.10) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for pt in res["points"]:
        m = pt["median"]
        lines.append(
            f"| {pt['rows']} | {pt['segments']} | {m['local']:.3f} | {m['processes']:.3f} | {m['auto']:.3f} | "
            f"{m['processes'] / m['local']:.2f} | {pt['auto_over_best']:.2f} |"
        )
    lines += ["", "Fit `t = a + b·segments + c·rows`:", "", "| executor | a (s) | b (ms/segment) | c (µs/row) |",
              "| --- | ---: | ---: | ---: |"]
    for e, (a, b, c) in res["fit"].items():
        lines.append(f"| {e} | {a:.3f} | {1e3 * b:.2f} | {1e6 * c:.4f} |")
    thr = res["threshold_rows"]
    lines += [
        "",
        "Process pool predicted to pay (by the margin in `_costmodel.MARGIN`) from "
        + (f"about {thr:,} rows." if thr else "no size up to 10^10 rows: `auto` stays in process."),
        f"Worst `auto` / best of the two over the points: {res['auto_over_best_worst']:.2f}.",
        "",
        "Constants for `python/lance_segmerge/_costmodel.py`:",
        "",
        "```python",
        "LOCAL = Cost(a={:.3g}, b={:.3g}, c={:.3g}, workers={})".format(*res["fit"]["local"], res["workers"]),
        "PROCESSES = Cost(a={:.3g}, b={:.3g}, c={:.3g}, workers={})".format(*res["fit"]["processes"], res["workers"]),
        "```",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
