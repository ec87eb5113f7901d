"""plan_index_segment_merge: picklable, deterministic, balanced plans whose
tasks run anywhere that sees the storage."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import pickle
import shutil

import lance
import lancegen
import pytest

import lance_segmerge as ls
from lance_segmerge import _jobs


@pytest.fixture(scope="module")
def deltas12(tmp_path_factory):
    root = tmp_path_factory.mktemp("plan")
    return lancegen.build_with_deltas(str(root / "pq"), "IVF_PQ", n_deltas=12, delta_rows=150)


def test_plan_shape(deltas12):
    ds = ls.open(deltas12.uri)
    segs = ds.list_index_segments("vec_idx")
    plan = ds.plan_index_segment_merge("vec_idx", segments_per_task=4)
    assert plan.read_version == ds.version and plan.index_type == "IVF_PQ" and plan.column == "vec"
    assert sorted(plan.sources) == sorted(s.uuid for s in segs)  # every segment, once
    assert all(2 <= len(t.segments) <= 4 for t in plan.tasks)
    assert len(plan.tasks) == 4
    assert sum(t.rows for t in plan.tasks) == sum(s.num_rows for s in segs)
    # Deterministic.
    again = ls.open(deltas12.uri).plan_index_segment_merge("vec_idx", segments_per_task=4)
    assert again == plan and again.plan_id == plan.plan_id
    # Balanced by bytes: the base (the largest) does not share its task with
    # the most other segments.
    base_task = next(t for t in plan.tasks if segs[0].uuid in t.segment_ids)
    assert len(base_task.segments) == min(len(t.segments) for t in plan.tasks)


def test_max_segments_to_merge_leaves_the_oldest(deltas12):
    ds = ls.open(deltas12.uri)
    segs = ds.list_index_segments("vec_idx")
    plan = ds.plan_index_segment_merge("vec_idx", segments_per_task=3, max_segments_to_merge=6)
    newest = sorted(segs, key=lambda s: s.dataset_version)[-6:]
    assert sorted(plan.sources) == sorted(s.uuid for s in newest)
    assert sorted(plan.untouched) == sorted(s.uuid for s in segs if s not in newest)


def test_plan_round_trips(deltas12):
    plan = ls.plan_index_segment_merge(deltas12.uri, "vec_idx", 5)
    assert pickle.loads(pickle.dumps(plan)) == plan
    assert ls.MergePlan.from_json(plan.to_json()) == plan
    json.loads(plan.to_json())
    assert "storage_options" not in plan.to_json()


def _run_task_in_child(args):
    dataset, plan_bytes, i = args
    plan = pickle.loads(plan_bytes)
    return _jobs.merge_task({"dataset": dataset, "task": plan.tasks[i], "index_uuid": None})


def test_tasks_run_in_spawned_processes_and_commit_like_local(deltas12, tmp_path):
    local, remote = str(tmp_path / "local"), str(tmp_path / "remote")
    shutil.copytree(deltas12.uri, local)
    shutil.copytree(deltas12.uri, remote)
    results = {}
    for uri, where in ((local, "local"), (remote, "spawn")):
        ds = ls.open(uri)
        plan = ds.plan_index_segment_merge("vec_idx", segments_per_task=4)
        if where == "local":
            merged = [ds.merge_existing_index_segments(t) for t in plan.tasks]
        else:
            with mp.get_context("spawn").Pool(2) as pool:
                outs = pool.map(_run_task_in_child, [(ds, pickle.dumps(plan), i) for i in range(len(plan.tasks))])
            merged = [ls.IndexSegment.from_dict(o) for o in outs]
        v = ds.commit_existing_index_segments(plan.index_name, plan.column, merged, replaces=plan.sources).version
        pds = lance.dataset(uri)
        results[where] = (
            v,
            sorted(sorted(s.fragment_ids) for s in pds.describe_indices()[0].segments),
            lancegen.recall(pds, deltas12.vectors, lancegen.vectors(20, seed=2), k=10, nprobes=4),
        )
    assert results["local"] == results["spawn"]


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"index_name": "nope"}, ls.NotFoundError, "index \"nope\" does not exist"),
        ({"segments_per_task": 0}, ls.InvalidInputError, "segments_per_task"),
        ({"segments_per_task": 1}, ls.InvalidInputError, "segments_per_task"),
        ({"segments_per_task": -4}, ls.InvalidInputError, "segments_per_task"),
        ({"max_segments_to_merge": 1}, ls.InvalidInputError, "max_segments_to_merge"),
        ({"target_rows_per_task": 0}, ls.InvalidInputError, "target_rows_per_task"),
    ],
)
def test_planning_errors(deltas12, kwargs, exc, match):
    args = {"index_name": "vec_idx", **kwargs}
    with pytest.raises(exc, match=match):
        ls.plan_index_segment_merge(deltas12.uri, **args)


def test_incompatible_models_fail_at_plan_time(tmp_path):
    x = lancegen.vectors(2000, seed=4)
    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(lancegen.table(x), uri, max_rows_per_file=500)
    # Each segment trains its own centroids: they cannot be merged.
    segs = [ds.create_index_uncommitted("vec", "IVF_FLAT", name="vec_idx", fragment_ids=[f], num_partitions=4) for f in range(4)]
    lance.dataset(uri).commit_existing_index_segments("vec_idx", "vec", segs)
    with pytest.raises(ls.InvalidInputError, match="IVF centroids"):
        ls.plan_index_segment_merge(uri, "vec_idx", 2)
    hn = str(tmp_path / "hnsw")
    shutil.copytree(uri, hn)
    d = lance.dataset(hn)
    d.create_index("vec", "IVF_HNSW_SQ", name="h", num_partitions=2)
    lance.write_dataset(lancegen.table(lancegen.vectors(100, seed=5), 9000), hn, mode="append")
    lance.dataset(hn).optimize.optimize_indices(num_indices_to_merge=0, index_names=["h"])
    plan = ls.plan_index_segment_merge(hn, "h", 2)  # HNSW segments plan like any other
    assert plan.index_type == "IVF_HNSW_SQ" and len(plan.tasks) == 1 and len(plan.sources) == 2


def test_nothing_to_plan(tmp_path, uncommitted_pq):
    built, segs = uncommitted_pq
    uri = str(tmp_path / "one")
    shutil.copytree(built.uri, uri)
    lance.dataset(uri).commit_existing_index_segments("vec_idx", "vec", [ls.merge_existing_index_segments(uri, segs).to_lance_index()])
    plan = ls.plan_index_segment_merge(uri, "vec_idx", 4)
    assert plan.tasks == () and plan.sources == ()
    # A plan without tasks still names the index's type (from its one
    # segment's files for a vector index, from the entry for a scalar one).
    assert plan.index_type == "IVF_PQ" and plan.column == "vec"
    assert ls.run_plan(ls.open(uri), plan).version == ls.open(uri).version
    lance.dataset(uri).create_scalar_index("id", "BTREE", name="id_idx")
    scalar = ls.plan_index_segment_merge(uri, "id_idx")
    assert scalar.tasks == () and scalar.index_type == "BTREE" and scalar.column == "id"
