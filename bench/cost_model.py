#!/usr/bin/env python3
"""Cost model: optimize time against the number of deltas and against rows.

Builds delta datasets with pylance (a base segment, then one delta segment
per append, ``optimize_indices(num_indices_to_merge=0)``), on two sweeps:

* deltas: the number of delta segments varies, the rows stay fixed;
* rows: the rows vary, the number of deltas stays fixed;
* partitions: the IVF partitions vary, rows and deltas stay fixed (each
  segment carries its partitions' centroids and offsets, so a segment's
  cost grows with them).

On each dataset it times, in fresh processes, lance-segmerge's ``optimize``
on one worker (in process: the per-segment and per-row costs without pool
start-up) and on N worker processes, and pylance's ``optimize_indices``
merging every segment. It fits ``t = a + (b + d * partitions) * deltas +
c * rows`` to each contender, one slope per sweep, and extrapolates to a
target scale (default 1B rows, 1000 deltas, 4096 partitions) on clusters
of N workers, using the tree that ``optimize`` runs (levels of at most
``fan_in`` segments per task).

    python bench/cost_model.py                    # IVF_RQ, about 20 minutes on 2 cores
    python bench/cost_model.py --quick            # a smaller sweep, a few minutes
    python bench/cost_model.py --type IVF_PQ
    python bench/cost_model.py --build [--quick] [--type IVF_PQ]   # the build path (cost_build.py)

The report (markdown and JSON) goes to bench/results/cost-<type>-<date>.*
(``cost-build-<type>-<date>.*`` for ``--build``).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_merge as bm

HERE = Path(__file__).resolve().parent


def build(root: Path, t: str, rows: int, deltas: int, delta_rows: int, dim: int, partitions: int) -> str:
    """A base segment over ``rows - deltas * delta_rows`` rows, then
    ``deltas`` appends, each indexed as its own delta segment."""
    import lance

    uri = str(root / f"{t}-r{rows}-d{deltas}-p{partitions}")
    if Path(uri).exists():
        return uri
    base = rows - deltas * delta_rows
    if base <= partitions * 40:
        raise SystemExit(f"rows={rows} leave too few base rows for {deltas} deltas of {delta_rows}")
    p = bm.Preset(rows=rows, fragments=1, group=1, base_rows=base, deltas=deltas, delta_rows=delta_rows, dim=dim,
                  partitions=partitions, repeats=1, types=[t])
    ds = lance.write_dataset(bm.table(bm.vectors(base, dim, seed=1000), 0), uri)
    ds.create_index("vec", t, name="vec_idx", **bm.index_params(t, p))
    start = base
    for i in range(deltas):
        ds = lance.write_dataset(bm.table(bm.vectors(delta_rows, dim, seed=2000 + i), start), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
        start += delta_rows
    return uri


def ours_local(uri: str, fan_in: int = 32) -> dict[str, Any]:
    setup = "import lance_segmerge as ls"
    work = f"ls.optimize({uri!r}, 'vec_idx', executor='local', fan_in={fan_in}, progress=False)"
    return bm.run_child(setup, work)


# fan_in for the one-level contender: every delta in one task, so a delta's
# rows are rewritten once (with the default fan_in of 32, more than 32
# deltas take two levels: their rows are rewritten twice).
ONE_LEVEL_FAN_IN = 4096


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys against xs (0 with fewer than two points)."""
    if len(xs) < 2:
        return 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


Point = tuple[int, int, int, float]  # deltas, rows, partitions, seconds


def fit(points: list[Point], fixed_rows: int, fixed_deltas: int, fixed_partitions: int,
        partition_deltas: int) -> tuple[float, float, float, float]:
    """Fit t = a + (b + d*partitions)*deltas + c*rows the way the sweeps
    were designed: c is the slope over the rows sweep (deltas and
    partitions fixed), b + d*fixed_partitions the slope over the deltas
    sweep, d*partition_deltas the slope over the partitions sweep (made at
    partition_deltas deltas), all at least 0 (a cost is never negative),
    and a the mean of what is left. One slow outlier moves one slope, not
    all, as it would in a joint fit. Without a partitions sweep d is 0 and
    b is the per-delta cost at the fixed partitions."""
    rs = [(r, t) for d, r, p, t in points if d == fixed_deltas and p == fixed_partitions]
    ds = [(d, t) for d, r, p, t in points if r == fixed_rows and p == fixed_partitions]
    ps = [(p, t) for d, r, p, t in points if r == fixed_rows and d == partition_deltas]
    c = max(0.0, slope([float(r) for r, _ in rs], [t for _, t in rs]))
    per_delta = max(0.0, slope([float(d) for d, _ in ds], [t for _, t in ds]))
    dp = max(0.0, slope([float(p) for p, _ in ps], [t for _, t in ps]) / max(1, partition_deltas))
    dp = min(dp, per_delta / fixed_partitions)  # b stays >= 0
    b = per_delta - dp * fixed_partitions
    a = max(0.0, sum(t - (b + dp * p) * d - c * r for d, r, p, t in points) / len(points))
    return a, b, c, dp


def tree_time(model: tuple[float, float, float, float], deltas: int, rows: int, workers: int, fan_in: int,
              target_segments: int, partitions: int = 0) -> tuple[float, int]:
    """Wall time of optimize's tree on ``workers`` workers: each level's
    work (b per input segment, c per row) is spread over min(workers,
    tasks) workers; levels continue until at most target_segments are
    left. Every level is charged for every row: an upper bound, since
    run_plan lets a segment larger than an average task (the base) skip
    the levels before the last. Returns (seconds, levels)."""
    a, b0, c, dp = model
    b = b0 + dp * partitions
    segs = deltas + 1
    total = a
    levels = 0
    while True:
        if levels == 0:
            tasks = max(1, math.ceil(segs / fan_in))
        else:  # as run_plan picks the next level
            n_tasks = max(target_segments, math.ceil(segs / fan_in))
            tasks = math.ceil(segs / max(2, math.ceil(segs / n_tasks)))
        total += (b * segs + c * rows) / min(workers, tasks)
        levels += 1
        segs = tasks
        if segs <= target_segments or segs == 1:
            return total, levels


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--type", default="IVF_RQ", help="index type (default IVF_RQ)")
    ap.add_argument("--quick", action="store_true", help="a smaller sweep (minutes)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-prefault", action="store_true", help="see bench_merge.prefault_memory")
    ap.add_argument("--target-rows", type=float, default=1e9)
    ap.add_argument("--target-deltas", type=int, default=1000)
    ap.add_argument("--target-partitions", type=int, default=4096)
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--work", help="scratch directory (kept, and reused, when given)")
    ap.add_argument("--from-json", help="re-analyse the measurements of an earlier report instead of measuring")
    ap.add_argument("--build", action="store_true", help="the build path's cost model instead (cost_build.py; IVF_PQ unless --type)")
    args = ap.parse_args(argv)
    args.build_type_given = any(a == "--type" or a.startswith("--type=") for a in (argv if argv is not None else sys.argv[1:]))
    if args.build:
        return build_cost_model(args)
    if args.from_json:
        report = json.loads(Path(args.from_json).read_text())
        analyse(report, int(args.target_rows), args.target_deltas, args.target_partitions)
        write_report(report, Path(args.from_json).with_suffix(""))
        return 0
    t = args.type
    dim, partitions, delta_rows = 128, 128, 1000
    if args.quick:
        row_sweep, delta_sweep, fixed_rows, fixed_deltas = [100_000, 200_000, 400_000], [10, 40, 80], 200_000, 40
        part_sweep, partition_deltas = [128, 512, 1024], 40
    else:
        # Few deltas in the rows sweep: pylance's per-delta cost (~80 ms) would
        # otherwise drown its per-row cost in run-to-run noise. The
        # partitions sweep at 50 deltas: its per-segment slope shows.
        row_sweep, delta_sweep, fixed_rows, fixed_deltas = [500_000, 1_000_000, 2_000_000, 4_000_000], [10, 50, 100, 200], 500_000, 10
        part_sweep, partition_deltas = [128, 512, 2048], 50
    configs = sorted({(fixed_rows, d, partitions) for d in delta_sweep} | {(r, fixed_deltas, partitions) for r in row_sweep}
                     | {(fixed_rows, partition_deltas, p) for p in part_sweep})
    work = Path(args.work or tempfile.mkdtemp(prefix="segmerge-cost-"))
    work.mkdir(parents=True, exist_ok=True)
    if not args.no_prefault:
        bm.prefault_memory()

    keys = ["ours_1", "ours_1_one_level", f"ours_{args.workers}", "pylance"]
    rows_out = []
    for rows, deltas, parts in configs:
        t0 = time.perf_counter()
        src = build(work, t, rows, deltas, delta_rows, dim, parts)
        print(f"[{t}] rows={rows} deltas={deltas} partitions={parts}: built in {time.perf_counter() - t0:.0f}s", flush=True)
        m: dict[str, list[float]] = {k: [] for k in keys}
        for r in range(args.repeats):
            order = ["ours", "pylance"] if r % 2 == 0 else ["pylance", "ours"]
            for who in order:
                u = bm.copy_dataset(src, str(work / f"run-{who}"))
                if who == "ours":
                    m["ours_1"].append(ours_local(u)["seconds"])
                    u = bm.copy_dataset(src, str(work / f"run-{who}"))
                    m["ours_1_one_level"].append(ours_local(u, ONE_LEVEL_FAN_IN)["seconds"])
                    u = bm.copy_dataset(src, str(work / f"run-{who}"))
                    m[f"ours_{args.workers}"].append(bm.ours_optimize(u, args.workers)["seconds"])
                else:
                    m["pylance"].append(bm.pylance_optimize(u, deltas + 1)["seconds"])
        med = {k: bm.median(v) for k, v in m.items()}
        rows_out.append({"rows": rows, "deltas": deltas, "partitions": parts, **med})
        print(f"    {med}", flush=True)

    report = {"type": t, "machine": bm.machine(), "dim": dim, "partitions": partitions, "delta_rows": delta_rows,
              "repeats": args.repeats, "workers": args.workers, "fixed_rows": fixed_rows, "fixed_deltas": fixed_deltas,
              "partition_deltas": partition_deltas, "measurements": rows_out}
    analyse(report, int(args.target_rows), args.target_deltas, args.target_partitions)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    write_report(report, Path(args.out) / f"cost-{t}-{stamp}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def build_cost_model(args: Any) -> int:
    import cost_build as cb

    if args.from_json:
        res = json.loads(Path(args.from_json).read_text())
        cb.analyse(res, args.target_rows)
        base = Path(args.from_json).with_suffix("")
    else:
        work = Path(args.work or tempfile.mkdtemp(prefix="segmerge-cost-build-"))
        work.mkdir(parents=True, exist_ok=True)
        if not args.no_prefault:
            bm.prefault_memory()
        res = cb.run(args, Path(args.out), work)
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
        base = Path(args.out) / f"cost-build-{res['type']}-{time.strftime('%Y%m%d-%H%M%S')}"
    base.parent.mkdir(parents=True, exist_ok=True)
    base.with_suffix(".json").write_text(json.dumps(res, indent=2))
    md = cb.markdown(res)
    base.with_suffix(".md").write_text(md)
    print(md)
    print(f"report: {base}.md / .json")
    return 0


def analyse(report: dict[str, Any], R: int, D: int, P: int = 4096) -> None:
    """Fit the models to report["measurements"] and extrapolate to R rows,
    D deltas and P partitions (fills report["models"] and
    report["extrapolation"]). Reports from before the partitions sweep
    fit d = 0."""
    P0 = report["partitions"]
    points: dict[str, list[Point]] = {}
    for m in report["measurements"]:
        for k, v in m.items():
            if k not in ("rows", "deltas", "partitions"):
                points.setdefault(k, []).append((m["deltas"], m["rows"], m.get("partitions", P0), v))
    pd = report.get("partition_deltas", -1)
    models = {k: fit(v, report["fixed_rows"], report["fixed_deltas"], P0, pd) for k, v in points.items()}
    report["models"] = {k: {"a_s": a, "b_s_per_segment": b, "c_s_per_row": c, "d_s_per_segment_partition": dp,
                            "per_segment_at_fixed_partitions_s": b + dp * P0}
                        for k, (a, b, c, dp) in models.items()}
    pa, pb, pc, pdp = models["pylance"]
    pylance_t = pa + (pb + pdp * P) * D + pc * R
    ex = []
    fans = (4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
    for n in (1, 8, 32, 128):
        # The best fan_in for each goal (what a user would pass).
        one, lv1, f1 = min(tree_time(models["ours_1"], D, R, n, f, 1, P) + (f,) for f in fans)
        many, lvn, fn = min(tree_time(models["ours_1"], D, R, n, f, n, P) + (f,) for f in fans)
        ex.append({"workers": n, "to_1_segment_s": one, "levels_1": lv1, "fan_in_1": f1, "to_n_segments_s": many,
                   "levels_n": lvn, "fan_in_n": fn})
    report["extrapolation"] = {"rows": R, "deltas": D, "partitions": P, "pylance_s": pylance_t, "ours": ex}


def write_report(report: dict[str, Any], base: Path) -> None:
    base.parent.mkdir(parents=True, exist_ok=True)
    base.with_suffix(".json").write_text(json.dumps(report, indent=2))
    md = markdown(report, report["workers"])
    base.with_suffix(".md").write_text(md)
    print(md)
    print(f"report: {base}.md / .json")


def hms(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def markdown(rep: dict[str, Any], workers: int) -> str:
    m = rep["machine"]
    lines = [f"# Cost model: optimize over delta segments, {rep['type']} (pylance {m['pylance']})", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB. {rep['dim']}-d, {rep['partitions']} partitions, "
             f"deltas of {rep['delta_rows']} rows; medians of {rep['repeats']} runs, each in a fresh process.", "",
             f"| rows | deltas | partitions | ours, 1 worker (s) | ours, 1 worker, one level (s) | ours, {workers} processes (s) "
             "| pylance optimize_indices (s) |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rep["measurements"]:
        one = r.get("ours_1_one_level")  # reports before it have none
        lines.append(f"| {r['rows']} | {r['deltas']} | {r.get('partitions', rep['partitions'])} | {r['ours_1']:.2f} | "
                     f"{'-' if one is None else f'{one:.2f}'} | {r[f'ours_{workers}']:.2f} | {r['pylance']:.2f} |")
    lines += ["", "Fit `t = a + (b + d·partitions)·deltas + c·rows` (c: slope over the rows sweep at "
              f"{rep['fixed_deltas']} deltas; b + d·{rep['partitions']}: slope over the deltas sweep at {rep['fixed_rows']} rows; "
              f"d: slope over the partitions sweep at {rep.get('partition_deltas', '-')} deltas, per delta):", "",
              f"| contender | a (s) | b (ms per segment) | d (µs per segment and partition) | per segment at {rep['partitions']} partitions (ms) "
              "| c (µs per row) | rows/s at scale |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for k, v in rep["models"].items():
        c = v["c_s_per_row"]
        dp = v.get("d_s_per_segment_partition", 0.0)
        lines.append(f"| {k} | {v['a_s']:.2f} | {v['b_s_per_segment'] * 1e3:.2f} | {dp * 1e6:.2f} | "
                     f"{(v['b_s_per_segment'] + dp * rep['partitions']) * 1e3:.2f} | {c * 1e6:.3f} | "
                     f"{(1 / c if c else float('inf')):.0f} |")
    for k, v in rep["models"].items():
        if v["c_s_per_row"] == 0:
            lines += ["", f"For {k} the sweep shows no per-row cost above the noise: its extrapolation below is a "
                      "lower bound (it ignores reading and writing the rows)."]
    e = rep["extrapolation"]
    lines += ["", f"Extrapolated to {e['rows']:.0e} rows, {e['deltas']} deltas and {e.get('partitions', rep['partitions'])} "
              "partitions. pylance `optimize_indices` "
              f"(one process): **{hms(e['pylance_s'])}**.", "",
              "| workers N | ours → 1 segment | fan_in, levels | ours → N segments (`target_segments=N`) | fan_in, levels |",
              "| ---: | ---: | ---: | ---: | ---: |"]
    for x in e["ours"]:
        lines.append(f"| {x['workers']} | {hms(x['to_1_segment_s'])} | {x['fan_in_1']}, {x['levels_1']} | "
                     f"{hms(x['to_n_segments_s'])} | {x['fan_in_n']}, {x['levels_n']} |")
    if "ours_1_one_level" in rep["models"]:
        lines += ["", f"ours_1 is `optimize(executor='local')` with the default fan_in of 32: above 32 deltas the "
                  "deltas merge in two levels and their rows are written twice. ours_1_one_level is the same with "
                  f"fan_in={ONE_LEVEL_FAN_IN}, one task over every segment: the difference between their b is what the "
                  "second level costs per delta."]
    lines += ["", "The model assumes each worker keeps its single-worker throughput (its own cores and its own "
              "share of storage bandwidth) and ignores the commit, which is one manifest write. Merging to one "
              "segment ends with a level that rewrites every row on one worker, so it cannot drop below c·rows; "
              "`target_segments=N` keeps every level parallel.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
