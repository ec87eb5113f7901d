"""NGRAM segments merged by us, checked against real Lance: pylance 14.0.2
writes an NGRAM index and one optimize delta per append (with deletes);
our optimize merges them (a tree: merged segments merge again) and
commits; every `contains` filter returns exactly the rows it returns after
pylance's own optimize_indices on a copy, pylance's plan uses the index,
and verify_index checks the merged segment's tokens and posting lists."""

from __future__ import annotations

import shutil

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.file import LanceFileReader

import lance_segmerge as ls

ROWS = 3000
APPENDS = 4
WORDS = ["alpha", "beta", "gamma", "delta", "épsilon", "zeta", "theta", "kappa", "lambda", "omicron"]
FILTERS = ["contains(s, 'lph')", "contains(s, 'mma')", "contains(s, 'psi')", "contains(s, 'ta 1')",
           "contains(s, 'x') OR s IS NULL", "contains(s, 'kappa 42')"]


def _table(start: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    k = np.arange(start, start + ROWS)
    text = [None if x % 53 == 0 else f"{WORDS[rng.integers(0, 10)]} {x % 997} {WORDS[x % 10]}" for x in k]
    return pa.table({"id": pa.array(k), "s": pa.array(text)})


@pytest.fixture(scope="module")
def deltas(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("ngram") / "t")
    ds = lance.write_dataset(_table(0, 0), uri)
    ds.create_scalar_index("s", "NGRAM")
    for a in range(APPENDS):
        ds = lance.write_dataset(_table(ROWS * (a + 1), a + 1), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(uri).delete("id % 89 = 0")
    return uri


@pytest.fixture
def pair(deltas, tmp_path):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(deltas, ours)
    shutil.copytree(deltas, theirs)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=APPENDS + 1)
    return ours, theirs


def _answers(uri: str) -> dict[str, list[int]]:
    ds = lance.dataset(uri)
    return {f: sorted(ds.to_table(filter=f, columns=["id"])["id"].to_pylist()) for f in FILTERS}


def _tokens(uri: str, seg: ls.IndexSegment) -> int:
    return LanceFileReader(f"{uri}/_indices/{seg.uuid}/ngram_postings.lance").read_all().to_table().num_rows


def test_optimize_merges_ngram_segments_and_pylance_answers_as_after_its_own(pair):
    ours, theirs = pair
    before = ls.open(ours).list_index_segments("s_idx")
    assert len(before) == 1 + APPENDS and {s.index_type for s in before} == {"NGRAM"}
    ls.optimize(ours, "s_idx", fan_in=2, progress=False)  # three levels: merged segments merge again
    after = ls.open(ours).list_index_segments("s_idx")
    assert len(after) == 1 and after[0].index_type == "NGRAM"
    ds = lance.dataset(ours)
    assert set(after[0].fragment_ids) == {f.fragment_id for f in ds.get_fragments()}
    # The merged segment holds each token once: as many as pylance's own merge.
    (theirs_seg,) = ls.open(theirs).list_index_segments("s_idx")
    assert _tokens(ours, after[0]) == _tokens(theirs, theirs_seg)
    answers = _answers(ours)
    assert answers == _answers(theirs)
    assert all(answers.values()), {f: len(a) for f, a in answers.items()}
    for f in FILTERS[:4]:
        assert "ScalarIndexQuery" in ds.scanner(filter=f).explain_plan(), f
    ds.validate()
    rep = ls.verify_index(ours, "s_idx")
    assert rep.index_type == "NGRAM" and [s.verdict for s in rep.segments] == ["clean"]
    checks = {c.name: c.verdict for c in rep.segments[0].checks}
    assert checks["structure"] == "ok" and checks["row_ids"] == "ok"


def test_plan_merge_commit_by_hand_then_delta_then_maintain(pair):
    ours, theirs = pair
    plan = ls.plan_index_segment_merge(ours, "s_idx", segments_per_task=3)
    assert plan.index_type == "NGRAM" and len(plan.tasks) == 2
    merged = [ls.merge_existing_index_segments(ours, t) for t in plan.tasks]
    ls.commit_existing_index_segments(ours, "s_idx", "s", merged, replaces=plan.sources)
    assert len(ls.open(ours).list_index_segments("s_idx")) == 2
    assert _answers(ours) == _answers(theirs)
    for uri in (ours, theirs):
        lance.write_dataset(_table(ROWS * 10, 99), uri, mode="append")
        lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=10)
    rep = ls.maintain(ours, "s_idx", policy="all")
    assert rep.committed and rep.segments_after == 1
    assert _answers(ours) == _answers(theirs)
    lance.dataset(ours).validate()


def test_stable_row_ids_updates_and_deletes(tmp_path):
    """On a dataset with stable row ids pylance 14.0.2 writes stable ids
    into NGRAM postings (a delta over fragment 2 holds ids of "fragment"
    0). An update moves a row to a new fragment with the same id: only the
    input covering the new fragment still owns it, so the old text's
    tokens drop it; deleted rows are dropped too. pylance then answers as
    after its own merge."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")

    def tab(start: int, n: int, word: str = "") -> pa.Table:
        k = np.arange(start, start + n)
        return pa.table({"id": pa.array(k), "s": pa.array([f"{word or WORDS[x % 10]} {x % 97}" for x in k])})

    ds = lance.write_dataset(tab(0, 1500), ours, enable_stable_row_ids=True)
    ds.create_scalar_index("s", "NGRAM")
    for a in range(2):
        lance.write_dataset(tab(1500 + 500 * a, 500), ours, mode="append")
        lance.dataset(ours).optimize.optimize_indices(num_indices_to_merge=0)
    delta = ls.open(ours).list_index_segments("s_idx")[-1]
    postings = LanceFileReader(f"{ours}/_indices/{delta.uuid}/ngram_postings.lance").read_all().to_table()["posting_list"].to_pylist()
    assert list(delta.fragment_ids) == [2] and {int.from_bytes(p[8:12], "little") for p in postings} == {0}
    lance.dataset(ours).merge_insert("id").when_matched_update_all().execute(tab(100, 200, word="quokka"))
    lance.dataset(ours).optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(ours).delete("id % 11 = 0")
    shutil.copytree(ours, theirs)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=10)
    ls.optimize(ours, "s_idx", fan_in=2, progress=False)
    assert len(ls.open(ours).list_index_segments("s_idx")) == 1
    filters = ["contains(s, 'quok')", "contains(s, 'alpha')", "contains(s, 'mma 1')", "contains(s, 'lambda 9')"]
    got = {f: sorted(lance.dataset(ours).to_table(filter=f, columns=["id"])["id"].to_pylist()) for f in filters}
    assert got == {f: sorted(lance.dataset(theirs).to_table(filter=f, columns=["id"])["id"].to_pylist()) for f in filters}
    assert got["contains(s, 'quok')"] == [i for i in range(100, 300) if i % 11]
    checks = {c.name: c.verdict for c in ls.verify_index(ours, "s_idx").segments[0].checks}
    assert checks["structure"] == "ok" and checks["row_ids"] == "skipped"
