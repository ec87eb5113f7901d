"""Drift and retraining against real Lance: health names a drifted index
(and not a healthy one), reindex retrains and swaps it in one commit that
pylance reads, with the recall of pylance's own fresh build, survives
SIGKILL and concurrent appends with nothing lost, maintain(retrain="auto")
acts on the verdict, and every commit records its provenance in the
transaction pylance reads."""

from __future__ import annotations

import concurrent.futures as cf
import json
import logging
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_segmerge as ls
from lance_segmerge import _ffi, _jobs
from lance_segmerge._cdata import CStructs
from lance_segmerge._build import _train, fragment_rows
from lance_segmerge.reindexing import _extend

DIM = 32
CENTERS = 16
BASE_ROWS = 8000
APPEND_ROWS = 1500
APPENDS = 4
NPROBES = 4


def _centers() -> np.ndarray:
    return (np.random.default_rng(7).normal(size=(CENTERS, DIM)) * 3).astype(np.float32)


def _draw(n: int, shift: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    c = _centers()[rng.integers(0, CENTERS, n)] + shift
    return (c + rng.normal(size=(n, DIM))).astype(np.float32)


def _table(x: np.ndarray, start: int) -> pa.Table:
    return pa.table({"id": pa.array(np.arange(start, start + len(x), dtype=np.int64)),
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), DIM)})


def _write(uri: str, shift: float) -> np.ndarray:
    """A base index (IVF_PQ, 16 partitions, trained on the base rows) and
    one pylance optimize delta per append; appends move by ``shift`` each."""
    parts = [_draw(BASE_ROWS, 0.0, 1)]
    ds = lance.write_dataset(_table(parts[0], 0), uri)
    ds.create_index("vec", "IVF_PQ", num_partitions=16, num_sub_vectors=8)
    n = BASE_ROWS
    for i in range(APPENDS):
        x = _draw(APPEND_ROWS, shift * (i + 1), 10 + i)
        parts.append(x)
        ds = lance.write_dataset(_table(x, n), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
        n += len(x)
    return np.concatenate(parts)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("drift")
    out = {}
    for name, shift in (("drifted", 1.5), ("steady", 0.0)):
        uri = str(root / name)
        out[name] = (uri, _write(uri, shift))
    return out


@pytest.fixture
def copy(made, tmp_path):
    n = [0]

    def make(name: str) -> tuple[str, np.ndarray]:
        uri, vecs = made[name]
        n[0] += 1
        dst = str(tmp_path / f"{name}{n[0]}")
        shutil.copytree(uri, dst)
        return dst, vecs

    return make


def _recall_recent(ds: lance.LanceDataset, vecs: np.ndarray, k: int = 10, nq: int = 100) -> float:
    """recall@k at NPROBES of queries drawn from the newest rows, against
    numpy brute force over every row."""
    qs = vecs[-nq * 13 :: 13][:nq]
    hit = 0
    for q in qs:
        truth = set(np.argsort(((vecs - q) ** 2).sum(axis=1))[:k].tolist())
        got = ds.to_table(nearest={"column": "vec", "q": q, "k": k, "nprobes": NPROBES}, columns=["id"])["id"].to_pylist()
        hit += len(truth & set(got))
    return hit / (k * len(qs))


def _indexed_rows(uri: str) -> int:
    return sum(s.num_rows or 0 for s in ls.open(uri).list_index_segments("vec_idx"))


# -- health ------------------------------------------------------------------------


def test_health_names_the_drifted_index_and_not_the_steady_one(copy):
    drifted, _ = copy("drifted")
    steady, _ = copy("steady")
    # 512 queries per era: the recall drop's standard error is then about
    # 0.012, so a steady table's sampling noise stays well under the
    # degrading threshold (0.05).
    bad = ls.health(drifted, "vec_idx", queries=512)
    good = ls.health(steady, "vec_idx", queries=512)
    assert bad.verdict == "retrain", bad.to_text()
    assert bad.reasons and bad.needs_retrain
    assert bad.recall_drop > good.recall_drop + 0.1
    assert bad.residual_ratio > 1.35 > good.residual_ratio
    assert good.verdict == "ok", good.to_text()
    for rep in (bad, good):
        assert rep.index_type == "IVF_PQ" and rep.metric == "l2" and rep.column == "vec"
        assert rep.num_rows == BASE_ROWS + APPENDS * APPEND_ROWS and rep.unindexed_rows == 0
        assert rep.rows_since_training == APPENDS * APPEND_ROWS
        assert rep.training_version == 1
        assert len(rep.segments) == 1 + APPENDS
        assert sum(s.num_rows for s in rep.segments) == rep.num_rows
        assert rep.num_partitions == 16 and rep.partition_cv >= 0 and rep.partition_max_over_mean >= 1
        assert dict(rep.thresholds)["recall_drop_retrain"] > 0
        # A table, JSON both ways.
        assert rep.to_arrow().num_rows == len(rep.segments)
        assert ls.HealthReport.from_json(rep.to_json()) == rep


def test_plot_health(copy):
    pytest.importorskip("matplotlib")
    uri, _ = copy("drifted")
    rep = ls.health(uri, "vec_idx")
    fig = ls.plot_health(rep)
    left, right = fig.axes[0], fig.axes[1]
    assert "retrain" in left.get_title()
    assert [b.get_height() for b in left.patches] == pytest.approx([rep.recall_trained, rep.recall_recent])
    assert len(right.patches) == len(rep.segments)
    with pytest.raises(ls.InvalidInputError):
        ls.plot_health("not a report")  # type: ignore[arg-type]


def test_the_training_era_survives_pylance_merges(copy):
    """pylance's optimize_indices merges its deltas into one segment that
    keeps the oldest input's dataset_version, so health still knows which
    rows came after training, and still names the drift."""
    uri, _ = copy("drifted")
    lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=APPENDS + 1)
    (seg,) = ls.open(uri).list_index_segments("vec_idx")
    assert seg.dataset_version == 1
    rep = ls.health(uri, "vec_idx", queries=512)
    assert rep.training_version == 1 and rep.rows_since_training == APPENDS * APPEND_ROWS
    assert rep.verdict == "retrain", rep.to_text()


def test_health_counts_unindexed_rows_and_refuses_bad_arguments(copy):
    uri, vecs = copy("steady")
    lance.write_dataset(_table(_draw(300, 0.0, 99), len(vecs)), uri, mode="append")
    rep = ls.health(uri, "vec_idx", sample_rows=4000, queries=16)
    assert rep.unindexed_rows == 300
    assert rep.sample_rows <= 4000 and rep.queries == 16
    with pytest.raises(ls.NotFoundError):
        ls.health(uri, "no_such_idx")
    with pytest.raises(ls.InvalidInputError, match="sample_rows"):
        ls.health(uri, "vec_idx", sample_rows=0)
    with pytest.raises(ls.InvalidInputError, match="k"):
        ls.health(uri, "vec_idx", k=-1)


def test_health_cli(copy):
    drifted, _ = copy("drifted")
    steady, _ = copy("steady")
    env = dict(os.environ)
    run = [sys.executable, "-m", "lance_segmerge", "health"]
    bad = subprocess.run(run + [drifted, "--index", "vec_idx", "--json"], capture_output=True, text=True, env=env)
    assert bad.returncode == 11, bad.stderr
    assert json.loads(bad.stdout)["verdict"] == "retrain"
    # 512 queries, as in the API test: at the default 128 a steady table's
    # sampling noise crossed the degrading threshold once in CI.
    good = subprocess.run(run + [steady, "--index", "vec_idx", "--queries", "512"], capture_output=True, text=True, env=env)
    assert good.returncode == 0, good.stderr
    assert "verdict: ok" in good.stdout


# -- reindex -------------------------------------------------------------------------


def test_reindex_recovers_the_recall_of_a_fresh_pylance_build(copy, tmp_path):
    uri, vecs = copy("drifted")
    before = _recall_recent(lance.dataset(uri), vecs)
    old = {s.uuid for s in ls.open(uri).list_index_segments("vec_idx")}
    v0 = lance.dataset(uri).version

    out = ls.reindex(lance.dataset(uri), "vec_idx", progress=False, seed=3)
    assert out.version == v0 + 1  # one commit; nothing was appended meanwhile
    ds = lance.dataset(uri)
    ours = _recall_recent(ds, vecs)
    segs = ls.open(uri).list_index_segments("vec_idx")
    assert not ({s.uuid for s in segs} & old)
    assert sum(s.num_rows for s in segs) == ds.count_rows()
    assert [i.name for i in ds.describe_indices()] == ["vec_idx"]
    ds.validate()

    # pylance's own fresh builds of the same table, same parameters; their
    # k-means is seeded afresh each time, so the mean of three.
    fresh = str(tmp_path / "fresh")
    shutil.copytree(uri, fresh)  # the same data
    runs = []
    for _ in range(3):
        lance.dataset(fresh).create_index("vec", "IVF_PQ", num_partitions=16, num_sub_vectors=8, replace=True)
        runs.append(_recall_recent(lance.dataset(fresh), vecs))
    theirs = sum(runs) / len(runs)
    print(f"recall@10 of recent rows at nprobes={NPROBES}: before {before:.3f}, reindex {ours:.3f}, pylance fresh {theirs:.3f}")
    # k-means from different seeds moves recall by about ±0.04 here
    # (measured over 5 seeds each: ours 0.527, pylance 0.521 on average);
    # our seed 3 gives 0.504.
    assert ours >= theirs - 0.07, (ours, runs)
    assert ours > before + 0.1, (ours, before)
    after = ls.health(uri, "vec_idx")
    assert after.verdict == "ok" and after.rows_since_training == 0  # trained on every row: nothing drifted


def test_reindex_records_provenance_that_pylance_reads(copy):
    uri, _ = copy("drifted")
    out = ls.reindex(uri, "vec_idx", progress=False, properties={"ticket": "OPS-1"})
    tx = lance.dataset(uri).read_transaction(out.version)
    props = dict(tx.transaction_properties or {})
    assert props["lance_segmerge.verb"] == "reindex" and props["ticket"] == "OPS-1"
    assert props["lance_segmerge.version"] == ls.__version__
    assert props["lance_segmerge.run"].startswith("reindex-")
    assert len(props["lance_segmerge.model"]) == 16 and props["lance_segmerge.model"] != props["lance_segmerge.previous_model"]
    assert int(props["lance_segmerge.training_rows"]) > 0 and int(props["lance_segmerge.sample_tasks"]) >= 1
    segs = ls.open(uri).list_index_segments("vec_idx", with_provenance=True)
    assert [s.committed_version for s in segs] == [out.version]
    assert segs[0].commit_operation == "CreateIndex" and dict(segs[0].commit_properties) == props
    # Round trip of the provenance group.
    assert ls.IndexSegment.from_dict(segs[0].to_dict()) == segs[0]
    # Bad properties are refused before anything runs.
    v = lance.dataset(uri).version
    for bad in ({"lance_segmerge.verb": "x"}, {"k": 1}, {"": "v"}, ["k", "v"]):
        with pytest.raises(ls.InvalidInputError, match="propert"):
            ls.reindex(uri, "vec_idx", progress=False, properties=bad)
    assert lance.dataset(uri).version == v


def test_optimize_and_commit_record_provenance(copy):
    uri, _ = copy("steady")
    ds = ls.optimize(uri, "vec_idx", progress=False, properties={"job": "nightly"})
    props = dict(lance.dataset(uri).read_transaction(ds.version).transaction_properties or {})
    assert props["lance_segmerge.verb"] == "optimize" and props["job"] == "nightly"
    plan_segs = ls.open(uri).list_index_segments("vec_idx", with_provenance=True)
    assert dict(plan_segs[0].commit_properties)["lance_segmerge.run"] == props["lance_segmerge.run"]
    # pylance's own commits carry none of ours.
    lance.write_dataset(_table(_draw(200, 0.0, 5), 10**6), uri, mode="append")
    lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    segs = ls.open(uri).list_index_segments("vec_idx", with_provenance=True)
    theirs = [s for s in segs if s.uuid != plan_segs[0].uuid]
    assert theirs and not any(k.startswith("lance_segmerge.") for k, _ in theirs[0].commit_properties)
    # A caller's commit of uncommitted segments.
    seg = ls.build_index_segment(uri, "vec", "IVF_PQ", [lance.dataset(uri).get_fragments()[-1].fragment_id],
                                 ls.read_index_model(uri, "vec_idx"), name="vec_idx")
    with pytest.raises(ls.InvalidInputError):
        ls.commit_existing_index_segments(uri, "vec_idx", "vec", [seg], replaces=[theirs[0].uuid], properties={"a": 1})
    out = ls.commit_existing_index_segments(uri, "vec_idx", "vec", [seg], replaces=[theirs[0].uuid], properties={"a": "b"})
    props = dict(lance.dataset(uri).read_transaction(out.version).transaction_properties or {})
    assert props["lance_segmerge.verb"] == "commit" and props["a"] == "b"


def test_the_training_sample_is_drawn_on_the_workers(copy):
    """Each worker draws its fragments' share of the sample, in proportion
    to their rows; one group draws exactly the sample the kernel draws in
    process, so the model is the same."""
    uri, _ = copy("steady")
    ds = ls.open(uri)
    frags = fragment_rows(ds)
    kw: dict = dict(metric="l2", num_partitions=16, num_sub_vectors=8, num_bits=8, sample_rate=32, max_iters=10,
                    fragment_ids=None, seed=5)
    here = _train(ds, "vec", "IVF_PQ", **kw)
    one = _train(ds, "vec", "IVF_PQ", **kw, groups=[[f for f, _ in frags]],
                 sample_on=lambda jobs: [_jobs.sample_task(j) for j in jobs])
    assert one.content_hash == here.content_hash and dict(one.params)["sample_tasks"] == 1
    want = dict(here.params)["sample_rows"]
    assert want == 256 * 32 < sum(n for _, n in frags)  # a sample, not the table
    with cf.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        split = _train(ds, "vec", "IVF_PQ", **kw, groups=[[f] for f, _ in frags],
                       sample_on=lambda jobs: list(pool.map(_jobs.sample_task, jobs)))
    got = dict(split.params)
    assert got["sample_tasks"] == len(frags) > 1
    assert want <= got["sample_rows"] <= want + len(frags)  # each share rounds up
    assert split.content_hash != here.content_hash and split.num_partitions == 16
    # A worker's share is bounded by the table it names.
    with pytest.raises(ls.InvalidInputError, match="more than"):
        _jobs.sample_task({"dataset": ds, "column": "vec", "fragment_ids": [f for f, _ in frags], "params": {"num_partitions": 16},
                           "of_rows": 10, "seed": 1})
    # The driver refuses a sample larger than its parameters draw, before reading it.
    big = CStructs().export(pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(70_000 * DIM, np.float32)), DIM))
    params = {"index_type": "IVF_FLAT", "metric": "l2", "num_partitions": 2, "sample_rate": 2}
    with pytest.raises(ls.InvalidInputError, match="where the parameters draw 4"):
        _ffi.run_operation("TrainModelOnSample", (json.dumps(params), json.dumps(big.pair()), json.dumps({})))
    assert big.released()


CHILD = r"""
import os, signal, sys
import lance_segmerge as ls
uri = sys.argv[1]
def progress(p):
    if p.level == 0 and p.tasks_done >= 2:
        os.kill(os.getpid(), signal.SIGKILL)
ls.reindex(uri, "vec_idx", fragments_per_task=1, progress=progress, seed=11)
"""


def test_reindex_survives_sigkill_and_resumes(copy, caplog):
    uri, vecs = copy("drifted")
    before = lance.dataset(uri)
    old = [s.uuid for s in ls.open(uri).list_index_segments("vec_idx")]
    p = subprocess.run([sys.executable, "-c", CHILD, uri], capture_output=True, text=True)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    # The old index is untouched; pylance queries it.
    after = lance.dataset(uri)
    assert after.version == before.version
    assert [s.uuid for s in ls.open(uri).list_index_segments("vec_idx")] == old
    after.to_table(nearest={"column": "vec", "q": vecs[0], "k": 5})
    # The rerun reuses the finished builds (same parameters) and commits.
    with caplog.at_level(logging.INFO, logger="lance_segmerge"):
        out = ls.reindex(uri, "vec_idx", fragments_per_task=1, progress=False, seed=11)
    reused = [r.getMessage() for r in caplog.records if "reused from the journal" in r.getMessage()]
    assert reused and not reused[0].startswith("reindex of vec_idx: 0 of"), reused
    assert out.version == before.version + 1
    ds = lance.dataset(uri)
    assert _indexed_rows(uri) == ds.count_rows()
    ds.validate()
    # Nothing is left behind: every directory under _indices is referenced
    # by some version.
    assert ls.cleanup(uri, older_than=0, dry_run=True) == []


def test_reindex_catches_up_rows_appended_while_it_runs(copy):
    uri, vecs = copy("drifted")
    extra = _draw(700, 9.0, 77)
    start = len(vecs)
    appended = []

    def progress(p):
        if p.level == 0 and not appended:
            lance.write_dataset(_table(extra, start), uri, mode="append")
            appended.append(True)

    v0 = lance.dataset(uri).version
    out = ls.reindex(uri, "vec_idx", progress=progress, fragments_per_task=2)
    assert appended
    ds = lance.dataset(uri)
    # The append, the swap, the catch-up delta.
    assert out.version == ds.version == v0 + 3
    assert ds.count_rows() == start + len(extra)
    assert _indexed_rows(uri) == ds.count_rows()
    segs = ls.open(uri).list_index_segments("vec_idx", with_provenance=True)
    assert len(segs) == 2
    caught = [s for s in segs if dict(s.commit_properties).get("lance_segmerge.catch_up") == "true"]
    assert len(caught) == 1 and caught[0].num_rows == len(extra)
    # The appended rows are found through the index.
    for i in (0, 350, 699):
        got = ds.to_table(nearest={"column": "vec", "q": extra[i], "k": 10, "nprobes": 16, "refine_factor": 20},
                          columns=["id"])["id"].to_pylist()
        assert start + i in got
    ds.validate()


@pytest.mark.parametrize("kind", ["IVF_HNSW_SQ", "IVF_HNSW_PQ"])
def test_reindex_rebuilds_an_hnsw_index_on_workers(tmp_path, kind):
    """IVF_HNSW_*: the workers draw the sample, pylance builds each group's
    segment on a worker with the centroids (and PQ codebook) trained here,
    our merge joins them (SQ: re-quantized to the union of pylance's
    per-segment bounds) and one commit swaps the index; rows appended
    meanwhile get a catch-up delta of pylance's optimize_indices (which
    keeps the index's SQ bounds)."""
    uri = str(tmp_path / "hnsw")
    pq = {"num_sub_vectors": 8} if kind.endswith("PQ") else {}
    base = _draw(3000, 0.0, 1)
    lance.write_dataset(_table(base, 0), uri, max_rows_per_file=500)
    lance.dataset(uri).create_index("vec", kind, num_partitions=8, m=12, ef_construction=80, **pq)
    moved = _draw(1500, 4.0, 2)
    ds = lance.write_dataset(_table(moved, len(base)), uri, mode="append", max_rows_per_file=500)
    ds.optimize.optimize_indices(num_indices_to_merge=0)
    vecs = np.concatenate([base, moved])
    before = _recall_recent(lance.dataset(uri), vecs)
    old = {s.uuid for s in ls.open(uri).list_index_segments("vec_idx")}
    m0 = ls.open(uri).list_index_segments("vec_idx")[0].hnsw_m
    late = _draw(300, 4.0, 3)
    appended: list[bool] = []

    def progress(p):
        if p.level == 0 and not appended:
            lance.write_dataset(_table(late, len(vecs)), uri, mode="append")
            appended.append(True)

    out = ls.reindex(uri, "vec_idx", num_partitions=16, executor="processes", max_workers=2, fragments_per_task=2,
                     progress=progress, seed=4)
    assert appended
    vecs = np.concatenate([vecs, late])
    ds = lance.dataset(uri)
    ds.validate()
    segs = ls.open(uri).list_index_segments("vec_idx", with_provenance=True)
    assert not ({s.uuid for s in segs} & old) and len(segs) == 2  # the swap, and the catch-up delta
    assert {s.index_type for s in segs} == {kind} and {s.num_partitions for s in segs} == {16}
    assert {s.hnsw_m for s in segs} == {m0}  # the graphs' parameters are the old index's
    assert sum(s.num_rows or 0 for s in segs) == ds.count_rows() == len(vecs)
    swap = next(s for s in segs if s.committed_version == out.version - 1)  # then pylance's catch-up delta
    props = dict(swap.commit_properties)
    assert props["lance_segmerge.verb"] == "reindex" and int(props["lance_segmerge.sample_tasks"]) == 5
    after = _recall_recent(ds, vecs)
    # pylance's own fresh build of the same table and kind
    fresh = str(tmp_path / "fresh")
    shutil.copytree(uri, fresh)
    runs = []
    for _ in range(2):  # seeded afresh each time: the mean of two
        lance.dataset(fresh).create_index("vec", kind, num_partitions=16, m=12, ef_construction=80, replace=True, **pq)
        runs.append(_recall_recent(lance.dataset(fresh), vecs))
    theirs = sum(runs) / len(runs)
    print(f"{kind} recall@10 of recent rows: before {before:.3f}, reindex {after:.3f}, pylance fresh {theirs:.3f}")
    # Measured: SQ 0.94 -> 0.963 (pylance 0.963). PQ 0.34 -> 0.567 at seed
    # 4; the PQ codebook's k-means start moves recall here, alike for both:
    # eight of our seeds gave 0.544-0.666 (mean 0.588), eight pylance
    # builds 0.535-0.619 (mean 0.592). A mean of two pylance builds reaches
    # 0.641 now and then, so the margin is 0.1, over three of that mean's
    # standard deviations.
    assert after > before and after >= theirs - 0.1, (before, after, runs)
    assert ls.verify_index(uri, "vec_idx").clean


@pytest.mark.parametrize("shift", [4.0, 0.0])
def test_maintain_retrains_a_drifted_hnsw_index(tmp_path, shift):
    """Of an IVF_HNSW_* index health measures the residuals with its IVF
    centroids (not the recall: the graphs are not searched here), and
    retrain="auto" reindexes it when they say so, not otherwise."""
    uri = str(tmp_path / "hnsw")
    lance.write_dataset(_table(_draw(3000, 0.0, 1), 0), uri, max_rows_per_file=500)
    lance.dataset(uri).create_index("vec", "IVF_HNSW_SQ", num_partitions=8)
    ds = lance.write_dataset(_table(_draw(1500, shift, 2), 3000), uri, mode="append", max_rows_per_file=500)
    ds.optimize.optimize_indices(num_indices_to_merge=0)
    h = ls.health(uri, "vec_idx")
    assert h.recall_drop == -1 and any(r.startswith("recall not measured") for r in h.reasons)
    rep = ls.maintain(uri, "vec_idx", retrain="auto", executor="local")
    if shift:
        assert h.verdict == "retrain" and h.residual_ratio > 1.35, h.reasons
        assert rep.reindexed and rep.health_verdict == "retrain"
    else:
        assert h.verdict == "ok" and h.residual_ratio < 1.15, h.reasons
        assert not rep.reindexed
    lance.dataset(uri).validate()
    assert _indexed_rows(uri) == 4500


def test_an_hnsw_reindex_survives_sigkill(tmp_path, caplog):
    """SIGKILL after two pylance builds: the old index is untouched; the
    rerun removes the crashed run's builds (an HNSW segment's model is not
    read back, so they are not reused), builds again and commits, leaving
    no orphan files."""
    uri = str(tmp_path / "hnsw")
    lance.write_dataset(_table(_draw(3000, 0.0, 1), 0), uri, max_rows_per_file=500)
    lance.dataset(uri).create_index("vec", "IVF_HNSW_SQ", num_partitions=4)
    old = {s.uuid for s in ls.open(uri).list_index_segments("vec_idx")}
    v = lance.dataset(uri).version
    p = subprocess.run([sys.executable, "-c", CHILD, uri], capture_output=True, text=True)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    assert lance.dataset(uri).version == v
    assert {s.uuid for s in ls.open(uri).list_index_segments("vec_idx")} == old
    crashed = set(os.listdir(os.path.join(uri, "_indices"))) - old
    assert len(crashed) >= 2  # the builds that finished
    with caplog.at_level(logging.INFO, logger="lance_segmerge"):
        ls.reindex(uri, "vec_idx", fragments_per_task=1, progress=False, seed=11)
    assert any("an IVF_HNSW_* build is not reused" in r.getMessage() for r in caplog.records)
    ds = lance.dataset(uri)
    ds.validate()
    new = {s.uuid for s in ls.open(uri).list_index_segments("vec_idx")}
    assert not (new & old) and ds.stats.index_stats("vec_idx")["num_indexed_rows"] == 3000
    assert not (crashed & set(os.listdir(os.path.join(uri, "_indices"))))  # removed, none committed


def test_reindex_refuses_what_it_cannot_rebuild(tmp_path):
    uri = str(tmp_path / "btree")
    ds = lance.write_dataset(_table(_draw(2000, 0.0, 3), 0), uri)
    ds.create_scalar_index("id", "BTREE")
    v = lance.dataset(uri).version
    with pytest.raises(ls.UnsupportedError, match="BTREE"):
        ls.reindex(uri, "id_idx", progress=False)
    assert lance.dataset(uri).version == v
    with pytest.raises(ls.NotFoundError):
        ls.reindex(uri, "nope_idx", progress=False)
    # pylance's builds would encode with our PQ codebook by inner product
    ds.create_index("vec", "IVF_HNSW_PQ", metric="dot", num_partitions=2, num_sub_vectors=8)
    v = lance.dataset(uri).version
    with pytest.raises(ls.UnsupportedError, match="dot-product IVF_HNSW_PQ"):
        ls.reindex(uri, "vec_idx", progress=False)
    assert lance.dataset(uri).version == v and not [d for d in os.listdir(os.path.join(uri, "_indices"))
                                                   if d not in {i["uuid"] for i in lance.dataset(uri).list_indices()}]


# -- maintain(retrain=...) -------------------------------------------------------------


def _partitions(uri: str) -> list[int]:
    return [int(s.num_partitions or 0) for s in ls.open(uri).list_index_segments("vec_idx")]


def test_maintain_extends_the_model_where_new_rows_went(copy):
    """retrain="auto" on drifted deltas: centroids are added where the new
    rows went and only those rows are re-encoded; pylance reads the
    extended index, validates it, and its recall of the newest rows beats
    merging without retraining by far."""
    drifted, vecs = copy("drifted")
    plain, _ = copy("drifted")
    rep = ls.maintain(drifted, "vec_idx", retrain="auto", executor="local")
    assert rep.residual_ratio > 1.1 and rep.partitions_added > 0
    assert not rep.reindexed and rep.health_verdict == ""  # extension sufficed: no health pass
    assert "centroids added" in rep.to_text()
    ls.maintain(plain, "vec_idx", retrain="never", executor="local")
    ds = lance.dataset(drifted)
    ds.validate()
    assert ls.verify_index(drifted, "vec_idx").clean  # rows placed by the narrower model are not "misplaced"
    parts = _partitions(drifted)
    assert max(parts) == 16 + rep.partitions_added
    assert ds.stats.index_stats("vec_idx")["num_indexed_rows"] == len(vecs)
    ours, never = _recall_recent(ds, vecs), _recall_recent(lance.dataset(plain), vecs)
    assert ours > never + 0.1, (ours, never)
    # The extension commit says what it did, and pylance reads it.
    props = [dict(ds.read_transaction(v).transaction_properties or {}) for v in range(2, ds.version + 1)]
    ext = [p for p in props if p.get("lance_segmerge.partitions_added")]
    assert len(ext) == 1 and int(ext[0]["lance_segmerge.partitions_added"]) == rep.partitions_added
    assert ext[0]["lance_segmerge.previous_partitions"] == "16"

    # health judges the model the index answers with (the widest), which
    # fits the moved rows now: judged by the base's 16 centroids they lay
    # 8-12 times as far as training-era rows. pylance trains the base
    # unseeded, so the ratio after the extension varies from run to run
    # (0.89-1.17 measured); a fixed bound at the "degrading" line flaked.
    h = ls.health(drifted, "vec_idx")
    assert h.num_partitions == max(parts) and h.verdict != "retrain", h.reasons
    assert h.residual_ratio < min(1.3, rep.residual_ratio / 4), (h.residual_ratio, rep.residual_ratio, h.reasons)

    # A steady table: the new rows fit; nothing is added.
    steady, _ = copy("steady")
    calm = ls.maintain(steady, "vec_idx", retrain="auto", executor="local")
    assert 0 < calm.residual_ratio < 1.1 and calm.partitions_added == 0 and not calm.reindexed
    assert max(_partitions(steady)) == 16


def test_pylance_goes_on_with_an_extended_model(copy):
    """After an extension pylance keeps working on the index as its own:
    a delta of its optimize uses the extended model, its own merge joins
    the delta to our segment, and its answers stay exact where they can
    be (a row queried with its own vector at one probe of IVF_FLAT would
    not be found if pylance assigned partitions otherwise than we did)."""
    drifted, vecs = copy("drifted")
    rep = ls.maintain(drifted, "vec_idx", retrain="auto", executor="local")
    assert rep.partitions_added > 0
    wide = max(_partitions(drifted))
    more = _draw(APPEND_ROWS, 1.5 * (APPENDS + 1), 99)
    ds = lance.write_dataset(_table(more, len(vecs)), drifted, mode="append")
    ds.optimize.optimize_indices(num_indices_to_merge=0)
    assert wide in _partitions(drifted) and len(_partitions(drifted)) >= 2
    ds = lance.dataset(drifted)
    ds.optimize.optimize_indices()  # pylance's own merge of our extended segment
    ds = lance.dataset(drifted)
    ds.validate()
    allv = np.concatenate([vecs, more])
    assert ds.stats.index_stats("vec_idx")["num_indexed_rows"] == len(allv)
    assert _recall_recent(ds, allv) > 0.3


@pytest.mark.parametrize("shift", [1.0, 12.0])
def test_an_extended_ivf_flat_index_finds_every_row_at_one_probe(tmp_path, shift):
    """New rows moved a little (1.0: many old rows are then nearer a new
    centroid than their own, and stay where they were) or far (12.0)."""
    uri = str(tmp_path / "flat")
    base = _draw(4000, 0.0, 1)
    ds = lance.write_dataset(_table(base, 0), uri)
    ds.create_index("vec", "IVF_FLAT", num_partitions=8)
    far = _draw(2000, shift, 2)
    ds = lance.write_dataset(_table(far, len(base)), uri, mode="append")
    ds.optimize.optimize_indices(num_indices_to_merge=0)
    # The extension alone first: two segments of one model, 8 and 8 + k
    # partitions wide, which pylance searches and verify takes as one.
    ext = _extend(ls.open(uri), "vec_idx")
    assert ext is not None and ext.added > 0 and sorted(_partitions(uri)) == [8, 8 + ext.added]
    assert ls.read_index_model(uri, "vec_idx").num_partitions == 8 + ext.added  # deltas we build use it
    more = _draw(500, shift, 3)
    ds = lance.write_dataset(_table(more, len(base) + len(far)), uri, mode="append")
    ds.optimize.optimize_indices(num_indices_to_merge=0)  # a third segment, of pylance's choosing
    three = ls.verify_index(uri, "vec_idx")
    assert three.clean and len(three.segments) == 3, three.to_text()
    assert all(s.check("model").verdict == "ok" for s in three.segments), three.to_text()
    far = np.concatenate([far, more])
    rep = ls.maintain(uri, "vec_idx", executor="local", policy="all")
    assert max(_partitions(uri)) == 8 + ext.added
    assert len(_partitions(uri)) == 1  # merged: the old segment's partitions are the first of the new model
    # Old rows nearer an appended centroid are rows placed by the narrower
    # model, not misplaced ones: the pre-commit check let the merge
    # through, and the full check says the same.
    rep = ls.verify_index(uri, "vec_idx", sample_rows=6000)
    assert rep.clean, rep.to_text()
    earlier = next(c for c in rep.segments[0].checks if "earlier_model" in c.numbers)
    assert (earlier.numbers["earlier_model"] > 0) == (shift < 5), earlier.numbers
    ds = lance.dataset(uri)
    allv = np.concatenate([base, far])
    # New rows were encoded with the extended model; old rows, with the
    # narrower one, are found at one probe only where no appended centroid
    # is nearer (the far shift: all of them).
    old_rows = list(range(0, len(base), 97)) if shift > 5 else []
    for i in old_rows + list(range(len(base), len(allv), 41)):
        got = ds.to_table(nearest={"column": "vec", "q": allv[i], "k": 1, "nprobes": 1}, columns=["id"])["id"].to_pylist()
        assert got == [i]


def test_maintain_retrains_when_health_says_so(copy, caplog):
    """With no new segments to compare (every delta merged without
    retraining), retrain="auto" asks health, which names the drift, and
    reindexes."""
    drifted, vecs = copy("drifted")
    steady, _ = copy("steady")
    for uri in (drifted, steady):
        ls.maintain(uri, "vec_idx", retrain="never", executor="local", policy="all")
        assert len(_partitions(uri)) == 1
    before = _recall_recent(lance.dataset(drifted), vecs)
    rep = ls.maintain(drifted, "vec_idx", retrain="auto", executor="local")
    assert rep.health_verdict == "retrain" and rep.health_reasons and rep.reindexed
    assert rep.reindex_version > 0 and rep.reindex_seconds > 0
    assert _recall_recent(lance.dataset(drifted), vecs) > before + 0.1
    assert ls.MaintainReport.from_json(rep.to_json()) == rep
    assert "reindexed" in rep.to_text()

    calm = ls.maintain(steady, "vec_idx", retrain="auto", executor="local")
    # (default queries: sampling noise may say "degrading", never "retrain")
    assert calm.health_verdict in ("ok", "degrading") and not calm.reindexed

    budget, _ = copy("drifted")
    ls.maintain(budget, "vec_idx", retrain="never", executor="local", policy="all")
    with caplog.at_level(logging.WARNING, logger="lance_segmerge"):
        small = ls.maintain(budget, "vec_idx", retrain="auto", retrain_max_rows=100, executor="local")
    assert small.health_verdict == "retrain" and not small.reindexed
    assert any("retrain_max_rows" in r.getMessage() for r in caplog.records)
    with pytest.raises(ls.InvalidInputError, match="retrain"):
        ls.maintain(budget, "vec_idx", retrain="sometimes")


def test_the_drift_example_names_the_drifted_index(tmp_path):
    """examples/drift.py, as a user runs it: health says retrain on the
    drifted index, and reindex brings the recall of the newest rows back."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, os.path.join(root, "examples", "drift.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    before, after = out.stdout.split("\nreindexed:")
    assert "verdict: retrain" in before and "verdict: retrain" not in after
    r0 = float(before.split("nprobes=4: ")[1].split()[0])
    r1 = float(after.split("nprobes=4: ")[1].split()[0])
    assert r1 > r0 + 0.15, (r0, r1)
    assert "'lance_segmerge.verb': 'reindex'" in after
