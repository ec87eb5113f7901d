"""ConflictError means a real race (a concurrent commit changed what the
commit was planned against): retrying after a re-plan can succeed. A
caller's mistake is an InvalidInputError, whatever layer catches it; a
delete, even of whole covered fragments, is rebased over."""

from __future__ import annotations

import json
import shutil

import lance
import pytest

import lance_segmerge as ls
from lance_segmerge import _ffi
from lance_segmerge.api import segments_json


@pytest.fixture
def world(uncommitted_pq, tmp_path):
    built, segs = uncommitted_pq  # six fragments of 500 rows, one segment each
    uri = str(tmp_path / "ds")
    shutil.copytree(built.uri, uri)
    ls.commit_existing_index_segments(uri, "vec_idx", "vec", segs)
    return uri, built, [ls.IndexSegment.from_lance_index(s) for s in segs]


def kernel_commit(ds: ls.Dataset, segs, request: dict) -> int:
    """The commit as the kernel takes it, without the Python checks."""
    return _ffi.run_operation("CommitSegments", (ds.uri, "", ds.version, segments_json(segs), json.dumps(request)))


@pytest.mark.parametrize(
    "replaces,index_name,match",
    [
        (["garbage"], "vec_idx", 'replaces: "garbage" is not a segment uuid'),
        (["00000000-0000-4000-8000-000000000000"], "vec_idx", "is not a segment of version 2"),
        ("sources", "other_idx", 'belongs to index "vec_idx", not "other_idx"'),
        ("first", "vec_idx", "which the commit does not replace, covers fragments \\[1\\]"),
    ],
    ids=["not-a-uuid", "unknown-uuid", "wrong-index-name", "missing-a-source"],
)
def test_caller_mistakes_are_invalid_input(world, replaces, index_name, match):
    uri, built, segs = world
    ds = ls.open(uri)
    m01 = ds.merge_existing_index_segments(segs[:2])
    if replaces == "sources":
        replaces = [s.uuid for s in segs[:2]]
    elif replaces == "first":
        replaces = [segs[0].uuid]
    req = {"index_name": index_name, "column": "vec", "replaces": replaces}
    # The kernel, whatever the caller (Python checks uuids before it).
    with pytest.raises(ls.InvalidInputError, match=match):
        kernel_commit(ds, [m01], req)
    if replaces != ["garbage"]:
        with pytest.raises(ls.InvalidInputError, match=match):
            ds.commit_existing_index_segments(index_name, "vec", [m01], replaces=replaces)
    else:
        with pytest.raises(ls.InvalidInputError, match="must be a UUID"):
            ds.commit_existing_index_segments(index_name, "vec", [m01], replaces=replaces)
    assert lance.dataset(uri).version == ds.version


def test_real_races_are_conflicts(world):
    uri, built, segs = world
    planned = ls.open(uri)
    m01 = planned.merge_existing_index_segments(segs[:2])
    m12 = planned.merge_existing_index_segments(segs[1:3])
    # Another committer replaced segment 1 first: a race, re-plan.
    ls.commit_existing_index_segments(uri, "vec_idx", "vec", [m12], replaces=segs[1:3])
    with pytest.raises(ls.ConflictError, match="re-plan"):
        planned.commit_existing_index_segments("vec_idx", "vec", [m01], replaces=segs[:2])
    # Re-planned at the new version, the same intent goes through.
    again = ls.open(uri)
    m = again.merge_existing_index_segments([segs[0], m12])
    v = again.commit_existing_index_segments("vec_idx", "vec", [m], replaces=[segs[0], m12]).version
    assert lance.dataset(uri).version == v


@pytest.mark.parametrize("where", ["whole-fragment", "some-rows", "two-whole-fragments"])
def test_deletes_are_rebased(world, where):
    """pylance deletes rows of covered fragments while a merge runs; a
    delete of a whole fragment also drops the segment that covered only
    it. The commit goes through, pylance validates the result, and the
    deleted rows are gone from searches while every other row is found."""
    uri, built, segs = world
    planned = ls.open(uri)
    m = planned.merge_existing_index_segments(segs[:3])
    pred = {"whole-fragment": "id >= 500 and id < 1000", "some-rows": "id >= 500 and id < 700",
            "two-whole-fragments": "id < 1000"}[where]
    lance.dataset(uri).delete(pred)
    v = planned.commit_existing_index_segments("vec_idx", "vec", [m], replaces=segs[:3]).version
    d = lance.dataset(uri)
    assert d.version == v
    d.validate()
    gone = {"whole-fragment": range(500, 1000), "some-rows": range(500, 700), "two-whole-fragments": range(0, 1000)}[where]
    assert d.count_rows() == 3000 - len(gone)
    x = built.vectors
    for i in (gone[0], gone[len(gone) // 2], gone[-1], 100 if 100 not in gone else 1100, 1200, 2600):
        got = d.to_table(nearest={"column": "vec", "q": x[i], "k": 10, "nprobes": 4}, columns=["id"])["id"].to_pylist()
        assert (i not in got) if i in gone else (i in got), (i, got)
    # The merged segment is what the index holds for fragments 0-2.
    (desc,) = d.describe_indices()
    assert any(s.uuid == m.uuid for s in desc.segments)


def test_segment_covering_a_deleted_last_fragment(world):
    """A segment may cover a fragment deleted since, above every current
    fragment id: it stays within the dataset's max_fragment_id, so lists,
    plans and merges still take it."""
    uri, built, segs = world
    m = ls.merge_existing_index_segments(uri, segs[4:])
    ls.commit_existing_index_segments(uri, "vec_idx", "vec", [m], replaces=segs[4:])
    lance.dataset(uri).delete("id >= 2500")  # fragment 5, the last, is gone
    assert [f.fragment_id for f in lance.dataset(uri).get_fragments()] == [0, 1, 2, 3, 4]
    assert (4, 5) in [s.fragment_ids for s in ls.open(uri).list_index_segments("vec_idx")]
    v = ls.optimize(uri, "vec_idx", progress=False).version
    d = lance.dataset(uri)
    assert d.version == v
    d.validate()
    assert d.count_rows() == 2500
