"""Runs inside an older release's environment: writes one dataset per case
with a base vector index and optimize deltas, using only that release's
own API and defaults, and a copy merged by that release's own
``optimize_indices``.

Usage: python writer.py OUT_DIR CASES_JSON  (prints one JSON line per case)

Only lance (or, in a LanceDB environment, lancedb), pyarrow and numpy are
imported; the script must run on every release from the 0.2x line on, so
it probes keyword names instead of assuming them.
"""

from __future__ import annotations

import inspect
import json
import shutil
import sys
import traceback

import numpy as np
import pyarrow as pa

try:
    import lance
except ImportError:  # a LanceDB environment: its Lance is embedded
    lance = None

DIM = 32
BASE_ROWS = 3000
DELTA_ROWS = 300
DELTAS = 5


def vectors(n: int, seed: int) -> np.ndarray:
    """Clustered float32 vectors (16 blobs), deterministic per seed."""
    rng = np.random.default_rng(seed)
    centers = np.random.default_rng(1234).normal(size=(16, DIM)).astype(np.float32) * 3
    return (centers[rng.integers(0, 16, n)] + rng.normal(size=(n, DIM))).astype(np.float32)


def table(start: int, vecs: np.ndarray) -> pa.Table:
    flat = pa.array(vecs.reshape(-1), type=pa.float32())
    return pa.table({
        "id": pa.array(np.arange(start, start + len(vecs), dtype=np.int64)),
        "vec": pa.FixedSizeListArray.from_arrays(flat, DIM),
    })


def write_kwargs(stable: bool) -> dict:
    if not stable:
        return {}
    params = inspect.signature(lance.write_dataset).parameters
    for key in ("enable_stable_row_ids", "enable_move_stable_row_ids"):
        if key in params:
            return {key: True}
    raise NotImplementedError("this release has no stable row ids")


def index_kwargs(kind: str, metric: str) -> dict:
    kw: dict = {"metric": metric, "num_partitions": 8}
    base = kind
    if kind == "IVF_PQ4":
        base, kw["num_bits"] = "IVF_PQ", 4
    if base.endswith("PQ"):
        kw["num_sub_vectors"] = 4
    if base.startswith("IVF_HNSW"):
        kw.update(m=8, ef_construction=100)
    return {"index_type": base, **kw}


def write(out: str, case: dict) -> dict:
    uri = f"{out}/{case['name']}"
    kind, metric = case["kind"], case["metric"]
    lance.write_dataset(table(0, vectors(BASE_ROWS, 0)), uri, **write_kwargs(case.get("stable", False)))
    ds = lance.dataset(uri)
    ds.create_index("vec", name="vec_idx", **index_kwargs(kind, metric))
    start = BASE_ROWS
    for d in range(DELTAS):
        lance.write_dataset(table(start, vectors(DELTA_ROWS, 100 + d)), uri, mode="append")
        start += DELTA_ROWS
        lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    # One more append the index does not cover yet: we build its segment
    # (build_index_segment with the index's model) on one copy, this
    # release adds its own delta on the other.
    build = f"{uri}.build"
    shutil.copytree(uri, build)
    lance.write_dataset(table(start, vectors(DELTA_ROWS, 200)), build, mode="append")
    build_own = f"{build}.own"
    shutil.copytree(build, build_own)
    lance.dataset(build_own).optimize.optimize_indices(num_indices_to_merge=0)
    own = f"{uri}.own"
    shutil.copytree(uri, own)
    lance.dataset(own).optimize.optimize_indices(num_indices_to_merge=DELTAS + 1)
    return {"uri": uri, "own": own, "build": build, "build_own": build_own, "segments": DELTAS + 1}


def write_lancedb(out: str, case: dict) -> dict:
    """The same through LanceDB's table API: each append followed by
    ``Table.optimize()``, which compacts and leaves delta segments (LanceDB
    has no merge of its own to compare with: the baseline is the table as
    LanceDB left it)."""
    import lancedb

    if case.get("stable"):
        raise NotImplementedError("the LanceDB writer does not ask for stable row ids")
    name = case["name"]
    db = lancedb.connect(out)
    tbl = db.create_table(name, table(0, vectors(BASE_ROWS, 0)))
    kw = index_kwargs(case["kind"], case["metric"])
    tbl.create_index(vector_column_name="vec", name="vec_idx", **kw)
    start = BASE_ROWS
    for d in range(DELTAS):
        tbl.add(table(start, vectors(DELTA_ROWS, 100 + d)))
        start += DELTA_ROWS
        tbl.optimize()
    uri = f"{out}/{name}.lance"
    own = f"{out}/{name}_own.lance"
    shutil.copytree(uri, own)
    build = f"{out}/{name}_build.lance"
    shutil.copytree(uri, build)
    db.open_table(f"{name}_build").add(table(start, vectors(DELTA_ROWS, 200)))
    build_own = f"{out}/{name}_build_own.lance"
    shutil.copytree(build, build_own)
    db.open_table(f"{name}_build_own").optimize()
    return {"uri": uri, "own": own, "build": build, "build_own": build_own,
            "segments": tbl.index_stats("vec_idx").num_indices}


#: Tries per case when a release panics dividing by zero: 0.27.1's PQ
#: training does so in some runs and not others (random initialisation),
#: on IVF_PQ and IVF_HNSW_PQ alike, which made the case it skipped vary
#: from run to run.
PANIC_TRIES = 3


def write_retrying(out: str, case: dict, res: dict) -> dict:
    """write(), again on a fresh folder after a division-by-zero panic;
    ``res["tries"]`` records how many it took."""
    for attempt in range(1, PANIC_TRIES + 1):
        res["tries"] = attempt
        try:
            return write(out, case)
        except BaseException as e:  # noqa: BLE001 - pyo3's PanicException derives from BaseException
            if attempt == PANIC_TRIES or "divide by zero" not in str(e):
                raise
            uri = f"{out}/{case['name']}"
            for d in (uri, f"{uri}.build", f"{uri}.build.own", f"{uri}.own"):
                shutil.rmtree(d, ignore_errors=True)
    raise AssertionError("unreachable")


def main() -> None:
    out, cases = sys.argv[1], json.loads(sys.argv[2])
    for case in cases:
        res = {"name": case["name"]}
        try:
            if lance is None:
                import lancedb

                res["lance"] = f"lancedb-{lancedb.__version__}"
                res.update(write_lancedb(out, case))
            else:
                res["lance"] = lance.__version__
                res.update(write_retrying(out, case, res))
        except BaseException as e:  # noqa: BLE001 - the release's refusal (or panic) is data
            if isinstance(e, KeyboardInterrupt):
                raise
            res["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            res["trace"] = traceback.format_exc()[-2000:]
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
