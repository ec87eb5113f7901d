"""Scalar index merges against pylance 14.0.2 (issue 26), on the same
data, in one run.

pylance writes a table with a scalar index (``--kind``: an int64 or a
string BTREE, a string BITMAP, an NGRAM over text) and ``--deltas`` appends,
each indexed by ``optimize_indices(num_indices_to_merge=0)`` (one delta
segment per append). Then, each on a fresh copy, in fresh processes:

* ``ours``: ``lance_segmerge.optimize`` of the index (one worker: the merge
  runs in process), commit included; its peak RSS;
* ``pylance``: ``optimize_indices(num_indices_to_merge=<all>)`` of the same
  index;
* ``floor``: the same input bytes read into one reused 8 MiB buffer and
  written to one output file in user space (what any merge that rewrites
  them must at least do).

Both merged tables then answer the same filters (checked). Usage::

    PYTHONPATH=python .venv/bin/python bench/bench_btree.py --preset default

Writes ``bench/results/btree-<preset>-<time>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
#: kind -> (index type, what the keys are, filters both merged tables answer)
KINDS = {
    "btree": ("BTREE", "int64 keys (1% null)", ["k = 12345", "k > 999000000", "k BETWEEN -1000000 AND 1000000", "k IS NULL"]),
    "btree-string": ("BTREE", "string keys of many values (FSST in pylance's pages, 1% null)",
                     ["k = 'customer-000012345'", "k > 'customer-99'", "k BETWEEN 'customer-1000' AND 'customer-1001'", "k IS NULL"]),
    "bitmap": ("BITMAP", "string keys of 2,000 values (1% null)", ["k = 'key-17'", "k IN ('key-1', 'key-1999')", "k IS NULL"]),
    "ngram": ("NGRAM", "short text", ["contains(k, 'lph')", "contains(k, 'a 12')"]),
    # high cardinality: where upstream reports out-of-memory BITMAP merges
    "bitmap-high": ("BITMAP", "int64 keys of a million values (1% null)", ["k = 12345", "k IN (1, 999999)", "k IS NULL"]),
}
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa"]

PRESETS = {
    "smoke": {"rows": 200_000, "deltas": 20, "repeats": 1},
    "default": {"rows": 10_000_000, "deltas": 200, "repeats": 2},
    "large": {"rows": 100_000_000, "deltas": 1000, "repeats": 1},
    # string keys and text cost pylance far more to write: a middle size
    "medium": {"rows": 2_000_000, "deltas": 100, "repeats": 2},
}

CHILD = r"""
import json, os, resource, shutil, sys, time
job = json.load(open(sys.argv[1]))
uri = job["uri"]
if job["kind"] in ("ours", "ours_flat"):
    import lance_segmerge as ls
    ls.kernel_version()
    fan_in = 4096 if job["kind"] == "ours_flat" else 32  # ours_flat: every segment in one task
    t0 = time.perf_counter()
    ls.optimize(uri, job.get("index", "k_idx"), executor="local", progress=False, fan_in=fan_in)
    dt = time.perf_counter() - t0
elif job["kind"] == "pylance":
    import lance
    ds = lance.dataset(uri)
    t0 = time.perf_counter()
    ds.optimize.optimize_indices(index_names=[job.get("index", "k_idx")], num_indices_to_merge=job["n"])
    dt = time.perf_counter() - t0
else:  # floor
    buf = bytearray(8 << 20)
    t0 = time.perf_counter()
    with open(job["out"], "wb") as out:
        for p in job["files"]:
            with open(p, "rb", buffering=0) as f:
                while True:
                    n = f.readinto(buf)
                    if not n:
                        break
                    out.write(memoryview(buf)[:n])
        out.flush()
        os.fsync(out.fileno())
    dt = time.perf_counter() - t0
# VmHWM: this process's own peak (ru_maxrss carries the parent's across exec).
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"seconds": dt, "rss_mib": hwm / 1024}))
"""


def _child(job: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
    """One contender's run in a fresh process; a run past ``timeout``
    seconds is stopped and recorded as such (its time is then a lower
    bound)."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), LANCE_LOG="error")
    # the job goes by file: a thousand segments' file names pass the limit of an argument list
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as jf:
        json.dump(job, jf)
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, jf.name], capture_output=True, text=True, env=env,
                             check=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        res = {"seconds": float(timeout or 0), "rss_mib": float("nan"), "stopped": True}
    else:
        res = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        os.unlink(jf.name)
    print(f"{job['kind']}: {res['seconds']:.2f}s{' (stopped)' if res.get('stopped') else ''}", file=sys.stderr, flush=True)
    return res


def contend(src: str, tmp: str, files: list[str], repeats: int, timeout: float | None,
            kinds: tuple[str, ...] = ("ours", "pylance", "floor"), **job: Any) -> dict[str, list[dict[str, Any]]]:
    """Runs each of ``kinds`` (ours, ours_flat, pylance, floor) ``repeats``
    times, each on a fresh copy of ``src`` under ``tmp``
    (``<kind><repeat>``), alternating their order; ``job`` adds to every
    run's job (n, index)."""
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for r in range(repeats):
        order = list(kinds) if r % 2 == 0 else list(reversed(kinds))
        for kind in order:
            dst = os.path.join(tmp, f"{kind}{r}")
            shutil.copytree(src, dst)
            subprocess.run(["sync"], check=False)
            runs[kind].append(_child({**job, "kind": kind, "uri": dst, "files": [f.replace(src, dst) for f in files],
                                      "out": os.path.join(tmp, f"floor{r}.bin")}, timeout))
    return runs


def _keys(kind: str, rng: Any, start: int, n: int) -> Any:
    import numpy as np
    import pyarrow as pa

    null = rng.random(n) < 0.01
    if kind == "btree":
        return pa.array(rng.integers(-(10**9), 10**9, n), mask=null)
    if kind == "btree-string":
        return pa.array([f"customer-{x:09d}" for x in rng.integers(0, 10**9, n)], mask=null)
    if kind == "bitmap":
        return pa.array([f"key-{x}" for x in rng.integers(0, 2000, n)], mask=null)
    if kind == "bitmap-high":
        return pa.array(rng.integers(0, 10**6, n), mask=null)
    w = rng.integers(0, len(WORDS), n)
    return pa.array([f"{WORDS[a]} {x % 1000} {WORDS[(a + 3) % len(WORDS)]}" for a, x in zip(w, np.arange(start, start + n))])


def _build(uri: str, rows: int, deltas: int, kind: str = "btree") -> None:
    import lance
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(0)
    per = rows // (deltas + 1)

    def table(start: int) -> pa.Table:
        return pa.table({"id": np.arange(start, start + per), "k": _keys(kind, rng, start, per)})

    ds = lance.write_dataset(table(0), uri)
    ds.create_scalar_index("k", KINDS[kind][0])
    for i in range(deltas):
        ds = lance.write_dataset(table(per * (i + 1)), uri, mode="append")
        ds.optimize.optimize_indices(index_names=["k_idx"], num_indices_to_merge=0)


def _index_files(uri: str) -> list[str]:
    sys.path.insert(0, str(REPO / "python"))
    import lance_segmerge as ls

    out = []
    for s in ls.open(uri).list_index_segments("k_idx", with_stats=False):
        out += [os.path.join(uri, "_indices", s.uuid, f.path) for f in s.files]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="default", choices=sorted(PRESETS))
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--kind", default="btree", choices=sorted(KINDS))
    ap.add_argument("--repeats", type=int, help="runs of each contender (default: the preset's)")
    ap.add_argument("--deltas", type=int, help="this many optimize deltas instead of the preset's, each of the preset's "
                    "rows per segment (a large fixture's writing stopped early: its segments so far)")
    ap.add_argument("--timeout", type=float, help="stop a contender's run after this many seconds (recorded as a lower bound)")
    ap.add_argument("--fixture", help="keep the table pylance writes in this folder and reuse it on later runs of the same preset "
                    "and kind (the large preset takes pylance many minutes to write)")
    args = ap.parse_args()
    p = dict(PRESETS[args.preset])
    if args.repeats:
        p["repeats"] = args.repeats
    if args.deltas:
        p["rows"], p["deltas"] = p["rows"] // (p["deltas"] + 1) * (args.deltas + 1), args.deltas
    index_type, what, filters = KINDS[args.kind]
    import lance

    with tempfile.TemporaryDirectory(prefix="btree-") as tmp:
        name = f"{args.kind}-{args.preset}" + (f"-{args.deltas}" if args.deltas else "")
        src = os.path.join(args.fixture, name) if args.fixture else os.path.join(tmp, "src")
        t0 = time.perf_counter()
        reused = os.path.exists(os.path.join(src, ".complete"))
        if not reused:
            shutil.rmtree(src, ignore_errors=True)
            _build(src, p["rows"], p["deltas"], args.kind)
            Path(src, ".complete").touch()  # outside the table: lance ignores it
        build_s = time.perf_counter() - t0
        files = _index_files(src)
        in_bytes = sum(os.path.getsize(f) for f in files)
        runs = contend(src, tmp, files, p["repeats"], args.timeout, n=p["deltas"] + 1)
        def answers(uri: str, index: bool = True) -> list[list[int]]:
            ds = lance.dataset(uri)
            return [sorted(ds.to_table(filter=f, columns=["id"], use_scalar_index=index)["id"].to_pylist()) for f in filters]

        # ours against a scan without the index, and against pylance's merge
        # when it finished
        ours_answers = answers(os.path.join(tmp, "ours0"))
        same = ours_answers == answers(os.path.join(tmp, "ours0"), index=False)
        if not runs["pylance"][0].get("stopped"):
            same = same and ours_answers == answers(os.path.join(tmp, "pylance0"))
        segs = {n: len([s for d in lance.dataset(os.path.join(tmp, f"{n}0")).describe_indices() if d.name == "k_idx" for s in d.segments])
                for n in ("ours", "pylance")}
    best = {k: min(v, key=lambda x: x["seconds"]) for k, v in runs.items()}
    lines = [
        f"# {index_type} merge ({args.kind}), preset `{args.preset}`",
        "",
        f"{platform.machine()}, {os.cpu_count()} cores, pylance {lance.__version__}; {p['rows']:,} rows of {what} in a base "
        f"and {p['deltas']} optimize deltas, {in_bytes / 2**20:.1f} MiB of index files; {'reused' if reused else f'built in {build_s:.0f}s'}; best of {p['repeats']}.",
        "",
        "| run | seconds | ratio to pylance | ratio to floor | peak RSS (MiB) | segments after |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for k in ("ours", "pylance", "floor"):
        s = best[k]["seconds"]
        more = ">" if best[k].get("stopped") else ""
        ratio = "≤ " if best["pylance"].get("stopped") and k != "pylance" else ""
        lines.append(f"| {k} | {more}{s:.2f} | {ratio}{s / best['pylance']['seconds']:.2f} | {more}{s / best['floor']['seconds']:.2f} | "
                     f"{best[k]['rss_mib']:.0f} | {segs.get(k, '-') if not best[k].get('stopped') else 'stopped'} |")
    lines += ["", f"answers identical on {len(filters)} filters (ours, a scan without the index"
              f"{'' if best['pylance'].get('stopped') else ', pylance'}): {'yes' if same else 'NO'}."]
    if any(b.get("stopped") for b in best.values()):
        lines += [f"A run marked > was stopped after {args.timeout:.0f} s: its time is a lower bound."]
    text = "\n".join(lines) + "\n"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prefix = "btree" if args.kind == "btree" else args.kind
    stem = out / f"{prefix}-{args.preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps({"preset": p, "kind": args.kind, "runs": runs, "same": same, "input_bytes": in_bytes}, indent=1))
    print(text)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
