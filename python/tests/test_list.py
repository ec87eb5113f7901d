"""Listing index segments: our view equals pylance's, plus file statistics."""

from __future__ import annotations

import json
import pickle

import lance
import lancegen
import pytest
from conftest import COMPAT, INDEX_TYPES
from lance.file import LanceFileReader

import lance_segmerge as ls


def pylance_segments(ds, name: str = "vec_idx"):
    (desc,) = [d for d in ds.describe_indices() if d.name == name]
    return desc, desc.segments


def assert_same_as_pylance(built: lancegen.Built, version=None) -> list[ls.IndexSegment]:
    pds = built.dataset(version)
    desc, psegs = pylance_segments(pds)
    ours = ls.open(built.uri, version=version).list_index_segments("vec_idx")
    assert [s.uuid for s in ours] == [s.uuid for s in psegs]
    for o, p in zip(ours, psegs):
        assert o.name == "vec_idx"
        assert list(o.fields) == list(desc.fields)
        assert list(o.fragment_ids) == sorted(p.fragment_ids)
        assert o.dataset_version == p.dataset_version_at_last_update
        assert o.index_version == p.index_version
        assert o.index_type == desc.index_type
        assert o.size_bytes == p.size_bytes
        # Row counts from the files equal what pylance's file reader reads.
        aux = LanceFileReader(f"{built.uri}/_indices/{o.uuid}/auxiliary.idx")
        assert o.num_rows == aux.num_rows()
        assert sum(o.partition_rows) == o.num_rows
        assert o.num_partitions == len(o.partition_rows) == 4
        assert o.auxiliary_file_bytes == next(f.size_bytes for f in o.files if f.path == "auxiliary.idx")
        meta = aux.metadata().schema.metadata
        assert o.distance_type == meta[b"distance_type"].decode()
        (quant,) = json.loads(meta[b"storage_metadata"])
        quant = json.loads(quant)
        assert o.pq_transposed == quant.get("transposed")
        assert o.rq_packed == quant.get("packed")
        assert o.file_version == "2.2"
    return ours


@pytest.mark.parametrize("index_type", INDEX_TYPES)
def test_delta_segments_match_pylance(delta_datasets, index_type):
    built = delta_datasets[index_type]
    segs = assert_same_as_pylance(built)
    assert len(segs) == 4  # base + 3 deltas
    base, *deltas = segs
    assert base.num_rows == 2000 and all(d.num_rows == 300 for d in deltas)
    # Each delta covers only its own new fragment.
    covered = [f for s in segs for f in s.fragment_ids]
    assert len(covered) == len(set(covered))
    if index_type == "IVF_PQ":
        assert base.num_sub_vectors == 4 and base.num_bits == 8


def test_older_version_opens(delta_datasets):
    built = delta_datasets["IVF_SQ"]
    latest = ls.open(built.uri)
    older = latest.version - 2  # before the last append + optimize
    segs = assert_same_as_pylance(built, version=older)
    assert len(segs) == 3
    assert ls.open(built.uri, version=older).version == older
    assert latest.checkout(older).list_index_segments() == segs


def test_v1_manifest_names(v1_dataset):
    ds = ls.open(v1_dataset.uri)
    assert ds.manifest_scheme == "V1"
    assert len(assert_same_as_pylance(v1_dataset)) == 4


def test_v2_manifest_names(delta_datasets):
    assert ls.open(delta_datasets["IVF_PQ"].uri).manifest_scheme == "V2"


def test_committed_uncommitted_segments(uncommitted_pq, copy_dataset):
    built, segs = uncommitted_pq
    uri = copy_dataset(built.uri)
    lance.dataset(uri).commit_existing_index_segments("vec_idx", "vec", segs)
    ours = ls.open(uri).list_index_segments("vec_idx")
    assert [s.uuid for s in ours] == [s.uuid for s in segs]
    for o, p in zip(ours, segs):
        assert list(o.fragment_ids) == sorted(p.fragment_ids)
        assert o.index_details_type_url == p.index_details[0]
        assert o.index_details == p.index_details[1]
        # create_index_uncommitted writes row-major codes for the merger.
        assert o.pq_transposed is False
    built2 = lancegen.Built(uri, built.vectors)
    assert_same_as_pylance(built2)


def test_lance_index_round_trip(uncommitted_pq, copy_dataset):
    built, segs = uncommitted_pq
    uri = copy_dataset(built.uri)
    ds = ls.open(uri)
    ours = [ls.IndexSegment.from_lance_index(s, ds) for s in segs]
    for o, p in zip(ours, segs):
        assert o.uuid == p.uuid and list(o.fragment_ids) == sorted(p.fragment_ids)
        assert o.index_type == "IVF_PQ" and o.num_rows == 500
        back = o.to_lance_index()
        assert back.uuid == p.uuid and sorted(back.fragment_ids) == sorted(p.fragment_ids)
        assert back.index_details == p.index_details
        assert [(f.path, f.size_bytes) for f in back.files] == [(f.path, f.size_bytes) for f in p.files]
        assert back.created_at is not None and abs((back.created_at - p.created_at).total_seconds()) < 0.002
    # pylance accepts our converted segments for its own commit.
    lance.dataset(uri).commit_existing_index_segments("vec_idx", "vec", [o.to_lance_index() for o in ours])
    listed = ls.open(uri).list_index_segments("vec_idx")
    assert [s.uuid for s in listed] == [o.uuid for o in ours]
    # Without a dataset the stats are unknown, the metadata still complete.
    bare = ls.IndexSegment.from_lance_index(segs[0])
    assert bare.index_type is None and bare.metadata and bare.uuid == segs[0].uuid


def test_segments_pickle_and_json(delta_datasets):
    ds = ls.open(delta_datasets["IVF_RQ"].uri)
    segs = ds.list_index_segments()
    for s in segs:
        assert pickle.loads(pickle.dumps(s)) == s
        assert ls.IndexSegment.from_json(s.to_json()) == s
        json.loads(s.to_json())  # plain JSON
        assert s.rq_packed is True and s.index_version == 2
    again = pickle.loads(pickle.dumps(ds))
    assert again == ds and again.version == ds.version
    assert again.list_index_segments() == segs
    assert "storage_options" not in repr(ds)


@pytest.mark.parametrize("with_stats", [True, False])
def test_kernel_json_decodes_like_checked_json(delta_datasets, with_stats):
    """Segments decoded from the kernel's own JSON skip the checks made for
    segments from outside, and must still be exactly what the checked path
    builds (same values, tuples, bytes, datetimes), for every index type."""
    from lance_segmerge import _ffi

    for index_type, built in delta_datasets.items():
        raw = _ffi.call_json("ListSegments", built.uri, _ffi.options_json(None), 0, "vec_idx", not with_stats)
        assert len(raw) == 4
        checked = [ls.IndexSegment.from_dict(d) for d in raw]
        trusted = [ls.IndexSegment._from_kernel(d) for d in raw]
        assert trusted == checked, index_type
        for t, c in zip(trusted, checked):
            assert t.to_dict() == c.to_dict() and hash(t.fields) == hash(c.fields)
            assert all(type(getattr(t, f)) is type(getattr(c, f)) for f in c.__dataclass_fields__), index_type
            assert pickle.loads(pickle.dumps(t)) == c
        assert ls.open(built.uri).list_index_segments("vec_idx", with_stats=with_stats) == checked
    # from_dict checks.
    bad = dict(raw[0], uuid="not-a-uuid")
    with pytest.raises(ls.InvalidInputError, match="UUID"):
        ls.IndexSegment.from_dict(bad)


def test_list_without_stats(delta_datasets):
    ds = ls.open(delta_datasets["IVF_FLAT"].uri)
    segs = ds.list_index_segments("vec_idx", with_stats=False)
    assert len(segs) == 4 and all(s.index_type is None for s in segs)
    assert [s.uuid for s in segs] == [s.uuid for s in ds.list_index_segments()]


@pytest.mark.parametrize(
    "fixture,rows,dim",
    [("v0.27.1/pq_in_schema", 512, 32), ("v0.30.0_pre_created_at/index_without_created_at", 256, 16)],
)
def test_old_release_fixtures(fixture, rows, dim):
    ds = ls.open(str(COMPAT / fixture))
    assert ds.manifest_scheme == "V1" and ds.version == 2
    (seg,) = ds.list_index_segments()
    assert seg.created_at is None  # written before created_at existed
    assert seg.index_type == "IVF_PQ" and seg.num_rows == rows and seg.dimension == dim
    assert seg.file_version == "2.0" and seg.files == ()
    assert ds.checkout(1).list_index_segments() == []
    # pylance agrees on the segment.
    pds = lance.dataset(str(COMPAT / fixture))
    assert [s.uuid for s in pds.describe_indices()[0].segments] == [seg.uuid]
