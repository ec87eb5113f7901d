"""Issue 26's acceptance test: a table with a vector index and one index of
each scalar type we merge (BTREE, BITMAP, LABEL_LIST, ZONEMAP, BLOOMFILTER,
NGRAM), appended to 50 times with pylance 14.0.2's
``optimize_indices(num_indices_to_merge=0)`` after each append (so 51
segments per index) and with rows deleted on the way, is brought to one
segment per index by one ``maintain_all`` call; pylance answers every
filter as before the merge and as after its own ``optimize_indices`` on a
copy, its plans still use the indices, and the vector index's recall is as
good as after pylance's merge."""

from __future__ import annotations

import shutil
import time

import lance
import lancegen
import numpy as np
import pyarrow as pa
import pytest

import lance_segmerge as ls

DIM = 16
BASE_ROWS = 1000
ROWS = 200
APPENDS = 50
#: appends after which rows are deleted (of the rows written so far)
DELETES = {17: "id % 97 = 0", 38: "id % 89 = 0"}
#: index name -> (column, pylance index type)
INDICES = {
    "vec_idx": ("vec", "IVF_PQ"),
    "k_idx": ("k", "BTREE"),
    "cat_idx": ("cat", "BITMAP"),
    "tags_idx": ("tags", "LABEL_LIST"),
    "z_idx": ("z", "ZONEMAP"),
    "b_idx": ("b", "BLOOMFILTER"),
    "text_idx": ("text", "NGRAM"),
}
SCALAR = [n for n in INDICES if n != "vec_idx"]
#: filters that pylance answers with each scalar index
FILTERS = {
    "k_idx": ["k = 5", "k > 480", "k < -490", "k BETWEEN -3 AND 3", "k IN (1, 7, 300)", "k IS NULL",
              "k >= 499 OR k IS NULL"],
    "cat_idx": ["cat = 'cat-7'", "cat IN ('cat-1', 'cat-33', 'nope')", "cat IS NULL", "cat IS NOT NULL"],
    "tags_idx": ["array_has_any(tags, ['t1', 't6'])", "array_has_all(tags, ['t0', 't4'])", "array_contains(tags, 't2')"],
    "z_idx": ["z > 30000", "z < 600", "z BETWEEN 9000 AND 9300", "z = 3000", "z IS NULL"],
    "b_idx": ["b = 'name-000300'", "b IN ('name-001234', 'name-010998', 'nope')", "b = 'name-010001'", "b IS NULL"],
    "text_idx": ["contains(text, 'lph')", "contains(text, 'mma')", "contains(text, 'ta 1')", "contains(text, 'kappa 42')"],
}
#: filters whose answers are compared too, without a plan check (pylance
#: answers them from the data, or mixes two indices)
MORE_FILTERS = ["tags IS NULL", "NOT array_has_any(tags, ['t0'])", "text IS NULL", "k > 480 AND cat = 'cat-3'",
                "b = 'name-000097'"]  # a deleted row: nothing
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda", "omicron"]


def _table(start: int, n: int, seed: int) -> tuple[pa.Table, np.ndarray]:
    rng = np.random.default_rng(seed)
    i = np.arange(start, start + n)
    x = lancegen.vectors(n, dim=DIM, seed=seed)
    t = pa.table({
        "id": pa.array(i),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), DIM),
        "k": pa.array(rng.integers(-500, 500, n), mask=rng.random(n) < 0.05),
        "cat": pa.array([None if v % 31 == 0 else f"cat-{v % 40}" for v in i]),
        "tags": pa.array([None if v % 23 == 0 else [f"t{v % 3}", f"t{v % 7}", f"t{v % 5}"] for v in i]),
        "z": pa.array(i * 3, mask=rng.random(n) < 0.02),
        "b": pa.array([None if v % 43 == 0 else f"name-{v:06d}" for v in i]),
        "text": pa.array([None if v % 53 == 0 else f"{WORDS[rng.integers(0, 10)]} {v % 997} {WORDS[v % 10]}" for v in i]),
    })
    return t, x


def _segments(uri: str) -> dict[str, int]:
    """Segments per index, as pylance describes them."""
    return {d.name: len(d.segments) for d in lance.dataset(uri).describe_indices()}


def _answers(uri: str) -> dict[str, list[int]]:
    ds = lance.dataset(uri)
    filters = [f for fs in FILTERS.values() for f in fs] + MORE_FILTERS
    return {f: sorted(ds.to_table(filter=f, columns=["id"])["id"].to_pylist()) for f in filters}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The table after 50 appends, each indexed by a pylance delta, with
    deletes on the way; its vectors (deleted rows moved far away, so that
    they are never true neighbours) and pylance's answers before any
    merge."""
    t0 = time.perf_counter()
    uri = str(tmp_path_factory.mktemp("maintain-all") / "t")
    tab, x = _table(0, BASE_ROWS, 0)
    ds = lance.write_dataset(tab, uri)
    ds.create_index("vec", "IVF_PQ", name="vec_idx", num_partitions=2, num_sub_vectors=4)
    for name, (col, kind) in INDICES.items():
        if name != "vec_idx":
            ds.create_scalar_index(col, kind, name=name)
    xs = [x]
    for a in range(APPENDS):
        tab, x = _table(BASE_ROWS + a * ROWS, ROWS, a + 1)
        xs.append(x)
        ds = lance.write_dataset(tab, uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
        if a in DELETES:
            lance.dataset(uri).delete(DELETES[a])
    x = np.concatenate(xs)
    ids = np.arange(len(x))
    live = np.ones(len(x), bool)
    for a, f in DELETES.items():  # a delete reaches the rows written so far
        m = int(f.split("%")[1].split("=")[0])
        live &= ~((ids % m == 0) & (ids < BASE_ROWS + (a + 1) * ROWS))
    assert lance.dataset(uri).count_rows() == int(live.sum())
    x = np.where(live[:, None], x, np.float32(1e6)).astype(np.float32)
    print(f"built {len(x)} rows, {APPENDS} appends: {time.perf_counter() - t0:.1f}s")
    return uri, x, _answers(uri)


@pytest.fixture(scope="module")
def merged(built, tmp_path_factory):
    """Copy A merged by pylance's optimize_indices (everything), copy B by
    one lance_segmerge.maintain_all call (policy "all"); B's reports, by
    index name."""
    uri, _, _ = built
    root = tmp_path_factory.mktemp("maintain-all-copies")
    a, b = str(root / "a"), str(root / "b")
    shutil.copytree(uri, a)
    shutil.copytree(uri, b)
    t0 = time.perf_counter()
    lance.dataset(a).optimize.optimize_indices(num_indices_to_merge=APPENDS + 1)
    t1 = time.perf_counter()
    # One call for the whole table: every index, policy "all" (every
    # segment into one).
    reports = {rep.index_name: rep for rep in ls.maintain_all(b, policy="all")}
    t2 = time.perf_counter()
    print(f"pylance optimize_indices: {t1 - t0:.1f}s; lance_segmerge.maintain_all: {t2 - t1:.1f}s")
    return a, b, reports


def test_every_index_has_a_segment_per_append_before(built):
    uri, _, answers = built
    assert _segments(uri) == {name: 1 + APPENDS for name in INDICES}
    types = {s.index_type for name in SCALAR for s in ls.open(uri).list_index_segments(name)}
    assert types == {kind for name, (_, kind) in INDICES.items() if name != "vec_idx"}
    # Every filter of an index selects rows (the deleted row's selects none).
    assert all(answers[f] for fs in FILTERS.values() for f in fs), {f: len(v) for f, v in answers.items()}
    assert answers["b = 'name-000097'"] == []


def test_one_maintain_all_call_leaves_one_segment_per_index(built, merged):
    _, b, reports = merged
    assert sorted(reports) == sorted(INDICES)
    v = None
    for name, rep in reports.items():
        assert rep.committed, name
        assert (rep.segments_before, rep.segments_after) == (1 + APPENDS, 1), name
        assert rep.segments_merged == 1 + APPENDS and rep.conflicts == 0, name
        assert v is None or rep.read_version == v, name  # each pass commits one version on top of the last
        v = rep.version
    assert lance.dataset(b).version == v
    assert _segments(b) == {name: 1 for name in INDICES}
    ds = lance.dataset(b)
    frags = {f.fragment_id for f in ds.get_fragments()}
    for name in INDICES:
        (seg,) = ls.open(b).list_index_segments(name)
        assert seg.index_type == INDICES[name][1], name
        assert set(seg.fragment_ids) == frags, name
    # Deleted rows are dropped from the merged segments that count rows.
    for name in ("k_idx", "cat_idx", "vec_idx"):
        assert ls.open(b).list_index_segments(name)[0].num_rows == ds.count_rows(), name
    ds.validate()
    # A second call has nothing left to merge.
    again = ls.maintain_all(b, policy="all")
    assert len(again) == len(INDICES) and not any(r.committed for r in again)


def test_pylance_answers_every_filter_as_before_and_as_after_its_own_merge(built, merged):
    _, _, before = built
    a, b, _ = merged
    assert _segments(a) == {name: 1 for name in INDICES}  # pylance merged everything too
    ref = _answers(a)
    assert ref == before
    got = _answers(b)
    for f in got:
        assert got[f] == before[f], f"{f}: {len(got[f])} rows after maintain, {len(before[f])} before"
    # pylance's plans on B use every scalar index.
    ds = lance.dataset(b)
    for name, fs in FILTERS.items():
        for f in fs:
            plan = ds.scanner(filter=f, columns=["id"]).explain_plan()
            assert "ScalarIndexQuery" in plan and f"@{name}" in plan, (f, plan)


def test_vector_recall_is_as_after_pylances_merge(built, merged):
    uri, x, _ = built
    a, b, _ = merged
    queries = lancegen.vectors(20, dim=DIM, seed=777)
    # PQ codes alone (4 sub-vectors of 16 dims: a coarse recall), and with
    # the candidates refined on the raw vectors, read by the merged row ids.
    for q in ({"nprobes": 2}, {"nprobes": 2, "refine_factor": 10}):
        r_before, r_ref, r_ours = (lancegen.recall(lance.dataset(u), x, queries, k=10, **q) for u in (uri, a, b))
        print(f"recall@10 {q}: before {r_before:.3f}, pylance merge {r_ref:.3f}, maintain {r_ours:.3f}")
        assert r_ours >= r_ref - 0.05, (q, r_before, r_ref, r_ours)
        assert r_ours >= r_before - 0.05, (q, r_before, r_ref, r_ours)
    assert r_ours >= 0.8, r_ours  # refined: the merged index finds the true neighbours
    got = lance.dataset(b).to_table(nearest={"column": "vec", "q": queries[0], "k": 10, "nprobes": 2}, columns=["id"])
    assert got.num_rows == 10
    assert (x[got["id"].to_numpy()] < 1e5).all()  # no deleted row comes back
    plan = lance.dataset(b).scanner(nearest={"column": "vec", "q": queries[0], "k": 10}).explain_plan()
    assert "ANNSubIndex: name=vec_idx" in plan and "deltas=1" in plan, plan  # one segment searched


def test_merged_segments_verify_clean(merged):
    _, b, _ = merged
    for name in INDICES:
        rep = ls.verify_index(b, name)
        assert [s.verdict for s in rep.segments] == ["clean"], (name, [(c.name, c.verdict) for s in rep.segments for c in s.checks])
