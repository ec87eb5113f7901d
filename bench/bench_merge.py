#!/usr/bin/env python3
"""Benchmark lance-segmerge against pylance on the same data, in one run.

Builds datasets deterministically with pylance, then measures, alternating
between the contenders on every repeat:

* merge of the same groups of row-major segments (create_index_uncommitted
  with a shared model): lance-segmerge with 1 worker and with N worker
  processes, and pylance's merge_existing_index_segments;
* optimize over many delta segments (optimize_indices(num_indices_to_merge=0)
  after each append): lance-segmerge's optimize on N processes, and
  pylance's optimize_indices merging every delta;
* the physical floor: the same input bytes read and written with a plain
  file copy.

Every measurement runs in a fresh subprocess, so that its peak RSS (and its
pool workers') is its own. Results are medians over the repeats; the report
(markdown, JSON and a PNG plot) goes to bench/results/.

    python bench/bench_merge.py --preset smoke      # seconds, what CI runs
    python bench/bench_merge.py --preset small      # minutes
    python bench/bench_merge.py                     # default: 2M rows x 128-d, ~200 deltas
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
try:
    import lance_segmerge  # noqa: F401  (installed)
except ImportError:
    sys.path.insert(0, str(REPO / "python"))  # the source tree, after `make build`


@dataclass
class Preset:
    rows: int  # rows of the row-major segment dataset
    fragments: int  # one segment per fragment
    group: int  # segments per merge task
    base_rows: int  # delta dataset: base, then `deltas` appends of `delta_rows`
    deltas: int
    delta_rows: int
    dim: int
    partitions: int
    repeats: int
    types: list[str] = field(default_factory=lambda: ["IVF_PQ", "IVF_RQ", "IVF_SQ"])


PRESETS = {
    "smoke": Preset(rows=20_000, fragments=8, group=4, base_rows=10_000, deltas=16, delta_rows=500, dim=32,
                    partitions=8, repeats=1, types=["IVF_PQ"]),
    "small": Preset(rows=200_000, fragments=32, group=8, base_rows=100_000, deltas=64, delta_rows=1_500, dim=128,
                    partitions=64, repeats=3),
    "medium": Preset(rows=1_000_000, fragments=32, group=8, base_rows=500_000, deltas=100, delta_rows=5_000, dim=128,
                     partitions=128, repeats=5),
    "default": Preset(rows=2_000_000, fragments=64, group=8, base_rows=1_000_000, deltas=200, delta_rows=5_000,
                      dim=128, partitions=256, repeats=5),
}


# -- dataset construction (pylance) ---------------------------------------------------


def vectors(n: int, dim: int, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    centers = np.random.default_rng(99).standard_normal((64, dim)).astype(np.float32) * 3
    return (centers[rng.integers(0, 64, n)] + rng.standard_normal((n, dim)).astype(np.float32)).astype(np.float32)


def table(x, start: int):
    import numpy as np
    import pyarrow as pa

    return pa.table({"id": pa.array(np.arange(start, start + len(x)), pa.int64()),
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), x.shape[1])})


def index_params(t: str, p: Preset) -> dict[str, Any]:
    kw: dict[str, Any] = {"num_partitions": p.partitions}
    if "PQ" in t:
        kw["num_sub_vectors"] = p.dim // 8
    return kw


def build_segments(root: Path, t: str, p: Preset) -> dict[str, Any]:
    """Row-major segments, one per fragment, sharing one model."""
    import lance
    from lance.indices import IndicesBuilder

    uri = str(root / f"segments-{t}")
    per = p.rows // p.fragments
    ds = None
    for f in range(p.fragments):
        x = vectors(per, p.dim, seed=f)
        ds = lance.write_dataset(table(x, f * per), uri, mode="append" if f else "create", max_rows_per_file=per)
    assert ds is not None
    ib = IndicesBuilder(ds, "vec")
    ivf = ib.train_ivf(p.partitions, sample_rate=16)
    kw: dict[str, Any] = {"num_partitions": p.partitions, "ivf_centroids": ivf.centroids}
    if t == "IVF_PQ":
        kw["num_sub_vectors"] = p.dim // 8
        kw["pq_codebook"] = ib.train_pq(ivf, p.dim // 8, sample_rate=8).codebook
    if t == "IVF_RQ":
        from lance.lance import indices as native_indices

        kw["rabitq_model"] = native_indices.build_rq_model(p.dim)
    segs = [ds.create_index_uncommitted("vec", t, name="vec_idx", fragment_ids=[f], **kw) for f in range(p.fragments)]
    groups = [[s.uuid for s in segs[i : i + p.group]] for i in range(0, len(segs), p.group)]
    # Keep the Index objects (pickled) for pylance's own merge.
    import pickle

    import lance_segmerge as ls

    # pylance's Index objects for its own merge, our IndexSegments (plain
    # JSON, so that our side never imports pylance) for ours.
    (root / f"segments-{t}.pkl").write_bytes(pickle.dumps(segs))
    (root / f"segments-{t}.json").write_text(json.dumps([ls.IndexSegment.from_lance_index(s).to_dict() for s in segs]))
    return {"uri": uri, "groups": groups, "rows": p.rows}


def build_deltas(root: Path, t: str, p: Preset) -> dict[str, Any]:
    import lance

    uri = str(root / f"deltas-{t}")
    x = vectors(p.base_rows, p.dim, seed=1000)
    ds = lance.write_dataset(table(x, 0), uri)
    ds.create_index("vec", t, name="vec_idx", **index_params(t, p))
    start = p.base_rows
    for i in range(p.deltas):
        ds = lance.write_dataset(table(vectors(p.delta_rows, p.dim, seed=2000 + i), start), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
        start += p.delta_rows
    return {"uri": uri, "rows": start, "segments": p.deltas + 1}


def dir_bytes(paths: list[str]) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d in paths for f in os.listdir(d))


# -- measurement in a fresh process ---------------------------------------------------

CHILD = textwrap.dedent(
    r"""
    import json, os, resource, sys, time
    job = json.loads(sys.argv[1])
    exec(job["setup"])
    t0 = time.perf_counter()
    exec(job["work"])
    secs = time.perf_counter() - t0
    exec(job.get("after", ""))
    import benchworker
    kids = max(globals().get("worker_rss", [0]) or [0])
    if not kids:
        kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    res = {"seconds": secs, "rss_self": benchworker.peak_rss(), "rss_children": kids}
    res.update(globals().get("extra", {}))  # phase times the work may report
    print("RESULT " + json.dumps(res))
    """
)


def run_child(setup: str, work: str, after: str = "") -> dict[str, Any]:
    # Write back every dirty page first (untimed), so that no run pays for
    # the previous run's output being flushed to the disk.
    os.sync()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "python"), str(HERE)] + sys.path), "LANCE_LOG": "error"}
    job = json.dumps({"setup": textwrap.dedent(setup), "work": textwrap.dedent(work), "after": textwrap.dedent(after)})
    out = subprocess.run([sys.executable, "-c", CHILD, job], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"benchmark child failed:\n{out.stderr[-4000:]}")
    line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def copy_dataset(src: str, dst: str) -> str:
    """A private copy of a dataset for one run. Lance never changes a file
    in place (new files, renames), so data and index files are hard-linked
    and only `_versions/` is copied: a run neither pays for nor leaves behind
    a gigabyte of dirty pages it did not write itself."""
    shutil.rmtree(dst, ignore_errors=True)

    def link_or_copy(a: str, b: str) -> object:
        if os.sep + "_versions" + os.sep in a:
            return shutil.copy2(a, b)
        try:
            os.link(a, b)
            return b
        except OSError:
            return shutil.copy2(a, b)

    shutil.copytree(src, dst, copy_function=link_or_copy)
    return dst


# -- the contenders ---------------------------------------------------------------------


def ours_merge(uri: str, seg_json: str, groups: list[list[str]], workers: int) -> dict[str, Any]:
    setup = f"""
        import lance_segmerge as ls, concurrent.futures as cf, multiprocessing as mp, json
        from lance_segmerge import _jobs
        from lance_segmerge.types import MergeTask
        ds = ls.open({uri!r})
        by = {{d["uuid"]: ls.IndexSegment.from_dict(d) for d in json.load(open({seg_json!r}))}}
        tasks = [[by[u] for u in g] for g in {groups!r}]
        out = []
        pool = None
        if {workers} > 1:
            # A warm pool: what is timed is the merging, not process start-up.
            pool = cf.ProcessPoolExecutor({workers}, mp_context=mp.get_context("spawn"))
            list(pool.map(_jobs.ping, range({workers})))
    """
    if workers == 1:
        work = "out = [ds.merge_existing_index_segments(t) for t in tasks]"
    else:
        work = f"""
            import benchworker
            jobs = [{{"dataset": ds, "task": MergeTask(i, tuple(t)).to_dict()}} for i, t in enumerate(tasks)]
            res = list(pool.map(benchworker.merge_and_measure, jobs))
            out = [ls.IndexSegment.from_dict(r["segment"]) for r in res]
            worker_rss = [r["peak_rss"] for r in res]
        """
    after = """
        if pool is not None:
            pool.shutdown()
        from lance_segmerge.api import remove_uncommitted
        remove_uncommitted(ds, [o.uuid for o in out])
    """
    return run_child(setup, work, after)


def pylance_merge(uri: str, pkl: str, groups: list[list[str]]) -> dict[str, Any]:
    setup = f"""
        import lance, pickle
        ds = lance.dataset({uri!r})
        segs = {{s.uuid: s for s in pickle.load(open({pkl!r}, "rb"))}}
        tasks = [[segs[u] for u in g] for g in {groups!r}]
    """
    work = "out = [ds.merge_existing_index_segments(t) for t in tasks]"
    after = f"""
        import shutil, os
        for o in out:
            shutil.rmtree(os.path.join({uri!r}, "_indices", o.uuid), ignore_errors=True)
    """
    return run_child(setup, work, after)


def copy_floor(uri: str, groups: list[list[str]], scratch: str) -> dict[str, Any]:
    setup = f"""
        import os, shutil
        srcs = [os.path.join({uri!r}, "_indices", u) for g in {groups!r} for u in g]
        dst = {scratch!r}
        shutil.rmtree(dst, ignore_errors=True)
        os.makedirs(dst)
    """
    work = """
        for i, d in enumerate(srcs):
            for f in os.listdir(d):
                out = os.path.join(dst, f"{i}-{f}")
                shutil.copyfile(os.path.join(d, f), out)
    """
    return run_child(setup, work, f"shutil.rmtree({scratch!r}, ignore_errors=True)")


def read_write_floor(uri: str, groups: list[list[str]], scratch: str, fsync: bool = False) -> dict[str, Any]:
    """The same bytes through user space, as a merge moves them: every
    input file read into one reused buffer and appended to one output file
    per task (the in-kernel `copy_floor` never brings them into the
    process); with fsync, each output is then made durable."""
    setup = f"""
        import os, shutil
        groups = [[os.path.join({uri!r}, "_indices", u) for u in g] for g in {groups!r}]
        dst = {scratch!r}
        shutil.rmtree(dst, ignore_errors=True)
        os.makedirs(dst)
        buf = bytearray(8 << 20)
        FSYNC = {fsync!r}
    """
    work = """
        view = memoryview(buf)
        for gi, g in enumerate(groups):
            with open(os.path.join(dst, f"{gi}.out"), "wb", buffering=0) as out:
                for d in g:
                    for f in sorted(os.listdir(d)):
                        with open(os.path.join(d, f), "rb", buffering=0) as src:
                            while n := src.readinto(buf):
                                out.write(view[:n])
                if FSYNC:
                    os.fsync(out.fileno())
    """
    return run_child(setup, work, f"shutil.rmtree({scratch!r}, ignore_errors=True)")


def ours_optimize(uri: str, workers: int) -> dict[str, Any]:
    setup = "import lance_segmerge as ls"
    work = f"ls.optimize({uri!r}, 'vec_idx', executor='processes', max_workers={workers}, fan_in=32, progress=False)"
    return run_child(setup, work)


def pylance_optimize(uri: str, segments: int) -> dict[str, Any]:
    setup = f"import lance; ds = lance.dataset({uri!r})"
    work = f"ds.optimize.optimize_indices(num_indices_to_merge={segments})"
    return run_child(setup, work)


# -- report -----------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    import lance

    mem = 0
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        pass
    cpu = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem / 2**30, 1), "python": platform.python_version(),
            "pylance": lance.__version__, "platform": platform.platform()}


PREFAULT = textwrap.dedent(
    r"""
    import sys
    import numpy as np
    chunks, left = [], int(sys.argv[1])
    while left > 0:
        n = min(left, 256 << 20)
        chunks.append(np.ones(n, dtype=np.uint8))  # written: every page touched
        left -= n
    """
)


def prefault_memory(fraction: float = 0.8) -> None:
    """Touch most of the free memory once, in a child process that then
    exits.

    On a virtual machine whose memory the host backs lazily (Firecracker,
    many cloud VMs), the first touch of every guest page is a host page
    fault: a run that happens to get fresh pages for its page cache or heap
    is several times slower than one that gets reused pages (a 2 GiB file
    write measured 6.6 s, then 1.0 s). Touching the memory up front removes
    that noise from every contender alike.
    """
    try:
        avail = 0
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except OSError:
        return
    size = int(avail * fraction)
    if size <= 0:
        return
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", PREFAULT, str(size)], check=False)
    print(f"prefaulted {size / 2**30:.1f} GiB in {time.perf_counter() - t0:.0f}s", flush=True)


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="default", choices=sorted(PRESETS))
    ap.add_argument("--types", help="comma-separated index types (default: the preset's)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes for the parallel runs")
    ap.add_argument("--repeats", type=int, help="override the preset's repeats")
    ap.add_argument("--out", default=str(HERE / "results"), help="report directory")
    ap.add_argument("--work", help="scratch directory (default: a temporary one)")
    ap.add_argument("--no-prefault", action="store_true",
                    help="do not touch free memory first (see prefault_memory; the smoke preset never does)")
    args = ap.parse_args(argv)
    p = PRESETS[args.preset]
    if args.preset != "smoke" and not args.no_prefault:
        prefault_memory()
    types = args.types.split(",") if args.types else p.types
    repeats = args.repeats or p.repeats
    work = Path(args.work or tempfile.mkdtemp(prefix="segmerge-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    results: dict[str, Any] = {"preset": args.preset, "config": asdict(p), "workers": args.workers, "repeats": repeats,
                               "machine": machine(), "types": {}}
    for t in types:
        print(f"[{t}] building datasets …", flush=True)
        t0 = time.perf_counter()
        seg = build_segments(work, t, p)
        dlt = build_deltas(work, t, p)
        print(f"[{t}] built in {time.perf_counter() - t0:.0f}s", flush=True)
        in_dirs = [os.path.join(seg["uri"], "_indices", u) for g in seg["groups"] for u in g]
        in_bytes = dir_bytes(in_dirs)
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in
                                                  ("ours_merge_1", f"ours_merge_{args.workers}", "pylance_merge", "copy_floor",
                                                   "read_write_floor", f"ours_optimize_{args.workers}", "pylance_optimize")}
        for r in range(repeats):
            # Alternate the order so that neither side always runs warm.
            order = ["ours", "pylance"] if r % 2 == 0 else ["pylance", "ours"]
            for who in order:
                pkl = str(work / f"segments-{t}.pkl")
                sj = str(work / f"segments-{t}.json")
                if who == "ours":
                    # IVF_SQ segments of create_index_uncommitted train their
                    # own bounds: we re-quantize them (the default; pylance
                    # decodes with the first segment's bounds, silently).
                    runs["ours_merge_1"].append(ours_merge(seg["uri"], sj, seg["groups"], 1))
                    runs[f"ours_merge_{args.workers}"].append(ours_merge(seg["uri"], sj, seg["groups"], args.workers))
                    u = copy_dataset(dlt["uri"], str(work / "opt-ours"))
                    runs[f"ours_optimize_{args.workers}"].append(ours_optimize(u, args.workers))
                else:
                    runs["pylance_merge"].append(pylance_merge(seg["uri"], pkl, seg["groups"]))
                    u = copy_dataset(dlt["uri"], str(work / "opt-pylance"))
                    runs["pylance_optimize"].append(pylance_optimize(u, dlt["segments"]))
            runs["copy_floor"].append(copy_floor(seg["uri"], seg["groups"], str(work / "copy")))
            runs["read_write_floor"].append(read_write_floor(seg["uri"], seg["groups"], str(work / "copy")))
            print(f"[{t}] repeat {r + 1}/{repeats} done", flush=True)
        summary = {}
        for name, rs in runs.items():
            secs = median([x["seconds"] for x in rs])
            rows = dlt["rows"] if "optimize" in name else seg["rows"]
            summary[name] = {
                "seconds": secs,
                "rows_per_s": rows / secs,
                "mb_per_s": (in_bytes / secs / 2**20) if "optimize" not in name else None,
                "peak_rss_mib": max(max(x["rss_self"], x["rss_children"]) for x in rs) / 2**20,
                "runs": rs,
            }
        results["types"][t] = {"segments_dataset": {"rows": seg["rows"], "segments": p.fragments, "tasks": len(seg["groups"]),
                                                    "input_bytes": in_bytes},
                               "deltas_dataset": {"rows": dlt["rows"], "segments": dlt["segments"]}, "summary": summary}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = out_dir / f"{args.preset}-{stamp}"
    (base.with_suffix(".json")).write_text(json.dumps(results, indent=2))
    md = report_markdown(results)
    (base.with_suffix(".md")).write_text(md)
    plot(results, base.with_suffix(".png"))
    print(md)
    print(f"report: {base}.md / .json / .png")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def report_markdown(res: dict[str, Any]) -> str:
    w = res["workers"]
    m = res["machine"]
    lines = [f"# lance-segmerge vs pylance {m['pylance']} — preset `{res['preset']}`", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['platform']}, Python {m['python']}.",
             f"Medians of {res['repeats']} repeats; every run in a fresh process. Config: {res['config']}.", ""]
    for t, d in res["types"].items():
        s = d["summary"]
        sd, dd = d["segments_dataset"], d["deltas_dataset"]
        lines += [f"## {t}", "",
                  f"Merge: {sd['segments']} row-major segments, {sd['rows']} rows, {sd['input_bytes'] / 2**20:.1f} MiB, "
                  f"in {sd['tasks']} tasks. Optimize: {dd['segments']} segments (base + deltas), {dd['rows']} rows.", "",
                  "| run | wall s | rows/s | MB/s | peak RSS MiB |", "| --- | ---: | ---: | ---: | ---: |"]
        for name, v in s.items():
            mbs = f"{v['mb_per_s']:.1f}" if v["mb_per_s"] is not None else "-"
            lines.append(f"| {name} | {v['seconds']:.3f} | {v['rows_per_s']:.0f} | {mbs} | {v['peak_rss_mib']:.0f} |")
        pm, om = s["pylance_merge"]["seconds"], s["pylance_optimize"]["seconds"]
        lines += ["", "| ratio | value | target |", "| --- | ---: | --- |",
                  f"| pylance merge / ours (1 worker), throughput | {pm / s['ours_merge_1']['seconds']:.2f}x | >= 1.5x |",
                  f"| ours optimize ({w} workers) / pylance optimize, time | {s[f'ours_optimize_{w}']['seconds'] / om:.2f} | <= 0.5 |",
                  f"| ours merge (1 worker) / copy floor, time | {s['ours_merge_1']['seconds'] / s['copy_floor']['seconds']:.2f} | <= 1.3 |",
                  f"| ours merge (1 worker) / read-write floor, time | {s['ours_merge_1']['seconds'] / s['read_write_floor']['seconds']:.2f} | |",
                  f"| ours merge ({w} workers) / ours (1 worker), time | {s[f'ours_merge_{w}']['seconds'] / s['ours_merge_1']['seconds']:.2f} | |",
                  f"| peak RSS per worker | {max(v['peak_rss_mib'] for k, v in s.items() if k.startswith('ours')):.0f} MiB | < 1024 MiB |", ""]
    return "\n".join(lines)


def plot(res: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    types = list(res["types"])
    fig, axes = plt.subplots(1, len(types), figsize=(5 * len(types), 4), squeeze=False)
    for ax, t in zip(axes[0], types):
        s = res["types"][t]["summary"]
        names = list(s)
        secs = [s[n]["seconds"] for n in names]
        colors = ["tab:blue" if n.startswith("ours") else "tab:gray" if n.endswith("_floor") else "tab:orange" for n in names]
        ax.barh(names, secs, color=colors)
        ax.set_xlabel("wall seconds (median)")
        ax.set_title(t)
        ax.invert_yaxis()
    fig.suptitle(f"lance-segmerge vs pylance — {res['preset']} ({res['machine']['cores']} cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
