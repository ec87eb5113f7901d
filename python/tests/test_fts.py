"""Full-text (INVERTED) segments merged by us, checked against real Lance:
pylance 14.0.2 writes an INVERTED index and one optimize delta per append
(with deletes); our optimize merges them into one segment of one
partition and commits; every full-text query (terms, several terms,
phrases, with and without a limit) returns exactly the rows and BM25
scores it returns after pylance's own optimize_indices on a copy, merged
segments merge again, and verify_index checks every posting list."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.file import LanceFileReader

import lance_segmerge as ls
from lance_segmerge import _jobs

WORDS = ("lance index segment merge token posting vector table column query quickly jumps running "
         "brown fox lazy dogs résumé naïve café über straße Ünïcödé data engineer billion rows").split()
QUERIES = ["fox", "lance index", "merge segment token", "résumé", "running dogs", "nothing_here",
           "data engineer billion", "café"]
PHRASES = ['"lance index"', '"brown fox"', '"fox brown"', '"quickly jumps running"']


def _table(start: int, n: int, seed: int, skew: float = 0.0) -> pa.Table:
    rng = np.random.default_rng(seed)
    p = np.ones(len(WORDS))
    p[: int(len(WORDS) * skew)] += 4 * skew  # later appends favour some words
    p /= p.sum()
    text = []
    for i in range(n):
        if i % 97 == 0:
            text.append(None)
        elif i % 89 == 0:
            text.append("the of and")  # stop words only: not a document
        else:  # "lance" in 90% of documents: lists of over 32 blocks
            lead = "lance " if i % 10 else ""
            text.append(lead + " ".join(rng.choice(WORDS, rng.integers(1, 14), p=p)))
    return pa.table({"id": pa.array(np.arange(start, start + n)), "text": pa.array(text)})


def _build(uri: str, base: int, appends: int, size: int, **params) -> None:
    ds = lance.write_dataset(_table(0, base, 0), uri)
    ds.create_scalar_index("text", "INVERTED", **params)
    for a in range(appends):
        ds = lance.write_dataset(_table(base + a * size, size, a + 1, skew=a / appends), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)


@pytest.fixture(scope="module")
def deltas(tmp_path_factory):
    """6,000 rows (posting lists of over 32 blocks of 128: level-1 impacts),
    positions kept, 5 appends, then deletes."""
    uri = str(tmp_path_factory.mktemp("fts") / "t")
    _build(uri, 6000, 5, 400, with_position=True)
    lance.dataset(uri).delete("id % 31 = 0 OR (id >= 6000 AND id < 6050)")
    return uri


def _pair(src: str, tmp_path: Path) -> tuple[str, str]:
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(src, ours)
    shutil.copytree(src, theirs)
    return ours, theirs


def _answers(uri: str, queries: list[str]) -> dict:
    """Every query's rows with their scores, all and the top 10."""
    ds = lance.dataset(uri)
    out = {}
    for q in queries:
        t = ds.to_table(full_text_query=q, columns=["id"])
        out[q] = sorted(zip(t["id"].to_pylist(), t["_score"].to_pylist()))
        top = ds.to_table(full_text_query=q, columns=["id"], limit=10)
        out[q + " top10"] = sorted(zip(top["id"].to_pylist(), top["_score"].to_pylist()))
    return out


def _index_files(uri: str, name: str = "text_idx") -> int:
    ds = lance.dataset(uri)
    return sum(len(list((Path(uri) / "_indices" / ix["uuid"]).iterdir())) for ix in ds.list_indices() if ix["name"] == name)


def _close(a: dict, b: dict) -> None:
    """Equal rows with equal scores; for a top 10, equal scores and equal
    rows above the tenth score (Lance breaks ties arbitrarily)."""
    assert a.keys() == b.keys()
    for q in a:
        if q.endswith(" top10"):
            sa, sb = sorted(s for _, s in a[q]), sorted(s for _, s in b[q])
            np.testing.assert_allclose(sa, sb, rtol=1e-6, err_msg=q)
            if sa:
                cut = sa[0] * (1 + 1e-6)
                assert {r for r, s in a[q] if s > cut} == {r for r, s in b[q] if s > cut}, q
            continue
        assert [r for r, _ in a[q]] == [r for r, _ in b[q]], q
        np.testing.assert_allclose([s for _, s in a[q]], [s for _, s in b[q]], rtol=1e-6, err_msg=q)


def test_merge_answers_as_pylance_merge(deltas, tmp_path):
    ours, theirs = _pair(deltas, tmp_path)
    segs = ls.open(ours).list_index_segments("text_idx")
    assert len(segs) == 6 and {s.index_type for s in segs} == {"INVERTED"}
    assert sum(s.num_rows for s in segs) > 0
    files_before = _index_files(ours)
    before = _answers(ours, QUERIES + PHRASES)

    ls.optimize(ours, "text_idx", executor="local")
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=10)

    segs = ls.open(ours).list_index_segments("text_idx")
    assert len(segs) == 1
    assert _index_files(ours) == 4 < files_before
    got, want = _answers(ours, QUERIES + PHRASES), _answers(theirs, QUERIES + PHRASES)
    _close(got, want)
    _close(got, before)  # a merge changes nothing a query sees
    assert any(len(v) > 4096 for v in got.values())  # lists beyond 32 blocks
    # The same files, in the same Lance file version, as pylance's merge.
    assert _versions(ours) == _versions(theirs) == {f: (2, 2) for f in _versions(theirs)}
    assert set(_versions(ours)) == {"metadata.lance", "part_0_tokens.lance", "part_0_docs.lance", "part_0_invert.lance"}
    # The same documents as pylance's merge, in the same order (rows deleted
    # inside a live fragment stay: BM25's statistics count them).
    assert _docs(ours) == _docs(theirs)

    rep = ls.verify_index(ours, "text_idx")
    assert rep.clean, rep
    checks = {c.name: c.verdict for c in rep.segments[0].checks}
    assert checks["structure"] == "ok" and checks["row_ids"] == "ok", checks


def test_merge_in_spilled_buckets(deltas, tmp_path):
    """A memory budget far below the index's size: the posting lists go
    through a spill file in many buckets (gokernel/fts's tests check the
    files equal those of a merge in memory and that no spill file is left),
    and pylance answers exactly as after its own merge."""
    ours, theirs = _pair(deltas, tmp_path)
    handle = ls.open(ours)
    segs = handle.list_index_segments("text_idx")
    merged = ls.merge_existing_index_segments(handle, segs, memory_bytes=4096)
    ls.commit_existing_index_segments(handle, "text_idx", "text", [merged], replaces=segs)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=10)
    assert _docs(ours) == _docs(theirs)
    _close(_answers(ours, QUERIES + PHRASES), _answers(theirs, QUERIES + PHRASES))
    with pytest.raises(ls.InvalidInputError, match="memory_bytes"):
        ls.merge_existing_index_segments(handle, segs, memory_bytes=0)


def test_maintain_and_optimize_give_the_merges_their_memory_budget(deltas, tmp_path, monkeypatch):
    """memory_bytes reaches every merge of a maintain_all (and optimize)
    run, and the spilled merge answers as pylance's own."""
    ours, theirs = _pair(deltas, tmp_path)
    seen: list = []
    real = _jobs._merge

    def spy(ds, segments, **kw):
        seen.append(kw.get("memory_bytes"))
        return real(ds, segments, **kw)

    monkeypatch.setattr(_jobs, "_merge", spy)
    (rep,) = ls.maintain_all(ours, index_names=["text_idx"], policy="all", executor="local", memory_bytes=4096)
    assert rep.segments_after == 1 and seen and set(seen) == {4096}
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=10)
    assert _docs(ours) == _docs(theirs)
    _close(_answers(ours, QUERIES + PHRASES), _answers(theirs, QUERIES + PHRASES))
    for call in (ls.optimize, ls.maintain):
        with pytest.raises(ls.InvalidInputError, match="memory_bytes"):
            call(ours, "text_idx", memory_bytes=0)


def _versions(uri: str) -> dict[str, tuple[int, int]]:
    ds = lance.dataset(uri)
    (ix,) = [i for i in ds.list_indices() if i["name"] == "text_idx"]
    out = {}
    for f in (Path(uri) / "_indices" / ix["uuid"]).iterdir():
        m = LanceFileReader(str(f)).metadata()
        out[f.name] = (m.major_version, m.minor_version)
    return out


def _meta(uri: str) -> dict[bytes, bytes]:
    """The schema metadata of the index's (one) segment's metadata.lance."""
    ds = lance.dataset(uri)
    (ix,) = [i for i in ds.list_indices() if i["name"] == "text_idx"]
    return dict(LanceFileReader(str(Path(uri) / "_indices" / ix["uuid"] / "metadata.lance")).read_all().to_table().schema.metadata)


def _docs(uri: str) -> list[tuple[int, int]]:
    ds = lance.dataset(uri)
    (ix,) = [i for i in ds.list_indices() if i["name"] == "text_idx"]
    t = LanceFileReader(str(Path(uri) / "_indices" / ix["uuid"] / "part_0_docs.lance")).read_all().to_table()
    return list(zip(t["_rowid"].to_pylist(), t["_num_tokens"].to_pylist()))


def test_merged_segments_merge_again(deltas, tmp_path):
    """Our merged segment, two more pylance deltas, then our merge again:
    the answers of pylance doing the same on its copy."""
    ours, theirs = _pair(deltas, tmp_path)
    ls.optimize(ours, "text_idx", executor="local")
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=10)
    for uri in (ours, theirs):
        for a in range(2):
            ds = lance.write_dataset(_table(20000 + 300 * a, 300, 50 + a, skew=0.8), uri, mode="append")
            ds.optimize.optimize_indices(num_indices_to_merge=0)
    assert len(ls.open(ours).list_index_segments("text_idx")) == 3
    ls.optimize(ours, "text_idx", executor="local")
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=10)
    assert len(ls.open(ours).list_index_segments("text_idx")) == 1
    _close(_answers(ours, QUERIES + PHRASES), _answers(theirs, QUERIES + PHRASES))


@pytest.mark.parametrize("params", [
    {},  # pylance's defaults: no positions
    {"base_tokenizer": "whitespace", "stem": False, "remove_stop_words": False, "lower_case": False, "ascii_folding": False},
    {"format_version": 3, "with_position": True},  # FTS format 3, 128-document blocks
], ids=["defaults", "whitespace-raw", "format3"])
def test_analyzer_parameters_are_kept(params, tmp_path):
    src = str(tmp_path / "src")
    _build(src, 1500, 3, 200, **params)
    ours, theirs = _pair(src, tmp_path)
    ls.optimize(ours, "text_idx", executor="local")
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=10)
    queries = QUERIES + (["Ünïcödé", "straße"] if "base_tokenizer" in params else []) + (PHRASES if params.get("with_position") else [])
    _close(_answers(ours, queries), _answers(theirs, queries))
    mine, pylance = _meta(ours), _meta(theirs)
    assert json.loads(mine.pop(b"params")) == json.loads(pylance.pop(b"params"))
    assert mine == pylance  # format, block size, codecs, token set, partitions
    if not params:  # a phrase needs positions, in our merge as in pylance's
        with pytest.raises(Exception, match="position"):
            lance.dataset(ours).to_table(full_text_query='"lance index"')


def test_stable_row_ids(tmp_path):
    uri = str(tmp_path / "src")
    ds = lance.write_dataset(_table(0, 1200, 0), uri, enable_stable_row_ids=True)
    ds.create_scalar_index("text", "INVERTED", with_position=True)
    for a in range(3):
        ds = lance.write_dataset(_table(1200 + 200 * a, 200, a + 1), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(uri).delete("id % 7 = 0")
    ours, theirs = _pair(uri, tmp_path)
    ls.optimize(ours, "text_idx", executor="local")
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=10)
    _close(_answers(ours, QUERIES + PHRASES), _answers(theirs, QUERIES + PHRASES))


def test_maintain_all_brings_every_delta_to_one_segment(tmp_path):
    """A text column appended to 100 times, pylance's optimize after each
    append, next to a BTREE: one maintain_all brings each index to one
    segment, the index's file count drops from 4 per segment to 4, and
    pylance's answers and scores equal those of its own merge."""
    src = str(tmp_path / "src")
    ds = lance.write_dataset(_table(0, 300, 0), src)
    ds.create_scalar_index("text", "INVERTED", with_position=True)
    ds.create_scalar_index("id", "BTREE")
    for a in range(100):
        ds = lance.write_dataset(_table(300 + 30 * a, 30, a + 1, skew=a / 100), src, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
    ours, theirs = _pair(src, tmp_path)
    files_before = _index_files(ours)
    assert files_before == 4 * 101
    reports = ls.maintain_all(ours, policy="all", executor="local", progress=False)
    assert {r.index_name: (r.segments_before, r.segments_after) for r in reports} == {"text_idx": (101, 1), "id_idx": (101, 1)}
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=101)
    assert _index_files(ours) == 4
    _close(_answers(ours, QUERIES + PHRASES), _answers(theirs, QUERIES + PHRASES))
    assert ls.verify_index(ours, "text_idx").clean
