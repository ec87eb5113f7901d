#!/usr/bin/env python3
"""Benchmark IVF_HNSW_* merges against pylance's optimize_indices, on the
same delta segments, in one run.

Builds a delta dataset per index type with pylance (a base segment, then
one delta segment per append: optimize_indices(num_indices_to_merge=0)),
then merges every segment into one, alternating the contenders on every
repeat, each run in a fresh process:

* ``pylance_optimize``: pylance's optimize_indices merging every segment
  (it rebuilds every partition's graph, on all cores);
* ``ours_reuse``: lance-segmerge's merge_existing_index_segments on one
  worker, reusing the largest input's graph of every partition and
  inserting the other rows (the default);
* ``ours_rebuild``: the same, building every graph from nothing;
* ``ours_reuse_small_window``: the reuse merge with a window of an eighth
  of the default, for peak RSS against window size.

After each contender's last run, its result is committed and queried with
pylance: recall@10 against numpy brute force at two ``ef`` settings. The
report (markdown and JSON) goes to bench/results/hnsw-<preset>-<date>.

    python bench/bench_hnsw.py --preset smoke     # seconds
    python bench/bench_hnsw.py --preset small     # minutes
    python bench/bench_hnsw.py --preset medium    # IVF_HNSW_SQ, 200k x 128, 50 deltas
    python bench/bench_hnsw.py --preset large     # IVF_HNSW_SQ, 1M x 128, 50 deltas (an hour or more on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("LANCE_LOG", "error")
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
try:
    import lance_segmerge  # noqa: F401  (installed)
except ImportError:
    sys.path.insert(0, str(REPO / "python"))  # the source tree, after `make build`

from bench_merge import copy_dataset, machine, median, prefault_memory, run_child, table, vectors  # noqa: E402


@dataclass
class Preset:
    base_rows: int
    deltas: int
    delta_rows: int
    dim: int
    partitions: int
    nprobes: int
    repeats: int
    queries: int = 100
    efs: tuple[int, int] = (20, 80)
    types: list[str] = field(default_factory=lambda: ["IVF_HNSW_FLAT", "IVF_HNSW_SQ", "IVF_HNSW_PQ"])


PRESETS = {
    "smoke": Preset(base_rows=6_000, deltas=4, delta_rows=500, dim=32, partitions=4, nprobes=2, repeats=1,
                    queries=50, types=["IVF_HNSW_SQ"]),
    "small": Preset(base_rows=50_000, deltas=10, delta_rows=2_500, dim=64, partitions=16, nprobes=4, repeats=3),
    "medium": Preset(base_rows=100_000, deltas=50, delta_rows=2_000, dim=128, partitions=32, nprobes=8, repeats=3,
                     types=["IVF_HNSW_SQ"]),
    "large": Preset(base_rows=500_000, deltas=50, delta_rows=10_000, dim=128, partitions=128, nprobes=16, repeats=3,
                    types=["IVF_HNSW_SQ"]),
}

K = 10
DEFAULT_WINDOW = 1 << 17


def index_params(t: str, p: Preset) -> dict[str, Any]:
    kw: dict[str, Any] = {"num_partitions": p.partitions}
    if "PQ" in t:
        kw["num_sub_vectors"] = p.dim // 4  # 4 dimensions per sub-vector
    return kw


def query_params(t: str) -> dict[str, Any]:
    # PQ distances alone rank the neighbours coarsely: rerank twice k
    # candidates with exact distances, so that recall shows the graph.
    return {"refine_factor": 2} if "PQ" in t else {}


def build_deltas(root: Path, t: str, p: Preset) -> dict[str, Any]:
    import lance

    uri = str(root / f"deltas-{t}")
    ds = lance.write_dataset(table(vectors(p.base_rows, p.dim, seed=1000), 0), uri)
    ds.create_index("vec", t, name="vec_idx", **index_params(t, p))
    start = p.base_rows
    for i in range(p.deltas):
        ds = lance.write_dataset(table(vectors(p.delta_rows, p.dim, seed=2000 + i), start), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
        start += p.delta_rows
    return {"uri": uri, "rows": start, "segments": p.deltas + 1}


def all_vectors(p: Preset):
    import numpy as np

    parts = [vectors(p.base_rows, p.dim, seed=1000)] + [vectors(p.delta_rows, p.dim, seed=2000 + i) for i in range(p.deltas)]
    return np.concatenate(parts)


# -- contenders (each in a fresh process) ----------------------------------------------


def pylance_optimize(uri: str, segments: int) -> dict[str, Any]:
    setup = f"import lance; ds = lance.dataset({uri!r})"
    work = f"ds.optimize.optimize_indices(num_indices_to_merge={segments})"
    return run_child(setup, work)


def ours_merge(uri: str, mode: str, window: int, commit: bool, graph_json: str) -> dict[str, Any]:
    setup = f"""
        import lance_segmerge as ls
        ds = ls.open({uri!r})
        segs = ds.list_index_segments("vec_idx")
        final = []
    """
    work = f"""
        out = ds.merge_existing_index_segments(segs, hnsw_graph={mode!r}, window_rows={window}, parallelism=2,
                                               progress=final.append)
    """
    after = f"""
        import json as _json
        with open({graph_json!r}, "w") as _f:
            _json.dump({{"inserted": final[-1].graph_rows_inserted, "reused": final[-1].graph_rows_reused,
                        "distances": final[-1].graph_distances}}, _f)
        if {commit}:
            ds.commit_existing_index_segments("vec_idx", "vec", [out], replaces=segs)
        else:
            from lance_segmerge.api import remove_uncommitted
            remove_uncommitted(ds, [out.uuid])
    """
    res = run_child(setup, work, after)
    with open(graph_json) as f:
        res["graph"] = json.load(f)
    return res


def recall(uri: str, x, qs, p: Preset, t: str) -> dict[int, float]:
    import lance
    import numpy as np

    ds = lance.dataset(uri)
    assert len(ds.describe_indices()[0].segments) == 1
    truth = [set(np.argsort(((x - q) ** 2).sum(1))[:K].tolist()) for q in qs]
    out = {}
    for ef in p.efs:
        hits = 0
        for q, tr in zip(qs, truth):
            got = ds.to_table(nearest={"column": "vec", "q": q, "k": K, "nprobes": p.nprobes, "ef": ef, **query_params(t)},
                              columns=["id", "_distance"])
            hits += len(tr & set(got["id"].to_pylist()))
        out[ef] = hits / (K * len(qs))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small", choices=sorted(PRESETS))
    ap.add_argument("--types", help="comma-separated index types (default: the preset's)")
    ap.add_argument("--repeats", type=int, help="override the preset's repeats")
    ap.add_argument("--out", default=str(HERE / "results"), help="report directory")
    ap.add_argument("--work", help="scratch directory (default: a temporary one; kept when given)")
    ap.add_argument("--no-prefault", action="store_true", help="do not touch free memory first")
    args = ap.parse_args(argv)
    p = PRESETS[args.preset]
    if args.preset != "smoke" and not args.no_prefault:
        prefault_memory()
    types = args.types.split(",") if args.types else p.types
    repeats = args.repeats or p.repeats
    work = Path(args.work or tempfile.mkdtemp(prefix="segmerge-hnsw-"))
    work.mkdir(parents=True, exist_ok=True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    x = all_vectors(p)
    qs = vectors(p.queries, p.dim, seed=777)

    results: dict[str, Any] = {"preset": args.preset, "config": asdict(p), "repeats": repeats, "machine": machine(), "types": {}}
    names = ["pylance_optimize", "ours_reuse", "ours_rebuild", "ours_reuse_small_window"]
    for t in types:
        built = work / f"deltas-{t}"
        print(f"[{t}] building the delta dataset …", flush=True)
        t0 = time.perf_counter()
        dlt = build_deltas(work, t, p) if not built.exists() else {"uri": str(built), "rows": len(x), "segments": p.deltas + 1}
        print(f"[{t}] built in {time.perf_counter() - t0:.0f}s", flush=True)
        runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        graph: dict[str, dict[str, int]] = {}
        quality: dict[str, dict[int, float]] = {}
        for r in range(repeats):
            last = r == repeats - 1
            order = names if r % 2 == 0 else names[::-1]
            for name in order:
                u = copy_dataset(dlt["uri"], str(work / f"run-{name}"))
                if name == "pylance_optimize":
                    res = pylance_optimize(u, dlt["segments"])
                else:
                    mode = "rebuild" if name == "ours_rebuild" else "reuse"
                    window = DEFAULT_WINDOW // 8 if name == "ours_reuse_small_window" else DEFAULT_WINDOW
                    res = ours_merge(u, mode, window, commit=last, graph_json=str(work / "graph.json"))
                    graph[name] = res.pop("graph")
                runs[name].append(res)
                if last and name != "ours_reuse_small_window":
                    quality[name] = recall(u, x, qs, p, t)
                shutil.rmtree(u, ignore_errors=True)
            print(f"[{t}] repeat {r + 1}/{repeats} done", flush=True)
        summary = {}
        for name, rs in runs.items():
            secs = median([v["seconds"] for v in rs])
            g = graph.get(name)
            summary[name] = {
                "seconds": secs,
                "peak_rss_mib": max(max(v["rss_self"], v["rss_children"]) for v in rs) / 2**20,
                "recall": quality.get(name),
                "rows_inserted": g["inserted"] if g else None,
                "rows_reused": g["reused"] if g else None,
                "distances_per_inserted_row": (g["distances"] / max(g["inserted"], 1)) if g else None,
                "runs": rs,
            }
        results["types"][t] = {"rows": dlt["rows"], "segments": dlt["segments"], "summary": summary}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = out_dir / f"hnsw-{args.preset}-{stamp}"
    base.with_suffix(".json").write_text(json.dumps(results, indent=2))
    md = report_markdown(results)
    base.with_suffix(".md").write_text(md)
    print(md)
    print(f"report: {base}.md / .json")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def report_markdown(res: dict[str, Any]) -> str:
    m, c = res["machine"], res["config"]
    efs = c["efs"]
    lines = [f"# IVF_HNSW_* merges: lance-segmerge vs pylance {m['pylance']} `optimize_indices` — preset `{res['preset']}`", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['platform']}, Python {m['python']}.",
             f"Medians of {res['repeats']} repeats, every run in a fresh process; ours on one worker "
             f"(graphs of 2 partitions at a time), pylance on every core. Config: {c}.",
             f"Recall@{K} against numpy brute force over {c['queries']} queries, nprobes {c['nprobes']} "
             "(IVF_HNSW_PQ: refine_factor 2, so that the graph, not the PQ distance, is measured).", ""]
    for t, d in res["types"].items():
        s = d["summary"]
        py = s["pylance_optimize"]
        lines += [f"## {t}", "", f"{d['segments']} segments (a base and its deltas), {d['rows']} rows, merged into one.", "",
                  f"| run | wall s | / pylance | recall@{K} ef={efs[0]} | ef={efs[1]} | rows inserted | rows reused "
                  "| distances per inserted row | peak RSS MiB |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for name, v in s.items():
            rec = v["recall"] or {}
            r0 = rec.get(efs[0], rec.get(str(efs[0])))
            r1 = rec.get(efs[1], rec.get(str(efs[1])))
            fmt = lambda x, f: "-" if x is None else format(x, f)  # noqa: E731
            lines.append(f"| {name} | {v['seconds']:.2f} | {v['seconds'] / py['seconds']:.2f} | {fmt(r0, '.3f')} | {fmt(r1, '.3f')} "
                         f"| {fmt(v['rows_inserted'], 'd')} | {fmt(v['rows_reused'], 'd')} "
                         f"| {fmt(v['distances_per_inserted_row'], '.0f')} | {v['peak_rss_mib']:.0f} |")
        reuse = s["ours_reuse"]
        pr = py["recall"] or {}
        ur = reuse["recall"] or {}
        gap = min(ur[e] - pr[e] for e in pr) if pr and ur else float("nan")
        lines += ["", "| target | value | |", "| --- | ---: | --- |",
                  f"| single-worker merge time (reuse) / pylance optimize_indices | {reuse['seconds'] / py['seconds']:.2f} | <= 0.7 (IVF_HNSW_SQ, large preset) |",
                  f"| recall@{K} of ours (reuse) minus pylance's, the lower of the two ef | {gap:+.3f} | >= -0.01 |",
                  f"| rebuild / reuse, time | {s['ours_rebuild']['seconds'] / reuse['seconds']:.2f} | |",
                  f"| peak RSS, default window / window of 1/8 | {reuse['peak_rss_mib']:.0f} / {s['ours_reuse_small_window']['peak_rss_mib']:.0f} MiB | |",
                  ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
