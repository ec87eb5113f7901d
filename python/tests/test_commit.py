"""commit_existing_index_segments in Go: pylance reads our versions as its
own, validation writes nothing, concurrent writers never lose a version."""

from __future__ import annotations

import glob
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import time

import lance
import lancegen
import pytest

import lance_segmerge as ls

K = 10


def versions(uri: str) -> list[int]:
    ds = ls.open(uri)
    return list(range(1, ds.latest_version + 1))


def segment_view(pds) -> list[tuple[str, list[int]]]:
    (desc,) = [d for d in pds.describe_indices() if d.name == "vec_idx"]
    return sorted((s.uuid, sorted(s.fragment_ids)) for s in desc.segments)


def q():
    return lancegen.vectors(20, seed=77)


@pytest.mark.parametrize("v2_paths", [True, False], ids=["v2-names", "v1-names"])
@pytest.mark.parametrize("index_type", ["IVF_PQ", "IVF_RQ", "IVF_SQ", "IVF_FLAT"])
def test_commit_matches_pylance_commit(tmp_path, index_type, v2_paths):
    built = lancegen.build_with_deltas(str(tmp_path / "src"), index_type, v2_manifest_paths=v2_paths)
    ds = ls.open(built.uri)
    segs = ds.list_index_segments("vec_idx")
    merged = ds.merge_existing_index_segments(segs[1:])
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(built.uri, ours)
    shutil.copytree(built.uri, theirs)
    before = ls.open(ours).version

    v = ls.commit_existing_index_segments(ours, "vec_idx", "vec", [merged], replaces=segs[1:]).version
    lance.dataset(theirs).commit_existing_index_segments("vec_idx", "vec", [merged.to_lance_index()])
    assert v == before + 1
    p_ours, p_theirs = lance.dataset(ours), lance.dataset(theirs)
    assert p_ours.version == v
    assert segment_view(p_ours) == segment_view(p_theirs) == sorted([(segs[0].uuid, list(segs[0].fragment_ids)), (merged.uuid, [2, 3, 4])])
    assert lancegen.recall(p_ours, built.vectors, q(), k=K, nprobes=4) == lancegen.recall(p_theirs, built.vectors, q(), k=K, nprobes=4)
    # The transaction reads back as a CreateIndex replacing exactly the sources.
    txn = p_ours.read_transaction(v)
    op = txn.operation
    assert [i.uuid for i in op.new_indices] == [merged.uuid]
    assert sorted(i.uuid for i in op.removed_indices) == sorted(s.uuid for s in segs[1:])
    assert txn.read_version == before
    # Naming scheme kept; the hint follows.
    names = os.listdir(os.path.join(ours, "_versions"))
    if v2_paths:
        assert f"{2**64 - 1 - v:020d}.manifest" in names
    else:
        assert f"{v}.manifest" in names
    hint = os.path.join(ours, "_versions", "latest_version_hint.json")
    assert open(hint).read() == f'{{"version":{v}}}'
    assert not [n for n in names if n.startswith((".tmp", "d"))]
    # Older versions still open and query.
    old = lance.dataset(ours, version=before)
    assert len(segment_view(old)) == 4
    assert lancegen.recall(old, built.vectors, q(), k=K, nprobes=4) > 0
    # pylance can append, optimize and compact on top of our version.
    lance.write_dataset(lancegen.table(lancegen.vectors(200, seed=3), 100_000), ours, mode="append")
    lance.dataset(ours).optimize.optimize_indices(num_indices_to_merge=0)
    assert len(segment_view(lance.dataset(ours))) == 3
    lance.dataset(ours).optimize.compact_files()
    final = lance.dataset(ours)
    assert final.count_rows() == 2000 + 900 + 200
    assert lancegen.recall(final, built.vectors, q(), k=K, nprobes=4) > 0
    # And we read what pylance wrote after us.
    assert {s.uuid for s in ls.open(ours).list_index_segments("vec_idx")} == {u for u, _ in segment_view(final)}


def test_commit_uncommitted_segments_like_pylance(uncommitted_pq, tmp_path):
    built, segs = uncommitted_pq
    ours = str(tmp_path / "ours")
    shutil.copytree(built.uri, ours)
    v1 = ls.commit_existing_index_segments(ours, "vec_idx", "vec", segs[:4]).version
    v2 = ls.commit_existing_index_segments(ours, "vec_idx", "vec", segs[4:]).version
    assert v2 == v1 + 1
    assert segment_view(lance.dataset(ours)) == sorted((s.uuid, sorted(s.fragment_ids)) for s in segs)
    # A merge of two committed segments replaces exactly them (coverage rule).
    m = ls.merge_existing_index_segments(ours, segs[:2])
    ls.commit_existing_index_segments(ours, "vec_idx", "vec", [m])
    view = segment_view(lance.dataset(ours))
    assert (m.uuid, [0, 1]) in view and len(view) == 5


def _new_version_written(uri: str, before_versions: int, before_txns: int) -> bool:
    return (len(versions(uri)) != before_versions) or len(os.listdir(os.path.join(uri, "_transactions"))) != before_txns


@pytest.mark.parametrize(
    "case,exc,match",
    [
        ("empty", ls.InvalidInputError, "at least one"),
        ("duplicate", ls.InvalidInputError, "appears twice"),
        ("overlap", ls.InvalidInputError, "both cover fragment"),
        ("column", ls.InvalidInputError, "column \"nope\" does not exist"),
        ("missing-files", ls.NotFoundError, "auxiliary.idx"),
        ("truncated", ls.CorruptError, "auxiliary.idx"),
        ("orphan", ls.InvalidInputError, "orphan"),
        ("replaces-unknown", ls.InvalidInputError, "is not a segment of version"),
        ("drops-coverage", ls.InvalidInputError, "do not cover fragments"),
    ],
)
def test_refused_commits_write_nothing(uncommitted_pq, tmp_path, case, exc, match):
    built, segs = uncommitted_pq
    uri = str(tmp_path / "ds")
    shutil.copytree(built.uri, uri)
    ls.commit_existing_index_segments(uri, "vec_idx", "vec", segs[:2])
    m01 = ls.merge_existing_index_segments(uri, segs[:2])
    ds = ls.open(uri)
    column, replaces = "vec", None
    if case == "empty":
        batch = []
    elif case == "duplicate":
        batch = [segs[3], segs[3]]
    elif case == "overlap":
        batch = [m01, segs[1]]
    elif case == "column":
        batch, column = [segs[3]], "nope"
    elif case == "missing-files":
        shutil.rmtree(os.path.join(uri, "_indices", segs[3].uuid))
        batch = [segs[3]]
    elif case == "truncated":
        p = os.path.join(uri, "_indices", segs[3].uuid, "auxiliary.idx")
        with open(p, "r+b") as f:
            f.truncate(os.path.getsize(p) // 2)
        batch = [segs[3]]
    elif case == "orphan":
        # With {0,1} committed as one segment, a segment over {1,2} would
        # leave fragment 0 behind.
        batch = [ls.merge_existing_index_segments(uri, [segs[1], segs[2]])]
        ls.commit_existing_index_segments(uri, "vec_idx", "vec", [m01])
        ds = ls.open(uri)
    elif case == "replaces-unknown":
        batch, replaces = [segs[3]], [segs[4].uuid]
    else:  # drops-coverage: replace {0},{1} with a segment over {0} only
        batch, replaces = [segs[5]], [segs[0].uuid, segs[1].uuid]
    nv, nt = len(versions(uri)), len(os.listdir(os.path.join(uri, "_transactions")))
    with pytest.raises(exc, match=match):
        ds.commit_existing_index_segments("vec_idx", column, batch, replaces=replaces)
    assert not _new_version_written(uri, nv, nt)
    lance.dataset(uri).to_table(nearest={"column": "vec", "q": q()[0], "k": 3})


def test_conflicts_with_concurrent_commits(uncommitted_pq, tmp_path):
    built, segs = uncommitted_pq
    uri = str(tmp_path / "ds")
    shutil.copytree(built.uri, uri)
    ls.commit_existing_index_segments(uri, "vec_idx", "vec", segs)
    planned = ls.open(uri)
    m01 = planned.merge_existing_index_segments(segs[:2])
    m23 = planned.merge_existing_index_segments(segs[2:4])

    # pylance appends and deletes rows meanwhile: compatible, rebased over.
    lance.write_dataset(lancegen.table(lancegen.vectors(50, seed=9), 50_000), uri, mode="append")
    lance.dataset(uri).delete("id = 7")
    v = planned.commit_existing_index_segments("vec_idx", "vec", [m01], replaces=segs[:2]).version
    assert v == planned.version + 3

    # Another writer replaced a source: conflict.
    other = ls.merge_existing_index_segments(uri, [segs[3], segs[4]])
    ls.commit_existing_index_segments(uri, "vec_idx", "vec", [other], replaces=[segs[3], segs[4]])
    with pytest.raises(ls.ConflictError, match="source segment"):
        planned.commit_existing_index_segments("vec_idx", "vec", [m23], replaces=segs[2:4])

    # Compaction rewrote covered fragments: conflict.
    replanned = ls.open(uri)
    m5 = replanned.merge_existing_index_segments([ls.IndexSegment.from_lance_index(segs[5]), m01])
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=10_000)
    with pytest.raises(ls.ConflictError, match="compaction|no longer"):
        replanned.commit_existing_index_segments("vec_idx", "vec", [m5], replaces=[segs[5].uuid, m01.uuid])
    lance.dataset(uri).to_table(nearest={"column": "vec", "q": q()[0], "k": 3})


# -- many writers at once ----------------------------------------------------


def _committer(uri: str, group: list[str], out: "mp.Queue") -> None:
    import lance_segmerge as ls

    try:
        ds = ls.open(uri, version=2)
        segs = {s.uuid: s for s in ds.list_index_segments("vec_idx")}
        m = ds.merge_existing_index_segments([segs[u] for u in group])
        v = ds.commit_existing_index_segments("vec_idx", "vec", [m], replaces=group).version
        out.put(("ok", tuple(group), v, m.uuid))
    except ls.ConflictError as e:
        out.put(("conflict", tuple(group), str(e), None))
    except Exception as e:  # pragma: no cover - reported below
        out.put(("error", tuple(group), repr(e), None))


def _appender(uri: str, stop: "mp.Event") -> None:
    import lance
    import lancegen

    i = 0
    while not stop.wait(0.02):  # an append every ~20 ms, as long as the test runs
        lance.write_dataset(lancegen.table(lancegen.vectors(20, seed=i), 1_000_000 + 20 * i), uri, mode="append")
        i += 1


def test_eight_concurrent_committers_and_a_writer(tmp_path):
    x = lancegen.vectors(16 * 200, seed=12)
    uri = str(tmp_path / "ds")
    pds = lance.write_dataset(lancegen.table(x), uri, max_rows_per_file=200)
    kw = lancegen.train_shared_model(pds, "IVF_PQ")
    segs = [pds.create_index_uncommitted("vec", "IVF_PQ", name="vec_idx", fragment_ids=[f], **kw) for f in range(16)]
    lance.dataset(uri).commit_existing_index_segments("vec_idx", "vec", segs)
    assert lance.dataset(uri).version == 2
    u = [s.uuid for s in segs]
    disjoint = [u[0:2], u[2:4], u[4:6], u[6:8]]
    conflicting = [u[8:10], u[9:11], u[12:14], u[12:15]]
    ctx = mp.get_context("spawn")
    out, stop = ctx.Queue(), ctx.Event()
    writer = ctx.Process(target=_appender, args=(uri, stop))
    writer.start()
    procs = [ctx.Process(target=_committer, args=(uri, g, out)) for g in disjoint + conflicting]
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
    stop.set()
    writer.join(60)
    assert not [r for r in results if r[0] == "error"], results
    by_group = {r[1]: r for r in results}
    for g in disjoint:
        assert by_group[tuple(g)][0] == "ok", by_group[tuple(g)]
    for a, b in ((u[8:10], u[9:11]), (u[12:14], u[12:15])):
        kinds = sorted([by_group[tuple(a)][0], by_group[tuple(b)][0]])
        assert kinds == ["conflict", "ok"], (by_group[tuple(a)], by_group[tuple(b)])
    committed = [r[2] for r in results if r[0] == "ok"]
    assert len(set(committed)) == len(committed), "two commits claimed one version"
    # Every version is there, opens and queries in pylance.
    latest = lance.dataset(uri).version
    assert sorted(ls.open(uri).latest_version for _ in range(1)) == [latest]
    for v in range(1, latest + 1):
        d = lance.dataset(uri, version=v)
        if v >= 2:
            d.to_table(nearest={"column": "vec", "q": x[0], "k": 3})
    # The final index holds every winner's merged segment and covers all 16
    # original fragments exactly once.
    view = segment_view(lance.dataset(uri))
    frags = sorted(f for _, fs in view for f in fs)
    assert frags == sorted(set(frags)) and set(range(16)) <= set(frags)
    for r in results:
        if r[0] == "ok":
            assert any(uuid == r[3] for uuid, _ in view)


# -- kill -9 during commits -----------------------------------------------------

# Merges the last two segments and commits, until one segment is left.
_KILL_LOOP = r"""
import sys, lance_segmerge as ls
uri = sys.argv[1]
while True:
    ds = ls.open(uri)
    segs = ds.list_index_segments("vec_idx", with_stats=False)
    if len(segs) < 2:
        break
    a, b = segs[-2], segs[-1]
    m = ds.merge_existing_index_segments([a, b])
    ds.commit_existing_index_segments("vec_idx", "vec", [m], replaces=[a, b])
"""


def test_sigkill_during_commit_leaves_a_readable_dataset(tmp_path):
    trials = int(os.environ.get("LANCE_SEGMERGE_KILL_TRIALS", "6"))
    x = lancegen.vectors(24 * 100, seed=13)
    base = str(tmp_path / "base")
    pds = lance.write_dataset(lancegen.table(x), base, max_rows_per_file=100)
    kw = lancegen.train_shared_model(pds, "IVF_FLAT")
    segs = [pds.create_index_uncommitted("vec", "IVF_FLAT", name="vec_idx", fragment_ids=[f], **kw) for f in range(24)]
    lance.dataset(base).commit_existing_index_segments("vec_idx", "vec", segs)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    import random

    rng = random.Random(7)
    for trial in range(trials):
        uri = str(tmp_path / f"t{trial}")
        shutil.copytree(base, uri)
        p = subprocess.Popen([sys.executable, "-c", _KILL_LOOP, uri], env=env)
        time.sleep(rng.uniform(0.3, 2.0))
        p.send_signal(signal.SIGKILL)
        p.wait()
        d = lance.dataset(uri)  # opens at whatever version landed last
        d.to_table(nearest={"column": "vec", "q": x[0], "k": 5})
        view = segment_view(d)
        frags = sorted(f for _, fs in view for f in fs)
        assert frags == list(range(24)), f"trial {trial}: coverage {frags}"
        assert not glob.glob(os.path.join(uri, "_versions", "d*"))
        ls.open(uri).list_index_segments("vec_idx")
