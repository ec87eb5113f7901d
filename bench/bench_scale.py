#!/usr/bin/env python3
"""Merge speed where real indices live: many IVF partitions, a cold page
cache, object-store latency (issue 17).

Against the floor that counts, the user-space read + write of the same
bytes (bench_merge.py's ``read_write_floor``), in the same run:

* ``partitions``: 1M x 128-d IVF_PQ, IVF_RQ and IVF_SQ at 128 and 2048 IVF
  partitions. Two datasets per type and partition count: 32 row-major
  segments (``create_index_uncommitted``, one shared IVF model; IVF_SQ
  segments train their own bounds, so their merge re-quantizes), merged in
  tasks of 8 on one worker; and a base segment with 40 deltas
  (``optimize_indices(num_indices_to_merge=0)``; IVF_SQ deltas share the
  base's bounds), merged in one task, and run through the whole
  ``optimize`` (open, list, plan, merge, commit; in process, one merge).
  Targets: merge / floor <= 1.5 at 128 partitions and <= 2.0 at 2048;
  whole optimize / the merge alone <= 1.2 at 2048.
* ``cold``: a 10M x 128-d IVF_SQ base with 40 deltas (1.4 GB of index),
  every run starting with the dataset's files dropped from the page cache
  (``posix_fadvise(DONTNEED)`` after a ``sync``: no privileges needed; the
  floor's input alike), merge MB/s against a plain sequential read + write
  of the same bytes on the same disk (target >= 0.7), peak RSS < 1 GiB.
* ``s3``: the deltas dataset of ``partitions`` (IVF_SQ, 2048 partitions)
  uploaded to an S3 server (gofakes3 in the benchmark's process, or moto
  with ``--s3-server moto``) and merged through a proxy that
  adds 20 ms to every request, at several numbers of requests in flight,
  against the same merge on local disk (target >= 0.5x); a Go benchmark
  (``BenchmarkMergeS3``) does the measuring, this script runs it.
* ``smoke``: seconds; ``make test`` runs it.

Every run happens in a fresh process (bench_merge.run_child), contenders
alternate, numbers are medians over the repeats. Reports land in
``bench/results/scale-<preset>-<date>.{md,json}``.

    python bench/bench_scale.py --preset smoke
    python bench/bench_scale.py --preset partitions      # about 40 minutes on 2 cores
    python bench/bench_scale.py --preset cold            # about 40 minutes (most of it pylance building 10M rows)
    python bench/bench_scale.py --preset s3              # an S3 server in the benchmark's process (gofakes3); --s3-server moto for moto
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

import bench_merge as bm

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
os.environ.setdefault("LANCE_LOG", "error")  # pylance warns about every empty IVF partition


@dataclass
class ScalePreset:
    rows: int  # rows of the segments dataset (and of the deltas dataset)
    dim: int
    partitions: list[int]
    types: list[str]
    fragments: int  # segments dataset: one row-major segment per fragment (0: no segments dataset)
    group: int  # segments per merge task
    deltas: int  # deltas dataset: base of rows - deltas * delta_rows, then the deltas
    delta_rows: int
    repeats: int
    cold: bool = False  # drop the dataset's pages from the cache before each run
    s3: bool = False  # measure the merge on S3 (moto) through a delaying proxy
    s3_delay_ms: int = 20
    s3_inflight: list[int] = field(default_factory=lambda: [4, 16, 64])


PRESETS = {
    "smoke": ScalePreset(rows=20_000, dim=32, partitions=[8, 64], types=["IVF_PQ"], fragments=8, group=4, deltas=8,
                         delta_rows=500, repeats=1),
    "partitions": ScalePreset(rows=1_000_000, dim=128, partitions=[128, 2048], types=["IVF_PQ", "IVF_RQ", "IVF_SQ"],
                              fragments=32, group=8, deltas=40, delta_rows=5_000, repeats=5),
    "cold": ScalePreset(rows=10_000_000, dim=128, partitions=[1024], types=["IVF_SQ"], fragments=0, group=0, deltas=40,
                        delta_rows=5_000, repeats=3, cold=True),
    "s3": ScalePreset(rows=1_000_000, dim=128, partitions=[2048], types=["IVF_SQ"], fragments=0, group=0, deltas=40,
                      delta_rows=5_000, repeats=3, s3=True),
}


# -- datasets ---------------------------------------------------------------------------


def preset_for(p: ScalePreset, t: str, parts: int) -> bm.Preset:
    return bm.Preset(rows=p.rows, fragments=p.fragments, group=p.group, base_rows=p.rows - p.deltas * p.delta_rows,
                     deltas=p.deltas, delta_rows=p.delta_rows, dim=p.dim, partitions=parts, repeats=p.repeats, types=[t])


def build(root: Path, p: ScalePreset, t: str, parts: int) -> dict[str, Any]:
    """The datasets of one type and partition count, built once per work
    directory (kept with --work, and reused)."""
    d = root / f"{t}-p{parts}"
    done = d / "built.json"
    if done.exists():
        return json.loads(done.read_text())
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    bp = preset_for(p, t, parts)
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    if p.fragments:
        seg = bm.build_segments(d, t, bp)
        seg["json"] = str(d / f"segments-{t}.json")
        seg["pkl"] = str(d / f"segments-{t}.pkl")
        out["segments"] = seg
    dlt = build_deltas(d, t, bp)
    out["deltas"] = dlt
    out["build_seconds"] = time.perf_counter() - t0
    done.write_text(json.dumps(out))
    return out


def build_deltas(d: Path, t: str, bp: bm.Preset) -> dict[str, Any]:
    """A base segment and one delta per append, as bench_merge builds them
    (the base written in batches: 10M rows do not fit one numpy array
    comfortably), and its segments' JSON for our merge."""
    import lance

    import lance_segmerge as ls

    uri = str(d / f"deltas-{t}")
    batch = 1_000_000
    for start in range(0, bp.base_rows, batch):
        n = min(batch, bp.base_rows - start)
        lance.write_dataset(bm.table(bm.vectors(n, bp.dim, seed=1000 + start // batch), start), uri,
                            mode="append" if start else "create")
    ds = lance.dataset(uri)
    ds.create_index("vec", t, name="vec_idx", **bm.index_params(t, bp))
    start = bp.base_rows
    for i in range(bp.deltas):
        ds = lance.write_dataset(bm.table(bm.vectors(bp.delta_rows, bp.dim, seed=2000 + i), start), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
        start += bp.delta_rows
    segs = ls.open(uri).list_index_segments("vec_idx")
    js = str(d / f"deltas-{t}.json")
    Path(js).write_text(json.dumps([s.to_dict() for s in segs]))
    return {"uri": uri, "rows": start, "segments": len(segs), "json": js, "groups": [[s.uuid for s in segs]]}


def index_bytes(uri: str, groups: list[list[str]]) -> int:
    return bm.dir_bytes([os.path.join(uri, "_indices", u) for g in groups for u in g])


def drop_cache(uri: str) -> None:
    """Write back every dirty page, then drop the dataset's files from the
    page cache (clean pages go with POSIX_FADV_DONTNEED; no privileges
    needed, unlike /proc/sys/vm/drop_caches)."""
    os.sync()
    for dirpath, _, files in os.walk(uri):
        for f in files:
            fd = os.open(os.path.join(dirpath, f), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


# -- the runs -----------------------------------------------------------------------------


def ours_optimize_local(uri: str, fan_in: int, verify: bool = True) -> dict[str, Any]:
    """The whole optimize in one process, one worker: open, list, plan,
    merge (one task: fan_in covers every segment), verify (unless told
    not to), commit. Its report splits the time: ``tree_seconds`` (merge,
    verify and commit) and ``commit_seconds``; the rest of the wall time
    is opening, listing and planning."""
    setup = "import lance_segmerge as ls"
    work = (f"rep = ls.optimize_with_report({uri!r}, 'vec_idx', executor='local', fan_in={fan_in}, "
            f"progress=False, verify={verify})")
    after = "extra = {'tree_seconds': rep.seconds, 'commit_seconds': rep.commit_seconds}"
    return bm.run_child(setup, work, after)


def measure_partitions(work: Path, p: ScalePreset, t: str, parts: int, data: dict[str, Any]) -> dict[str, Any]:
    seg, dlt = data.get("segments"), data["deltas"]
    scratch = str(work / "scratch")
    runs: dict[str, list[dict[str, Any]]] = {}

    def add(name: str, r: dict[str, Any]) -> None:
        runs.setdefault(name, []).append(r)

    fan_in = max(2, dlt["segments"])
    for r in range(p.repeats):
        order = ["ours", "floors"] if r % 2 == 0 else ["floors", "ours"]
        for who in order:
            if who == "ours":
                if seg:
                    add("merge_segments", bm.ours_merge(seg["uri"], seg["json"], seg["groups"], 1))
                add("merge_deltas", bm.ours_merge(dlt["uri"], dlt["json"], dlt["groups"], 1))
                u = bm.copy_dataset(dlt["uri"], str(work / "opt-ours"))
                add("optimize_deltas", ours_optimize_local(u, fan_in))
                u = bm.copy_dataset(dlt["uri"], str(work / "opt-ours"))
                add("optimize_deltas_noverify", ours_optimize_local(u, fan_in, verify=False))
            else:
                if seg:
                    add("floor_segments", bm.read_write_floor(seg["uri"], seg["groups"], scratch))
                    add("pylance_merge_segments", bm.pylance_merge(seg["uri"], seg["pkl"], seg["groups"]))
                add("floor_deltas", bm.read_write_floor(dlt["uri"], dlt["groups"], scratch))
        print(f"[{t} p={parts}] repeat {r + 1}/{p.repeats} done", flush=True)
    return summarize(runs, {"segments": index_bytes(seg["uri"], seg["groups"]) if seg else 0,
                            "deltas": index_bytes(dlt["uri"], dlt["groups"])})


def measure_cold(work: Path, p: ScalePreset, t: str, parts: int, data: dict[str, Any]) -> dict[str, Any]:
    dlt = data["deltas"]
    scratch = str(work / "scratch")
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in range(p.repeats):
        order = ["ours", "floor"] if r % 2 == 0 else ["floor", "ours"]
        for who in order:
            drop_cache(dlt["uri"])
            if who == "ours":
                runs.setdefault("merge_deltas_cold", []).append(bm.ours_merge(dlt["uri"], dlt["json"], dlt["groups"], 1))
            else:
                runs.setdefault("floor_deltas_cold", []).append(bm.read_write_floor(dlt["uri"], dlt["groups"], scratch))
        print(f"[{t} p={parts} cold] repeat {r + 1}/{p.repeats} done", flush=True)
    return summarize(runs, {"deltas": index_bytes(dlt["uri"], dlt["groups"])})


def measure_s3(work: Path, p: ScalePreset, t: str, parts: int, data: dict[str, Any], server: str = "inprocess") -> dict[str, Any]:
    """Run BenchmarkMergeS3 (gokernel/segment) next to moto: it uploads the
    deltas dataset, merges it on local disk, then on S3 through a proxy
    that delays every request, at each number of requests in flight."""
    dlt = data["deltas"]
    env = {**os.environ, "SEGMERGE_BENCH_S3_DATASET": dlt["uri"], "SEGMERGE_BENCH_S3_DELAY": f"{p.s3_delay_ms}ms",
           "SEGMERGE_BENCH_S3_INFLIGHT": ",".join(str(n) for n in p.s3_inflight), "GOEXPERIMENT": "simd"}
    cmd = [os.environ.get("GO", "go"), "test", "-run", "^$",
           "-bench", "^BenchmarkMergeS3$", "-benchtime", "1x", "-count", str(p.repeats), "-timeout", "2h", "./gokernel/segment/"]
    if server == "moto":  # a Python server: it, not the merge, is the bottleneck on 2 cores
        cmd = [sys.executable, str(REPO / "tools" / "with_emulators.py"), "--"] + cmd
    else:  # gofakes3 in the benchmark's process
        env["SEGMERGE_BENCH_S3_SERVER"] = "inprocess"
    print("running", " ".join(cmd[3:]), flush=True)
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"BenchmarkMergeS3 failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    # BenchmarkMergeS3/local-2  1  123 ns/op  456.7 MB/s ...; /s3-inflight-16 ...
    res: dict[str, list[float]] = {}
    for line in out.stdout.splitlines():
        m = re.match(r"BenchmarkMergeS3/(\S+?)(-\d+)?\s+\d+\s+(\d+) ns/op\s+([\d.]+) MB/s", line)
        if m:
            res.setdefault(m.group(1), []).append(float(m.group(4)))
    if not res:
        raise RuntimeError(f"no BenchmarkMergeS3 results in:\n{out.stdout[-3000:]}")
    return {"mb_per_s": {k: bm.median(v) for k, v in res.items()}, "runs": res, "delay_ms": p.s3_delay_ms,
            "bytes": index_bytes(dlt["uri"], dlt["groups"])}


def summarize(runs: dict[str, list[dict[str, Any]]], in_bytes: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, rs in runs.items():
        secs = bm.median([x["seconds"] for x in rs])
        b = in_bytes["segments" if name.endswith("segments") else "deltas"]
        out[name] = {"seconds": secs, "mb_per_s": b / secs / 2**20,
                     "peak_rss_mib": max(max(x["rss_self"], x["rss_children"]) for x in rs) / 2**20, "runs": rs}
        if all("tree_seconds" in x for x in rs):  # an optimize: its phases (medians)
            out[name]["phases"] = {
                "open_list_plan": bm.median([x["seconds"] - x["tree_seconds"] for x in rs]),
                "merge_verify": bm.median([x["tree_seconds"] - x["commit_seconds"] for x in rs]),
                "commit": bm.median([x["commit_seconds"] for x in rs]),
            }
    out["input_bytes"] = in_bytes
    return out


# -- report --------------------------------------------------------------------------------


def ratio(s: dict[str, Any], a: str, b: str) -> Optional[float]:
    if a in s and b in s:
        return float(s[a]["seconds"] / s[b]["seconds"])
    return None


def report_markdown(res: dict[str, Any]) -> str:
    m = res["machine"]
    lines = [f"# lance-segmerge at scale — preset `{res['preset']}` (pylance {m['pylance']})", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['platform']}, Python {m['python']}.",
             f"Medians of {res['repeats']} repeats; every run in a fresh process. Config: {res['config']}.", ""]
    targets = []
    for key, d in res["results"].items():
        t, parts = d["type"], d["partitions"]
        s = d["summary"]
        lines += [f"## {t}, {parts} partitions", ""]
        if "mb_per_s" in s and isinstance(s["mb_per_s"], dict):  # s3
            local = s["mb_per_s"].get("local")
            lines += [f"{s['bytes'] / 2**20:.0f} MiB of index; every S3 request delayed {s['delay_ms']} ms by the proxy.", "",
                      "| run | MB/s | / local disk |", "| --- | ---: | ---: |"]
            for name, v in s["mb_per_s"].items():
                lines.append(f"| {name} | {v:.1f} | {v / local:.2f} |" if local else f"| {name} | {v:.1f} | |")
            best = max((v for k, v in s["mb_per_s"].items() if k.startswith("s3-inflight")), default=0.0)
            if local:
                targets.append((f"{t} p={parts}: S3 (+{s['delay_ms']} ms) MB/s / local disk", best / local, ">= 0.5"))
            floor = s["mb_per_s"].get("s3-floor")
            if floor:
                # What no merge can beat there: the same bytes read and
                # written back through the same proxy.
                targets.append((f"{t} p={parts}: S3 (+{s['delay_ms']} ms) merge MB/s / S3 read-write floor MB/s", best / floor, ""))
                nd, ndf = s["mb_per_s"].get("s3-nodelay-default"), s["mb_per_s"].get("s3-floor-nodelay")
                if nd and ndf:
                    targets.append((f"{t} p={parts}: S3 (no delay) merge MB/s / S3 read-write floor MB/s", nd / ndf, ""))
                    targets.append((f"{t} p={parts}: S3 read-write floor (no delay) / local merge: the server's ceiling here", ndf / local, ""))
            lines.append("")
            continue
        ib = s["input_bytes"]
        sizes = "; ".join(f"{k} dataset: {v / 2**20:.1f} MiB" for k, v in ib.items())  # the cold preset has no segments dataset
        lines += [sizes[0].upper() + sizes[1:] + ".", "",
                  "| run | wall s | MB/s | peak RSS MiB |", "| --- | ---: | ---: | ---: |"]
        for name, v in s.items():
            if name == "input_bytes":
                continue
            lines.append(f"| {name} | {v['seconds']:.3f} | {v['mb_per_s']:.1f} | {v['peak_rss_mib']:.0f} |")
        lines.append("")
        phased = [(k, v["phases"]) for k, v in s.items() if isinstance(v, dict) and "phases" in v]
        if phased:
            lines += ["| optimize run | open + list + plan s | merge (+ verify) s | commit s |", "| --- | ---: | ---: | ---: |"]
            for name, ph in phased:
                lines.append(f"| {name} | {ph['open_list_plan']:.3f} | {ph['merge_verify']:.3f} | {ph['commit']:.3f} |")
            lines.append("")
        bound = "<= 1.5" if parts <= 128 else "<= 2.0"
        for label, a, b, tgt in (
            ("merge / read-write floor (segments" + (", re-quantized" if t == "IVF_SQ" else "") + ")",
             "merge_segments", "floor_segments", bound),
            ("merge / read-write floor (base + deltas" + (", same bounds" if t == "IVF_SQ" else "") + ")",
             "merge_deltas", "floor_deltas", bound),
            ("whole optimize / merge alone (base + deltas)", "optimize_deltas", "merge_deltas", "<= 1.2" if parts >= 2048 else ""),
            ("whole optimize, verify=False / merge alone", "optimize_deltas_noverify", "merge_deltas", "<= 1.2" if parts >= 2048 else ""),
            ("pylance merge / ours, throughput (segments)", "pylance_merge_segments", "merge_segments", ">= 1.5"),
            ("cold merge MB/s / cold read-write floor MB/s", "floor_deltas_cold", "merge_deltas_cold", ">= 0.7"),
        ):
            r = ratio(s, a, b)
            if r is not None:
                targets.append((f"{t} p={parts}: {label}", r, tgt))
        rss = max(v["peak_rss_mib"] for k, v in s.items() if k != "input_bytes" and not k.startswith(("floor", "pylance")))
        targets.append((f"{t} p={parts}: peak RSS of our runs (MiB)", rss, "< 1024"))
    lines += ["## Targets", "", "| what | value | target |", "| --- | ---: | --- |"]
    for label, v, tgt in targets:
        lines.append(f"| {label} | {v:.2f} | {tgt} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--preset", default="partitions", choices=sorted(PRESETS))
    ap.add_argument("--types", help="comma-separated index types (default: the preset's)")
    ap.add_argument("--partitions", help="comma-separated partition counts (default: the preset's)")
    ap.add_argument("--repeats", type=int, help="override the preset's repeats")
    ap.add_argument("--out", default=str(HERE / "results"), help="report directory")
    ap.add_argument("--work", help="scratch directory (kept, and its datasets reused, when given)")
    ap.add_argument("--no-prefault", action="store_true", help="see bench_merge.prefault_memory")
    ap.add_argument("--build-only", action="store_true", help="build the datasets into --work, measure nothing")
    ap.add_argument("--s3-server", choices=["inprocess", "moto"], default="inprocess",
                    help="the S3 server of the s3 preset: gofakes3 inside the benchmark (default) or moto")
    args = ap.parse_args(argv)
    p = PRESETS[args.preset]
    if args.types:
        p.types = args.types.split(",")
    if args.partitions:
        p.partitions = [int(x) for x in args.partitions.split(",")]
    if args.repeats:
        p.repeats = args.repeats
    work = Path(args.work or tempfile.mkdtemp(prefix="segmerge-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.preset != "smoke" and not args.no_prefault and not p.cold and not args.build_only:
        bm.prefault_memory()
    results: dict[str, Any] = {"preset": args.preset, "config": asdict(p), "repeats": p.repeats, "machine": bm.machine(),
                               "results": {}}
    t_start = time.perf_counter()
    for t in p.types:
        for parts in p.partitions:
            print(f"[{t} p={parts}] building …", flush=True)
            data = build(work, p, t, parts)
            print(f"[{t} p={parts}] built ({data['build_seconds']:.0f}s when built)", flush=True)
            if args.build_only:
                continue
            if p.s3:
                summary = measure_s3(work, p, t, parts, data, args.s3_server)
            elif p.cold:
                summary = measure_cold(work, p, t, parts, data)
            else:
                summary = measure_partitions(work, p, t, parts, data)
            results["results"][f"{t}-p{parts}"] = {"type": t, "partitions": parts, "summary": summary,
                                                   "build_seconds": data["build_seconds"]}
    results["wall_seconds"] = time.perf_counter() - t_start
    if args.build_only:
        return 0
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    base = out_dir / f"scale-{args.preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    base.with_suffix(".json").write_text(json.dumps(results, indent=2))
    md = report_markdown(results) + f"\nWhole run (builds included): {results['wall_seconds'] / 60:.1f} min.\n"
    base.with_suffix(".md").write_text(md)
    print(md)
    print(f"report: {base}.md / .json")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
