"""verify_index checks a scalar segment's keys against the column's data:
a sample of its (key, row) pairs is read back from the data files. A
segment whose files were swapped for another index's (same shape, so its
files, structure and row ids all check out) is found damaged by its keys,
naming the rows; pylance's own segments check clean."""

from __future__ import annotations

import os
import shutil

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_segmerge as ls


def _clean_keys(uri: str, name: str) -> dict:
    """verify_index's checks of the index's one segment, which must be
    clean with its keys check ok."""
    rep = ls.verify_index(uri, name)
    checks = {c.name: c for c in rep.segments[0].checks}
    assert rep.segments[0].verdict == "clean" and checks["keys"].verdict == "ok", rep
    return checks


def _swapped_keys(uri: str, src: str, dst: str, file: str):
    """Copies index src's segment file over index dst's and verifies dst:
    its structure still checks out, it is damaged by its keys; returns the
    keys check."""
    uuids = {n: ls.open(uri).list_index_segments(n)[0].uuid for n in (src, dst)}
    shutil.copy(f"{uri}/_indices/{uuids[src]}/{file}", f"{uri}/_indices/{uuids[dst]}/{file}")
    (seg,) = ls.verify_index(uri, dst).segments
    checks = {c.name: c for c in seg.checks}
    assert checks["structure"].verdict == "ok" and seg.verdict == "damaged"
    assert checks["keys"].damage == "keys_mismatch"
    return checks["keys"]


@pytest.fixture
def swapped(tmp_path):
    uri = str(tmp_path / "t")
    i = np.arange(3000)
    ds = lance.write_dataset(pa.table({"a": i % 50, "b": (i + 25) % 50,
                                       "s": [f"k{x % 50}" for x in i], "t": [f"k{(x + 25) % 50}" for x in i]}), uri)
    for col in "ab":
        ds.create_scalar_index(col, "BTREE")
    for col in "st":
        ds.create_scalar_index(col, "BITMAP")
    for name in ("a_idx", "s_idx"):
        rep = ls.verify_index(uri, name)
        assert [s.verdict for s in rep.segments] == ["clean"]
        assert {c.name: c.verdict for c in rep.segments[0].checks}["keys"] == "ok"
    uuids = {n: ls.open(uri).list_index_segments(n)[0].uuid for n in ("a_idx", "b_idx", "s_idx", "t_idx")}
    for src, dst in (("b_idx", "a_idx"), ("t_idx", "s_idx")):
        for f in os.listdir(f"{uri}/_indices/{uuids[src]}"):
            shutil.copy(f"{uri}/_indices/{uuids[src]}/{f}", f"{uri}/_indices/{uuids[dst]}/{f}")
    return uri


@pytest.mark.parametrize("name,shown", [("a_idx", "0x1900000000000000"), ("s_idx", '"k25"')])
def test_keys_that_are_not_the_data_are_damage(swapped, name, shown):
    rep = ls.verify_index(swapped, name)
    (seg,) = rep.segments
    checks = {c.name: c for c in seg.checks}
    assert checks["files"].verdict == "ok" and checks["structure"].verdict == "ok" and checks["row_ids"].verdict == "ok"
    assert seg.verdict == "damaged" and checks["keys"].verdict == "failed" and checks["keys"].damage == "keys_mismatch"
    # Row 0 holds 0 / "k0"; the swapped segment lists it under 25 / "k25".
    assert f"row 0 (fragment 0, offset 0) is under key {shown}" in checks["keys"].message


def test_zonemap_bounds_that_are_not_the_data_are_damage(tmp_path):
    """ZONEMAP zones are checked against the rows they span: pylance's own
    check clean; zones of another column swapped in (same shape, other
    values) are damage naming the zone and the value out of bounds."""
    uri = str(tmp_path / "z")
    i = np.arange(20_000)
    ds = lance.write_dataset(pa.table({"za": i, "zb": i + 50_000, "zs": [f"k{x:05d}" for x in i],
                                       "zt": [f"m{x:05d}" for x in i]}), uri)
    for col in ("za", "zb", "zs", "zt"):
        ds.create_scalar_index(col, "ZONEMAP")
    lance.dataset(uri).delete("za % 7 = 0")  # rows deleted since: bounds only get wider
    for name in ("za_idx", "zs_idx"):
        rep = ls.verify_index(uri, name)
        checks = {c.name: c for c in rep.segments[0].checks}
        assert rep.segments[0].verdict == "clean" and checks["keys"].verdict == "ok", rep
        assert checks["keys"].numbers["zones_checked"] == 3
    uuids = {n: ls.open(uri).list_index_segments(n)[0].uuid for n in ("za_idx", "zb_idx", "zs_idx", "zt_idx")}
    for src, dst in (("zb_idx", "za_idx"), ("zt_idx", "zs_idx")):
        shutil.copy(f"{uri}/_indices/{uuids[src]}/zonemap.lance", f"{uri}/_indices/{uuids[dst]}/zonemap.lance")
    # row 1 (0 is deleted) holds 1 / "k00001", below the swapped-in zone's 50000 / "m00000"
    for name, shown in (("za_idx", "its span holds 1, below its min 50000"), ("zs_idx", 'holds "k00001", below its min "m00000"')):
        (seg,) = ls.verify_index(uri, name).segments
        checks = {c.name: c for c in seg.checks}
        assert checks["structure"].verdict == "ok" and seg.verdict == "damaged"
        assert checks["keys"].damage == "keys_mismatch" and "zone 0 (fragment 0, rows 0+8192)" in checks["keys"].message
        assert shown in checks["keys"].message, checks["keys"].message


def test_label_list_labels_that_are_not_the_data_are_damage(tmp_path):
    """LABEL_LIST pairs are checked as labels of the row's list: pylance's
    own segment checks clean; another list column's labels swapped in are
    damage naming the row, its label and its list."""
    uri = str(tmp_path / "l")
    i = np.arange(3000)
    ds = lance.write_dataset(pa.table({
        "la": pa.array([[f"t{x % 40}", f"t{(x + 1) % 40}"] if x % 11 else None for x in i], pa.list_(pa.string())),
        "lb": pa.array([[f"t{(x + 20) % 40}"] for x in i], pa.list_(pa.string())),
    }), uri)
    for col in ("la", "lb"):
        ds.create_scalar_index(col, "LABEL_LIST")
    checks = _clean_keys(uri, "la_idx")
    assert checks["keys"].numbers["checked"] > 100
    keys = _swapped_keys(uri, "lb_idx", "la_idx", "bitmap_page_lookup.lance")
    # row 1 holds ["t1", "t2"]; lb's segment lists it under "t21"
    assert 'row 1 (fragment 0, offset 1) is under label "t21", its list is ["t1", "t2"]' in keys.message, keys.message


def test_bloomfilter_values_that_are_not_the_data_are_damage(tmp_path):
    """BLOOMFILTER zones are checked against the rows they span: every
    value must be in the zone's filter. pylance's own segment checks clean;
    another column's filters swapped in are damage naming the value."""
    uri = str(tmp_path / "b")
    i = np.arange(20_000)
    ds = lance.write_dataset(pa.table({"ba": i, "bb": i + 50_000}), uri)
    for col in ("ba", "bb"):
        ds.create_scalar_index(col, "BLOOMFILTER")
    checks = _clean_keys(uri, "ba_idx")
    assert checks["keys"].numbers["zones_checked"] == 3
    keys = _swapped_keys(uri, "bb_idx", "ba_idx", "bloomfilter.lance")
    assert "which its bloom filter does not" in keys.message, keys.message


def test_ngram_tokens_that_are_not_the_data_are_damage(tmp_path):
    """NGRAM pairs are checked as trigrams of the row's text: pylance's own
    segment checks clean; another column's postings swapped in are damage
    naming the row, its token and its text."""
    uri = str(tmp_path / "n")
    i = np.arange(3000)
    ds = lance.write_dataset(pa.table({"na": [f"alpha {x % 97} Größe" if x % 13 else None for x in i],
                                       "nb": [f"omega {x % 89}" for x in i]}), uri)
    for col in ("na", "nb"):
        ds.create_scalar_index(col, "NGRAM")
    checks = _clean_keys(uri, "na_idx")
    assert checks["keys"].numbers["checked"] > 20 and checks["keys"].numbers["unknown_characters"] == 0
    keys = _swapped_keys(uri, "nb_idx", "na_idx", "ngram_postings.lance")
    msg = keys.message
    assert "is under token" in msg and any(f'("{t}")' in msg for t in ("ome", "meg", "ega")), msg


def test_the_check_before_a_commit_samples_bitmaps(tmp_path):
    """The check before a commit decodes the bitmaps of at most 4,096 keys
    of a BITMAP segment, evenly spread (every other key of 6,000), and
    counts every key's rows from the bitmaps' headers: the same rows as
    verify_index, which decodes every key, and both clean on pylance's
    segment."""
    from lance_segmerge import _verify

    uri = str(tmp_path / "ds")
    n = 30_000
    keys = np.arange(n) % 6_000  # 6,000 keys of five rows each
    lance.write_dataset(pa.table({"k": pa.array(keys, pa.int64())}), uri, max_rows_per_file=10_000)
    lance.dataset(uri).create_scalar_index("k", "BITMAP", name="k_idx")
    ds = ls.open(uri)
    cheap = _verify.check_outputs(ds, ds.list_index_segments("k_idx"))
    full = ls.verify_index(uri, "k_idx")
    structure = {}
    for name, rep in (("cheap", cheap), ("full", full)):
        (seg,) = rep.segments
        assert seg.verdict == "clean", (name, seg)
        structure[name] = next(c for c in seg.checks if c.name == "structure")
    assert structure["cheap"].numbers == structure["full"].numbers
    assert structure["cheap"].numbers["rows"] == n and structure["cheap"].numbers["keys"] == 6_000
    assert "3000 keys' bitmaps decoded (a sample" in structure["cheap"].message, structure["cheap"].message
    assert "decoded" not in structure["full"].message


def test_an_inverted_segment_claiming_a_fragment_it_lost_is_damage(tmp_path):
    """An INVERTED segment that claims a fragment but holds none of its
    documents (what a merge that lost a fragment's rows would commit:
    queries trust the claim and never find them) fails the coverage check
    as ``missing_rows``. A claimed fragment whose texts yield no tokens
    (null or stop words only: pylance indexes no document for them) is
    not damage. A merge of such a segment fails the same check before its
    commit (CorruptError), and nothing is committed."""
    from damage import damage_segment

    uri = str(tmp_path / "f")

    def texts(start: int, words: list) -> pa.Table:
        return pa.table({"id": pa.array(range(start, start + len(words))), "t": pa.array(words)})

    ds = lance.write_dataset(texts(0, [f"w{i % 5} doc" for i in range(100)]), uri)
    ds.create_scalar_index("t", "INVERTED", name="t_idx")
    lance.write_dataset(texts(100, [f"y{i} doc" for i in range(30)]), uri, mode="append")
    lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)  # a delta
    lance.write_dataset(texts(200, [None, "the", "a", None] * 5), uri, mode="append")  # no tokens
    lance.write_dataset(texts(300, [f"x{i} doc" for i in range(50)]), uri, mode="append")
    frags = [f.fragment_id for f in lance.dataset(uri).get_fragments()]
    base = min(ls.open(uri).list_index_segments("t_idx"), key=lambda s: s.dataset_version)
    assert {c.verdict for s in ls.verify_index(uri, "t_idx").segments for c in s.checks if c.name == "coverage"} == {"ok"}
    quiet = damage_segment(uri, "t_idx", base.uuid, "claim_fragment", fragment=frags[2])
    assert {s.verdict for s in ls.verify_index(uri, "t_idx").segments} == {"clean"}  # its texts have no tokens
    lying = damage_segment(uri, "t_idx", quiet, "claim_fragment", fragment=frags[3])
    (s,) = [s for s in ls.verify_index(uri, "t_idx").segments if s.uuid == lying]
    cov = {c.name: c for c in s.checks}["coverage"]
    assert s.verdict == "damaged" and s.damage == ("missing_rows",), s
    assert f"fragment {frags[3]} but holds none of its documents" in cov.message and "tokens" in cov.message, cov.message
    assert "rebuild" in s.advice
    version = lance.dataset(uri).version
    with pytest.raises(ls.CorruptError, match="missing_rows|none of its documents"):
        ls.optimize(uri, "t_idx", progress=False)
    assert lance.dataset(uri).version == version


@pytest.mark.parametrize("typ, column, shown", [
    ("BTREE", "k", "none of its 200 live rows"),
    ("BITMAP", "k", "none of its 200 live rows"),
    ("ZONEMAP", "k", "none of its 200 live rows"),
    ("BLOOMFILTER", "k", "none of its 200 live rows"),
    ("LABEL_LIST", "tags", "none of its rows, while row"),
    ("NGRAM", "s", "none of its rows, while row"),
])
def test_a_segment_claiming_a_fragment_it_holds_no_row_of_is_damage(tmp_path, typ, column, shown):
    """A segment that claims a fragment with rows it must hold, and holds
    none of them, is ``missing_rows``. BTREE and BITMAP hold every live row
    (nulls too) and ZONEMAP and BLOOMFILTER zones span every row: the
    manifest's counts say so, nothing is read. LABEL_LIST holds the rows
    of non-empty lists and NGRAM null texts and texts with a trigram: the
    fragment is read up to its first such row. A segment claiming a
    fragment deleted whole since is not damage."""
    from damage import damage_segment

    uri = str(tmp_path / "d")

    def part(a: int, n: int) -> pa.Table:
        i = range(a, a + n)
        return pa.table({"id": pa.array(i), "k": pa.array([None if x % 9 == 0 else x % 40 for x in i]),
                         "tags": pa.array([[f"t{x % 4}"] if x % 3 else [] for x in i], pa.list_(pa.string())),
                         "s": pa.array([f"word{x % 30}" if x % 5 else "ab" for x in i])})

    ds = lance.write_dataset(part(0, 500), uri)
    ds.create_scalar_index(column, typ, name="k_idx")
    lance.write_dataset(part(500, 200), uri, mode="append")
    lance.write_dataset(part(700, 200), uri, mode="append")
    gone, last = sorted(f.fragment_id for f in lance.dataset(uri).get_fragments())[1:]
    lance.dataset(uri).delete("id >= 500 AND id < 700")  # the second fragment, whole
    (seg,) = ls.open(uri).list_index_segments("k_idx")
    checks = {c.name: c for c in ls.verify_index(uri, "k_idx").segments[0].checks}
    assert checks["coverage"].verdict == "ok", checks["coverage"]
    quiet = damage_segment(uri, "k_idx", seg.uuid, "claim_fragment", fragment=gone)
    assert [s.verdict for s in ls.verify_index(uri, "k_idx").segments] == ["clean"]
    lying = damage_segment(uri, "k_idx", quiet, "claim_fragment", fragment=last)
    (s,) = ls.verify_index(uri, "k_idx").segments
    cov = {c.name: c for c in s.checks}["coverage"]
    assert s.uuid == lying and s.verdict == "damaged" and s.damage == ("missing_rows",), s
    assert f"fragment {last} but holds {shown}" in cov.message, cov.message


@pytest.mark.parametrize("typ, column, texts", [("LABEL_LIST", "tags", ["ab"] * 100), ("NGRAM", "s", ["ab"] * 100),
                                                ("NGRAM", "s", [None] * 100)])
def test_a_claimed_fragment_without_rows_to_index_is_not_damage(tmp_path, typ, column, texts):
    """A LABEL_LIST segment claiming a fragment of empty lists, or an NGRAM
    segment one of texts too short for a trigram, holds nothing of it and
    misses nothing: pylance indexes no row of such a fragment. Nor does
    pylance's NGRAM delta over a fragment of null texts hold any of them
    (the coverage check first required it to, and called pylance's own
    segment damaged)."""
    from damage import damage_segment

    uri = str(tmp_path / "e")
    full = pa.table({"tags": pa.array([[f"t{x % 4}"] for x in range(300)], pa.list_(pa.string())),
                     "s": pa.array([f"word{x % 30}" for x in range(300)])})
    bare = pa.table({"tags": pa.array([[] for _ in range(100)], pa.list_(pa.string())), "s": pa.array(texts, pa.string())})
    ds = lance.write_dataset(full, uri)
    ds.create_scalar_index(column, typ, name="x_idx")
    lance.write_dataset(bare, uri, mode="append")
    lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)  # pylance's delta over it
    bare_frag = max(f.fragment_id for f in lance.dataset(uri).get_fragments())
    segs = ls.open(uri).list_index_segments("x_idx")
    assert bare_frag in {f for s in segs for f in s.fragment_ids}  # pylance claims it too
    assert {s.verdict for s in ls.verify_index(uri, "x_idx").segments} == {"clean"}
    base = min(segs, key=lambda s: s.dataset_version)
    if bare_frag not in base.fragment_ids:
        damage_segment(uri, "x_idx", base.uuid, "claim_fragment", fragment=bare_frag)
    assert {s.verdict for s in ls.verify_index(uri, "x_idx").segments} == {"clean"}
