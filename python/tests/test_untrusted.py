"""Untrusted plans and segments: a crafted or corrupted one is refused
with a typed error, fast and in bounded memory; it never kills the
process."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys

import lancegen
import pytest

import lance_segmerge as ls

# Runs in a child, so that its peak memory can be measured: merges and
# commits segments whose metadata holds a roaring bitmap claiming 2^32 (or
# 2^28) fragment ids, and prints what each call raised.
_BOMB = r"""
import base64, json, sys, time
import lancegen, lance_segmerge as ls
uri, n_ids = sys.argv[1], int(sys.argv[2])
segs = ls.open(uri).list_index_segments("vec_idx")
bad = ls.IndexSegment.from_dict({**segs[1].to_dict(),
    "metadata": base64.b64encode(lancegen.with_fragment_bitmap(segs[1].metadata, lancegen.roaring_bomb(n_ids))).decode()})
out = {"bytes": len(bad.to_json())}
for name, call in [
    ("merge", lambda: ls.merge_existing_index_segments(uri, [segs[0], bad])),
    ("commit", lambda: ls.commit_existing_index_segments(uri, "vec_idx", "vec", [bad])),
    ("plan-json", lambda: ls.merge_existing_index_segments(uri, ls.MergeTask.from_json(
        json.dumps({"task_id": 0, "segments": [segs[0].to_dict(), bad.to_dict()]})))),
]:
    t0 = time.perf_counter()
    try:
        call()
        out[name] = ["no error", 0, ""]
    except Exception as e:
        out[name] = [type(e).__name__, time.perf_counter() - t0, str(e)[:300]]
# VmHWM: this process's own peak (ru_maxrss would include the parent's
# size at fork).
out["maxrss_kib"] = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
print(json.dumps(out))
"""


@pytest.mark.parametrize("n_ids", [2**32, 2**28], ids=["2^32", "2^28"])
def test_bitmap_bomb_refused_in_bounded_memory(delta_datasets, copy_dataset, n_ids):
    uri = copy_dataset(delta_datasets["IVF_PQ"].uri)
    before = sorted(os.listdir(os.path.join(uri, "_indices")))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    p = subprocess.run([sys.executable, "-c", _BOMB, uri, str(n_ids)], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["bytes"] > 50_000  # the bomb is in there
    for name in ("merge", "commit", "plan-json"):
        cls, seconds, msg = out[name]
        assert cls == "InvalidInputError", (name, out[name])
        assert "fragment bitmap names fragment" in msg, msg
        assert seconds < 10, (name, seconds)
    # The whole child (interpreter, pylance, the kernel) stayed small.
    assert out["maxrss_kib"] < 1024 * 1024, out["maxrss_kib"]
    assert sorted(os.listdir(os.path.join(uri, "_indices"))) == before


def test_fragment_ids_beyond_the_dataset(delta_datasets, copy_dataset):
    """Plain fragment_ids (no metadata bytes) naming fragments the dataset
    never had are refused before any file is read."""
    uri = copy_dataset(delta_datasets["IVF_PQ"].uri)
    segs = ls.open(uri).list_index_segments("vec_idx")
    bad = ls.IndexSegment.from_dict({**segs[1].to_dict(), "metadata": "", "fragment_ids": [2, 10**9]})
    with pytest.raises(ls.InvalidInputError, match="names fragment 1000000000; the dataset has assigned ids up to 4"):
        ls.merge_existing_index_segments(uri, [segs[0], bad])
    with pytest.raises(ls.InvalidInputError, match="names fragment 1000000000"):
        ls.commit_existing_index_segments(uri, "vec_idx", "vec", [bad])


def test_tampered_plan_refused_before_any_worker(delta_datasets, copy_dataset):
    uri = copy_dataset(delta_datasets["IVF_PQ"].uri)
    ds = ls.open(uri)
    plan = ds.plan_index_segment_merge("vec_idx", segments_per_task=2)
    d = plan.to_dict()
    seg = d["tasks"][0]["segments"][1]
    seg["metadata"] = base64.b64encode(
        lancegen.with_fragment_bitmap(base64.b64decode(seg["metadata"]), lancegen.roaring_bomb(2**32))
    ).decode()
    bad = ls.MergePlan.from_json(json.dumps(d))
    before = sorted(os.listdir(os.path.join(uri, "_indices")))
    with pytest.raises(ls.InvalidInputError, match="names fragment 4294967295"):
        ls.run_plan(ds, bad, executor="processes", max_workers=2)
    # A task moved to another index, a segment in two tasks: refused too.
    d = plan.to_dict()
    d["index_name"] = "other_idx"
    with pytest.raises(ls.InvalidInputError, match='belongs to index "vec_idx", the plan is for "other_idx"'):
        ls.run_plan(ds, ls.MergePlan.from_dict(d))
    assert sorted(os.listdir(os.path.join(uri, "_indices"))) == before
    assert ls.open(uri).version == ds.version


@pytest.mark.parametrize(
    "value",
    [[1, True, 3], [1, -1], [1, 2**32], [1, 2.0], [1, "2"], [1, None], "123", {1: 2}],
)
def test_integer_lists_are_checked_item_by_item(value: object) -> None:
    """The fast check of a segment's integer lists (types, minimum and
    maximum in C) refuses exactly what the per-item check refuses: bools,
    negatives, values past uint32, floats, strings, None, non-lists."""
    from lance_segmerge._validate import _U32, _ints

    with pytest.raises(ls.InvalidInputError, match="partition_rows"):
        _ints(value, "partition_rows", "partition_rows", 0, _U32)


def test_integer_lists_pass_through() -> None:
    from lance_segmerge._validate import _U32, _ints

    rows = list(range(2048))
    assert _ints(rows, "partition_rows", "partition_rows", 0, _U32) == tuple(rows)
    assert _ints(None, "x", "x") == () and _ints((), "x", "x") == ()
