"""Coverage is checked against rows: a segment that claims a fragment it
holds no rows of would hide that fragment's rows from every search; the
merge and the commit refuse it, naming the fragment. Fragments pylance
covers with no rows (all vectors null) stay accepted."""

from __future__ import annotations

import os
import shutil

import lance
import lancegen
import numpy as np
import pyarrow as pa
import pytest

import lance_segmerge as ls


def _tampered(seg: ls.IndexSegment, frags: list[int]) -> ls.IndexSegment:
    """The segment with its fragment_ids edited and its metadata dropped,
    as a careless user (or a corrupted plan) would send it."""
    return ls.IndexSegment.from_dict({**seg.to_dict(), "fragment_ids": frags, "metadata": ""})


def _self_found(d: lance.LanceDataset, x: np.ndarray, ids: range) -> float:
    """Share of rows found as their own nearest neighbour."""
    hits = 0
    for i in ids:
        got = d.to_table(nearest={"column": "vec", "q": x[i], "k": 1, "nprobes": 4}, columns=["id"])["id"].to_pylist()
        hits += got == [i]
    return hits / len(ids)


def test_claimed_fragment_without_rows_refused(delta_datasets, tmp_path):
    built = delta_datasets["IVF_PQ"]  # fragments 0-1 (base), 2, 3, 4 (one delta each)
    uri = str(tmp_path / "ds")
    shutil.copytree(built.uri, uri)
    segs = ls.open(uri).list_index_segments("vec_idx")
    by_frag = {s.fragment_ids: s for s in segs}
    d3, d4 = by_frag[(3,)], by_frag[(4,)]
    bad = _tampered(d3, [3, 4])
    before = sorted(os.listdir(os.path.join(uri, "_indices")))
    with pytest.raises(ls.InvalidInputError, match=f"segment {d3.uuid} claims fragment 4 but holds none of its rows"):
        ls.merge_existing_index_segments(uri, [by_frag[(2,)], bad])
    assert sorted(os.listdir(os.path.join(uri, "_indices"))) == before  # the output was removed
    nv = ls.open(uri).latest_version
    with pytest.raises(ls.InvalidInputError, match="claims fragment 4 but holds none of its rows, while the fragment has 300 rows"):
        ls.commit_existing_index_segments(uri, "vec_idx", "vec", [bad], replaces=[d3, d4])
    assert ls.open(uri).latest_version == nv

    # pylance 14.0.2 commits it, and fragment 4's rows are no longer found.
    theirs = str(tmp_path / "theirs")
    shutil.copytree(built.uri, theirs)
    assert _self_found(lance.dataset(theirs), built.vectors, range(2600, 2620)) >= 0.8
    lance.dataset(theirs).commit_existing_index_segments("vec_idx", "vec", [bad.to_lance_index()])
    assert _self_found(lance.dataset(theirs), built.vectors, range(2600, 2620)) == 0


def test_tampered_merge_output_is_rechecked(delta_datasets, tmp_path):
    """Our merge records the fragments it verified; a merged segment whose
    claims were edited afterwards gets its row ids read again."""
    uri = str(tmp_path / "ds")
    shutil.copytree(delta_datasets["IVF_PQ"].uri, uri)
    segs = ls.open(uri).list_index_segments("vec_idx")
    by_frag = {s.fragment_ids: s for s in segs}
    m = ls.merge_existing_index_segments(uri, [by_frag[(2,)], by_frag[(3,)]])
    bad = _tampered(m, [2, 3, 4])
    with pytest.raises(ls.InvalidInputError, match=f"segment {m.uuid} claims fragment 4"):
        ls.commit_existing_index_segments(uri, "vec_idx", "vec", [bad], replaces=[by_frag[(2,)], by_frag[(3,)], by_frag[(4,)]])
    v = ls.commit_existing_index_segments(uri, "vec_idx", "vec", [m], replaces=[by_frag[(2,)], by_frag[(3,)]]).version
    assert lance.dataset(uri).version == v


def test_fragments_of_null_vectors_stay_accepted(tmp_path):
    """pylance covers a fragment whose vectors are all null with no rows
    (create_index and optimize_indices alike): merges and commits of such
    segments go through, and the index answers as pylance's does."""
    x = lancegen.vectors(3100, seed=41)
    t = lancegen.table(x[:3000])
    vec = t["vec"].to_pylist()
    for i in range(1000, 2000):
        vec[i] = None
    typ = t.schema.field("vec").type
    uri = str(tmp_path / "nulls")
    d = lance.write_dataset(pa.table({"id": t["id"], "vec": pa.array(vec, type=typ)}), uri, max_rows_per_file=1000)
    d.create_index("vec", "IVF_PQ", name="vec_idx", num_partitions=4, num_sub_vectors=4)
    d = lance.write_dataset(lancegen.table(x[3000:], 3000), uri, mode="append")
    d.optimize.optimize_indices(num_indices_to_merge=0)
    d = lance.write_dataset(pa.table({"id": pa.array(range(5000, 5100), pa.int64()), "vec": pa.array([None] * 100, type=typ)}), uri, mode="append")
    d.optimize.optimize_indices(num_indices_to_merge=0)
    segs = ls.open(uri).list_index_segments("vec_idx")
    assert [(s.fragment_ids, s.num_rows) for s in segs] == [((0, 1, 2), 2000), ((3,), 100), ((4,), 0)]
    v = ls.optimize(uri, "vec_idx", progress=False).version
    d = lance.dataset(uri)
    assert d.version == v and [s.fragment_ids for s in ls.open(uri).list_index_segments("vec_idx")] == [(0, 1, 2, 3, 4)]
    assert _self_found(d, x, range(3000, 3020)) >= 0.8
    assert _self_found(d, x, range(0, 20)) >= 0.8


def test_stable_row_ids_commit_unchecked(tmp_path):
    """With stable row ids, row ids do not name fragments: the commit does
    not attribute rows to fragments (and still commits pylance's segments
    as before)."""
    x = lancegen.vectors(3000, seed=43)
    uri = str(tmp_path / "stable")
    d = lance.write_dataset(lancegen.table(x), uri, max_rows_per_file=1000, enable_stable_row_ids=True)
    kw = lancegen.train_shared_model(d, "IVF_PQ")
    segs = [d.create_index_uncommitted("vec", "IVF_PQ", name="vec_idx", fragment_ids=[f], **kw) for f in range(3)]
    v = ls.commit_existing_index_segments(uri, "vec_idx", "vec", segs).version
    d = lance.dataset(uri)
    assert d.version == v
    d.validate()
    assert _self_found(d, x, range(1000, 1010)) >= 0.8
