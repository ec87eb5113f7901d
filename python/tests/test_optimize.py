"""optimize: a thousand deltas into one, on any executor, committed once,
with pylance's recall; cancellation leaves nothing behind; the CLI."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import shutil
import subprocess
import sys

import lance
import lancegen
import pytest

import lance_segmerge as ls
from lance_segmerge import _cli

DELTAS = 64
# Three of 300 neighbours (30 queries x 10); the epsilon keeps 3/300 itself from failing on float rounding.
RECALL_TOL = 0.01 + 1e-9


@pytest.fixture(scope="module")
def deltas64(tmp_path_factory):
    root = tmp_path_factory.mktemp("opt")
    built = lancegen.build_with_deltas(str(root / "rq"), "IVF_RQ", n_deltas=DELTAS, delta_rows=60, base_rows=2000)
    ref = str(root / "pylance-optimized")
    shutil.copytree(built.uri, ref)
    lance.dataset(ref).optimize.optimize_indices(num_indices_to_merge=DELTAS + 1)
    assert len(lance.dataset(ref).describe_indices()[0].segments) == 1
    r_ref = lancegen.recall(lance.dataset(ref), built.vectors, lancegen.vectors(30, seed=6), k=10, nprobes=4)
    return built, r_ref


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    ray.init(num_cpus=2, object_store_memory=100 * 1024 * 1024, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed", reason="the dask extra is not installed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def _check(built, r_ref, uri, version, before_version):
    pds = lance.dataset(uri)
    assert pds.version == version == before_version + 1
    segs = pds.describe_indices()[0].segments
    assert len(segs) == 1 and sorted(segs[0].fragment_ids) == list(range(2 + DELTAS))
    r = lancegen.recall(pds, built.vectors, lancegen.vectors(30, seed=6), k=10, nprobes=4)
    assert abs(r - r_ref) <= RECALL_TOL, (r, r_ref)
    assert ls.cleanup(uri, 0, dry_run=True) == []  # no intermediate outputs left


@pytest.mark.parametrize("executor", ["local", "processes", "futures", "ray", "dask"])
def test_optimize_64_deltas(deltas64, tmp_path, executor, request):
    built, r_ref = deltas64
    uri = str(tmp_path / "ds")
    shutil.copytree(built.uri, uri)
    before = ls.open(uri).version
    seen = []
    kwargs = {"executor": executor, "max_workers": 2}
    if executor == "futures":
        pool = cf.ThreadPoolExecutor(2)
        kwargs["executor"] = pool
    elif executor == "ray":
        request.getfixturevalue("ray_cluster")
    elif executor == "dask":
        request.getfixturevalue("dask_client")
    v = ls.optimize(uri, "vec_idx", fan_in=8, progress=seen.append, **kwargs).version
    if executor == "futures":
        pool.shutdown()
    _check(built, r_ref, uri, v, before)
    levels = sorted({p.level for p in seen})
    assert levels == [1, 2, 3]  # 65 segments, fan-in 8: 9 tasks, then 2, then 1
    assert seen[-1].tasks_done == seen[-1].tasks_total


def test_large_segment_is_merged_once(deltas64, tmp_path, monkeypatch):
    # The base (2000 rows) is larger than an average task of the deltas:
    # it waits for the last level instead of being rewritten at each of the
    # three levels.
    built, r_ref = deltas64
    uri = str(tmp_path / "ds")
    shutil.copytree(built.uri, uri)
    before = ls.open(uri).version
    segs = ls.open(uri).list_index_segments("vec_idx")
    base = max(segs, key=lambda s: s.num_rows)
    assert base.num_rows > sum(s.num_rows for s in segs) / 9
    calls = []
    merge_task = ls._jobs.merge_task

    def recording(job):
        calls.append([s["uuid"] for s in job["task"]["segments"]])
        return merge_task(job)

    monkeypatch.setattr(ls._jobs, "merge_task", recording)
    seen = []
    v = ls.optimize(uri, "vec_idx", fan_in=8, progress=seen.append).version
    _check(built, r_ref, uri, v, before)
    with_base = [i for i, c in enumerate(calls) if base.uuid in c]
    assert with_base == [len(calls) - 1], calls  # once, in the final merge
    assert sorted({p.level for p in seen}) == [1, 2, 3]


def test_optimize_keeps_untouched_base(deltas64, tmp_path):
    built, _ = deltas64
    uri = str(tmp_path / "ds")
    shutil.copytree(built.uri, uri)
    base = ls.open(uri).list_index_segments("vec_idx")[0]
    ls.optimize(uri, "vec_idx", max_segments_to_merge=DELTAS, fan_in=16, progress=False)
    segs = ls.open(uri).list_index_segments("vec_idx")
    assert len(segs) == 2 and segs[0].uuid == base.uuid


# Before Python 3.12 a process pool's manager thread raised (and printed)
# InvalidStateError for each cancelled future it found when its workers
# died: the cancel must not leave it any.
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_cancel_mid_merge_leaves_the_dataset(deltas64, tmp_path):
    built, _ = deltas64
    uri = str(tmp_path / "ds")
    shutil.copytree(built.uri, uri)
    before = ls.open(uri)
    dirs_before = set(os.listdir(os.path.join(uri, "_indices")))

    def interrupt(p: ls.OptimizeProgress) -> None:
        if p.tasks_done >= 2:
            raise KeyboardInterrupt

    for executor in ("local", "processes"):
        with pytest.raises(KeyboardInterrupt):
            ls.optimize(uri, "vec_idx", executor=executor, max_workers=2, fan_in=4, progress=interrupt)
        assert ls.open(uri).version == before.version
        assert ls.open(uri).list_index_segments("vec_idx", with_stats=False) == before.list_index_segments(
            "vec_idx", with_stats=False
        )
        leftovers = set(os.listdir(os.path.join(uri, "_indices"))) - dirs_before
        # Whatever a killed worker left, cleanup finds and removes it.
        ls.cleanup(uri, 0)
        assert ls.cleanup(uri, 0, dry_run=True) == []
        assert set(os.listdir(os.path.join(uri, "_indices"))) == dirs_before, leftovers
    lance.dataset(uri).to_table(nearest={"column": "vec", "q": built.vectors[0], "k": 3})


def test_cleanup_grace_period_and_committed(deltas64, tmp_path):
    built, _ = deltas64
    uri = str(tmp_path / "ds")
    shutil.copytree(built.uri, uri)
    segs = ls.open(uri).list_index_segments("vec_idx")
    orphan = ls.merge_existing_index_segments(uri, segs[1:4])
    assert ls.cleanup(uri, 3600) == []  # too young
    listed = ls.cleanup(uri, 0, dry_run=True)
    assert [o["uuid"] for o in listed] == [orphan.uuid] and not listed[0]["removed"]
    assert os.path.isdir(os.path.join(uri, "_indices", orphan.uuid))
    removed = ls.cleanup(uri, 0)
    assert removed[0]["removed"] and not os.path.exists(os.path.join(uri, "_indices", orphan.uuid))
    # Committed segments (in any version) are never orphans.
    assert all(os.path.isdir(os.path.join(uri, "_indices", s.uuid)) for s in segs)
    with pytest.raises(ls.InvalidInputError):
        ls.cleanup(uri, -1)


def test_cli(deltas64, tmp_path, capsys):
    built, _ = deltas64
    uri = str(tmp_path / "ds")
    shutil.copytree(built.uri, uri)
    assert _cli.main(["ls", uri, "--index", "vec_idx"]) == 0
    out = capsys.readouterr().out
    assert f"{DELTAS + 1} segments" in out and "IVF_RQ" in out
    assert _cli.main(["plan", uri, "--index", "vec_idx", "--segments-per-task", "16", "--json"]) == 0
    plan = ls.MergePlan.from_json(capsys.readouterr().out)
    assert len(plan.tasks) == 5
    assert _cli.main(["optimize", uri, "--index", "vec_idx", "--fan-in", "16", "--no-progress"]) == 0
    assert f"{DELTAS + 1} segments -> 1" in capsys.readouterr().out
    assert _cli.main(["cleanup", uri, "--older-than", "0s"]) == 0
    assert "no orphaned" in capsys.readouterr().out
    # One exit code per error class.
    assert _cli.main(["ls", str(tmp_path / "missing")]) == 4
    assert _cli.main(["plan", uri, "--index", "vec_idx", "--segments-per-task", "1"]) == 3
    assert _cli.main(["ls", uri, "--index", "nope"]) == 4
    # The console entry point and python -m work from a shell.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    p = subprocess.run([sys.executable, "-m", "lance_segmerge", "ls", uri, "--json"], capture_output=True, text=True, env=env)
    assert p.returncode == 0 and len(json.loads(p.stdout)) == 1


def test_optimize_to_several_segments(deltas64, tmp_path):
    built, r_ref = deltas64
    uri = str(tmp_path / "ds")
    shutil.copytree(built.uri, uri)
    v = ls.optimize(uri, "vec_idx", fan_in=8, target_segments=3, progress=False).version
    pds = lance.dataset(uri)
    segs = pds.describe_indices()[0].segments
    assert pds.version == v and len(segs) == 3
    frags = sorted(f for s in segs for f in s.fragment_ids)
    assert frags == list(range(2 + DELTAS))
    r = lancegen.recall(pds, built.vectors, lancegen.vectors(30, seed=6), k=10, nprobes=4)
    # Three segments each probe nprobes partitions, so recall may only rise above one merged index's.
    assert r >= r_ref - RECALL_TOL, (r, r_ref)
    assert ls.cleanup(uri, 0, dry_run=True) == []
    with pytest.raises(ls.InvalidInputError, match="target_segments"):
        ls.optimize(uri, "vec_idx", target_segments=0)


@pytest.mark.parametrize(
    "rows, per_task, target, expect",
    [
        ([5000] + [100] * 10, 4, 1, ["s0"]),  # the base waits for the last level
        ([100] * 11, 4, 1, []),  # nothing stands out
        ([1000, 900] + [10] * 8, 4, 1, ["s0", "s1"]),  # two large ones, largest first
        ([1000, 10, 10], 2, 2, []),  # skipping would end the tree with an unmerged segment
        ([1000, 10], 2, 1, []),  # fewer than two left to merge
        ([None, 10, 10, 10, 10], 2, 1, []),  # unknown row counts never skip
    ],
)
def test_defer_large(rows, per_task, target, expect):
    from types import SimpleNamespace

    from lance_segmerge.distributed import _defer_large

    segs = [SimpleNamespace(uuid=f"s{i}", num_rows=r) for i, r in enumerate(rows)]
    tasks = tuple(SimpleNamespace(segments=tuple(segs[i : i + per_task])) for i in range(0, len(segs), per_task))
    carried, rest = _defer_large(tasks, per_task, target)  # type: ignore[arg-type]
    assert [s.uuid for s in carried] == expect
    assert [s.uuid for s in rest] == [s.uuid for s in segs if s.uuid not in expect]
