"""Dataset handles in, pylance objects out: every verb takes our Dataset, a
URI, an os.PathLike or a lance.LanceDataset; commit and optimize return the
dataset at the new version, of the kind given; merged segments go into
pylance's own commit."""

from __future__ import annotations

import pathlib
import shutil

import lance
import lancegen
import pytest

import lance_segmerge as ls

Q = lancegen.vectors(20, seed=91)


@pytest.fixture
def uri(uncommitted_pq, tmp_path):
    """A copy of six fragments, segments 0-3 committed, 4-5 not."""
    built, segs = uncommitted_pq
    dst = str(tmp_path / "ds")
    shutil.copytree(built.uri, dst)
    lance.dataset(dst).commit_existing_index_segments("vec_idx", "vec", segs[:4])
    return dst


HANDLES = {
    "Dataset": lambda u: ls.open(u),
    "str": lambda u: u,
    "PathLike": lambda u: pathlib.Path(u),
    "LanceDataset": lambda u: lance.dataset(u),
}


@pytest.mark.parametrize("kind", HANDLES)
def test_every_verb_takes_every_handle(uri, uncommitted_pq, kind):
    handle = HANDLES[kind](uri)
    ds = ls.open(handle)
    assert isinstance(ds, ls.Dataset) and ds.version == lance.dataset(uri).version
    assert ds.uri == str(uri)
    segs = ds.list_index_segments("vec_idx")
    plan = ls.plan_index_segment_merge(handle, "vec_idx", 2)
    assert plan.read_version == ds.version and plan.num_segments == 4
    merged = [ls.merge_existing_index_segments(handle, t) for t in plan.tasks]
    described = ls.IndexSegment.from_lance_index(merged[0].to_lance_index(), handle)
    assert described.num_rows == merged[0].num_rows
    out = ls.commit_existing_index_segments(handle, "vec_idx", "vec", merged, replaces=plan.sources)
    want = lance.LanceDataset if kind == "LanceDataset" else ls.Dataset
    assert type(out) is want and out.version == ds.version + 1
    assert {s.uuid for s in ls.open(uri).list_index_segments("vec_idx")} == {m.uuid for m in merged}
    assert {s.uuid for s in segs} & {s.uuid for s in ls.open(uri).list_index_segments("vec_idx")} == set()
    # Only the two never-committed segments are orphans.
    assert sorted(o["uuid"] for o in ls.cleanup(handle, 0, dry_run=True)) == sorted(s.uuid for s in uncommitted_pq[1][4:])


@pytest.mark.parametrize("kind", HANDLES)
def test_optimize_returns_the_kind_given(uri, uncommitted_pq, kind):
    before = lance.dataset(uri).version
    out = ls.optimize(HANDLES[kind](uri), "vec_idx", progress=False)
    want = lance.LanceDataset if kind == "LanceDataset" else ls.Dataset
    assert type(out) is want and out.version == before + 1
    if kind == "LanceDataset":
        # pylance's own handle at the new version: it queries the result.
        assert len(out.describe_indices()[0].segments) == 1
        # (pylance trains the segments' models unseeded: 0.5 to 0.7 seen)
        assert lancegen.recall(out, uncommitted_pq[0].vectors, Q, k=10, nprobes=4) >= 0.4
    # Nothing to merge: the same version, of the same kind.
    again = ls.optimize(HANDLES[kind](uri), "vec_idx", progress=False)
    assert type(again) is want and again.version == out.version


def test_idiom_ds_equals_ds_commit(uri, uncommitted_pq):
    """`ds = ds.commit_existing_index_segments(...)` works with either
    library's handle, and a LanceDataset keeps being one."""
    _, segs = uncommitted_pq
    pds = lance.dataset(uri)
    v0 = pds.version
    pds = ls.commit_existing_index_segments(pds, "vec_idx", "vec", [segs[4]])
    assert isinstance(pds, lance.LanceDataset) and pds.version == v0 + 1
    assert segs[4].uuid in {s.uuid for s in pds.describe_indices()[0].segments}
    ds = ls.open(uri)
    ds = ds.commit_existing_index_segments("vec_idx", "vec", [segs[5]])
    assert isinstance(ds, ls.Dataset) and ds.version == v0 + 2
    assert ds.list_index_segments("vec_idx")[-1].uuid == segs[5].uuid


def test_lance_dataset_version_is_used(uri, uncommitted_pq):
    """A LanceDataset pinned to an old version is worked on at that
    version, and the commit checks everything committed since."""
    _, segs = uncommitted_pq
    old = lance.dataset(uri)
    lance.dataset(uri).commit_existing_index_segments("vec_idx", "vec", [segs[4]])
    ds = ls.open(old)
    assert ds.version == old.version == ls.open(uri).version - 1
    assert segs[4].uuid not in {s.uuid for s in ds.list_index_segments("vec_idx")}
    plan = ls.plan_index_segment_merge(old, "vec_idx", 4)
    assert plan.read_version == old.version
    merged = ls.merge_existing_index_segments(old, plan.tasks[0])
    out = ls.commit_existing_index_segments(old, "vec_idx", "vec", [merged], replaces=plan.sources)
    assert isinstance(out, lance.LanceDataset) and out.version == old.version + 2
    assert {s.uuid for s in out.describe_indices()[0].segments} == {merged.uuid, segs[4].uuid}
    # open(handle, version=...) picks another version of the same dataset.
    assert ls.open(out, version=1).version == 1


@pytest.mark.parametrize("bad", [123, b"/tmp/x", None, 1.5, ["/tmp/x"], object()], ids=lambda b: type(b).__name__)
def test_wrong_handles_name_their_type(uncommitted_pq, bad):
    _, segs = uncommitted_pq
    calls = [
        lambda: ls.open(bad),
        lambda: ls.plan_index_segment_merge(bad, "vec_idx"),
        lambda: ls.merge_existing_index_segments(bad, segs[:2]),
        lambda: ls.commit_existing_index_segments(bad, "vec_idx", "vec", segs[:2]),
        lambda: ls.optimize(bad, "vec_idx", progress=False),
        lambda: ls.cleanup(bad),
    ]
    if bad is not None:  # None means "no dataset" there
        calls.append(lambda: ls.IndexSegment.from_lance_index(segs[0], bad))
    for call in calls:
        with pytest.raises(ls.InvalidInputError, match=type(bad).__qualname__) as ei:
            call()
        assert "lance.LanceDataset" in str(ei.value)


def test_handle_with_storage_options_refused(uri):
    for handle in (ls.open(uri), lance.dataset(uri)):
        with pytest.raises(ls.InvalidInputError, match="already carries its own"):
            ls.optimize(handle, "vec_idx", storage_options={"a": "b"})
        with pytest.raises(ls.InvalidInputError, match="already carries its own"):
            ls.open(handle, storage_options={"a": "b"})


def test_merged_segment_committed_and_queried_by_pylance(uncommitted_pq, tmp_path):
    """What the docs show: our merge, pylance's commit (after
    to_lance_index), pylance's queries."""
    built, segs = uncommitted_pq
    uri = str(tmp_path / "handoff")
    shutil.copytree(built.uri, uri)
    pds = lance.dataset(uri)
    merged = ls.merge_existing_index_segments(pds, segs)
    # pylance's commit reads its own Index objects, not ours.
    with pytest.raises(TypeError, match="IndexSegment or Index"):
        pds.commit_existing_index_segments("vec_idx", "vec", [merged])
    pds = pds.commit_existing_index_segments("vec_idx", "vec", [merged.to_lance_index()])
    (desc,) = pds.describe_indices()
    assert [(s.uuid, sorted(s.fragment_ids)) for s in desc.segments] == [(merged.uuid, list(range(6)))]
    r = lancegen.recall(pds, built.vectors, Q, k=10, nprobes=4, refine_factor=10)
    # The same segments committed unmerged answer the same.
    ref = str(tmp_path / "ref")
    shutil.copytree(built.uri, ref)
    r_parts = lancegen.recall(lance.dataset(ref).commit_existing_index_segments("vec_idx", "vec", segs), built.vectors, Q, k=10, nprobes=4, refine_factor=10)
    assert r > 0.5 and abs(r - r_parts) <= 0.01, (r, r_parts)


def test_external_manifest_store_refused_up_front(uncommitted_pq):
    """Datasets committed through DynamoDB (s3+ddb://) are refused by every
    verb before anything is read or written, with what to do instead."""
    _, segs = uncommitted_pq
    uri = "s3+ddb://bucket/vectors.lance?ddbTableName=manifests"
    for call in (
        lambda: ls.open(uri),
        lambda: ls.plan_index_segment_merge(uri, "vec_idx"),
        lambda: ls.merge_existing_index_segments(uri, segs[:2]),
        lambda: ls.commit_existing_index_segments(uri, "vec_idx", "vec", segs[:2]),
        lambda: ls.optimize(uri, "vec_idx", progress=False),
        lambda: ls.cleanup(uri),
    ):
        with pytest.raises(ls.UnsupportedError, match="external manifest store") as ei:
            call()
        assert "commit_existing_index_segments" in str(ei.value) and "plain s3://" in str(ei.value)
