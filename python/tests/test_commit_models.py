"""The commit refuses segments that do not belong to the index: another
index type, metric, dimension, quantizer or model. pylance's own commit
checks the type and the metric; we also check the model."""

from __future__ import annotations

import os
import shutil

import lance
import lancegen
import pytest
from lance.indices import IndicesBuilder

import lance_segmerge as ls


def _n_versions(uri: str) -> int:
    return len([n for n in os.listdir(os.path.join(uri, "_versions")) if n.endswith(".manifest")])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Six fragments; l2 IVF_PQ segments over fragments 0-3 sharing one
    model, and segments over fragment 4 (and 5) built every other way."""
    root = tmp_path_factory.mktemp("models")
    x = lancegen.vectors(6 * 500, seed=31)
    uri = str(root / "ds")
    ds = lance.write_dataset(lancegen.table(x), uri, max_rows_per_file=500)
    ib = IndicesBuilder(ds, "vec")
    ivf, other_ivf = ib.train_ivf(4), ib.train_ivf(4, sample_rate=32)
    pq = ib.train_pq(ivf, 4, sample_rate=8)
    kw = {"num_partitions": 4, "ivf_centroids": ivf.centroids, "num_sub_vectors": 4, "pq_codebook": pq.codebook}
    cos = lancegen.train_shared_model(ds, "IVF_PQ", metric="cosine")
    mk = lambda frag, t="IVF_PQ", **k: ds.create_index_uncommitted("vec", t, name="vec_idx", fragment_ids=[frag], **k)  # noqa: E731
    segs = {
        "base": [mk(f, **kw) for f in range(4)],
        "same": mk(4, **kw),
        "cosine_all": [mk(f, **cos) for f in range(6)],
        "sq": mk(4, "IVF_SQ", num_partitions=4, ivf_centroids=ivf.centroids),
        "flat": mk(4, "IVF_FLAT", num_partitions=4, ivf_centroids=ivf.centroids),
        "centroids": mk(4, **{**kw, "ivf_centroids": other_ivf.centroids}),
        "codebook": mk(4, **{**kw, "pq_codebook": ib.train_pq(ivf, 4, sample_rate=4).codebook}),
        "subvectors": mk(4, **{**kw, "num_sub_vectors": 2, "pq_codebook": ib.train_pq(ivf, 2, sample_rate=8).codebook}),
    }
    segs["cosine"] = segs["cosine_all"][4]
    return uri, x, segs


_WORLDS: dict[str, str] = {}


def world_uri(copy: str) -> str:
    """The world dataset a `committed` copy was made from."""
    return _WORLDS[copy]


@pytest.fixture
def committed(world, tmp_path):
    """A copy of the world with the four l2 IVF_PQ segments committed."""
    uri, x, segs = world
    dst = str(tmp_path / "ds")
    shutil.copytree(uri, dst)
    _WORLDS[dst] = uri
    ls.commit_existing_index_segments(dst, "vec_idx", "vec", segs["base"])
    return dst, x, segs


@pytest.mark.parametrize(
    "case,pylance_refuses,match",
    [
        ("cosine", "metric L2, expected Cosine", "distance type cosine, where the index's segment .* has l2"),
        ("sq", "expected \\(Flat, Scalar\\)", "index type IVF_SQ, where .* has IVF_PQ"),
        ("flat", "expected \\(Flat, Flat\\)", "index type IVF_FLAT, where .* has IVF_PQ"),
        ("centroids", None, "its IVF centroids differ from those of the index's segment"),
        ("codebook", None, "PQ codebook"),
        ("subvectors", None, "PQ sub-vectors 2, where .* has 4"),
    ],
)
def test_foreign_segment_refused(committed, case, pylance_refuses, match):
    uri, x, segs = committed
    seg = segs[case]
    # What pylance 14.0.2 does with the same commit, on a copy.
    theirs = uri + "-pylance"
    shutil.copytree(uri, theirs)
    if pylance_refuses:
        with pytest.raises(Exception, match=pylance_refuses):
            lance.dataset(theirs).commit_existing_index_segments("vec_idx", "vec", [seg])
    else:
        lance.dataset(theirs).commit_existing_index_segments("vec_idx", "vec", [seg])  # accepted: a mixed index
    nv = _n_versions(uri)
    with pytest.raises(ls.InvalidInputError, match=match) as ei:
        ls.commit_existing_index_segments(uri, "vec_idx", "vec", [seg])
    assert seg.uuid in str(ei.value) and "vec_idx" in str(ei.value)
    assert _n_versions(uri) == nv


def test_segment_of_the_same_model_accepted(committed):
    """A segment of the index's model is accepted, and the index answers
    as pylance's own commit of the same segment makes it answer."""
    uri, x, segs = committed
    theirs = uri + "-pylance"
    shutil.copytree(uri, theirs)
    v = ls.commit_existing_index_segments(uri, "vec_idx", "vec", [segs["same"]]).version
    lance.dataset(theirs).commit_existing_index_segments("vec_idx", "vec", [segs["same"]])
    d = lance.dataset(uri)
    assert d.version == v
    q = lancegen.vectors(10, seed=5)
    assert lancegen.recall(d, x[:2500], q, nprobes=4) == lancegen.recall(lance.dataset(theirs), x[:2500], q, nprobes=4) > 0.1
    plan = ls.open(uri).plan_index_segment_merge("vec_idx", segments_per_task=8)
    assert plan.num_segments == 5


def test_replacing_every_segment_may_change_the_kind(committed):
    uri, x, segs = committed
    base = ls.open(uri).list_index_segments("vec_idx")
    cos = segs["cosine_all"]
    # Not while one l2 segment stays.
    with pytest.raises(ls.InvalidInputError, match="distance type"):
        ls.commit_existing_index_segments(uri, "vec_idx", "vec", cos[1:], replaces=base[1:])
    # Replacing every segment of the index, the commit may change its metric.
    v = ls.commit_existing_index_segments(uri, "vec_idx", "vec", cos, replaces=base).version
    d = lance.dataset(uri)
    assert d.version == v
    (desc,) = d.describe_indices()
    assert sorted(s.uuid for s in desc.segments) == sorted(s.uuid for s in cos)
    # It answers as pylance's own commit of the same segments does.
    theirs = uri + "-pylance"
    shutil.copytree(world_uri(uri), theirs)
    lance.dataset(theirs).commit_existing_index_segments("vec_idx", "vec", cos)
    q = lancegen.vectors(10, seed=5)
    assert lancegen.recall(d, x, q, metric="cosine", nprobes=4) == lancegen.recall(lance.dataset(theirs), x, q, metric="cosine", nprobes=4)


def test_new_segments_must_share_a_kind(world, tmp_path):
    uri, x, segs = world
    dst = str(tmp_path / "fresh")
    shutil.copytree(uri, dst)
    with pytest.raises(ls.InvalidInputError, match="not of the kind of the other segments of this commit: distance type cosine, where segment .* has l2"):
        ls.commit_existing_index_segments(dst, "vec_idx", "vec", [segs["base"][0], segs["cosine_all"][5]])
    assert _n_versions(dst) == 1


def test_sq_bounds(tmp_path):
    """IVF_SQ bounds are part of the model when the index's segments share
    them (create_index, and the deltas of optimize_indices, which reuse the
    base's); an index of create_index_uncommitted segments, each with its
    own bounds, takes more of those (and requantize_sq merges of them)."""
    uri = str(tmp_path / "uniform")
    x = lancegen.vectors(2600, seed=8)
    d = lance.write_dataset(lancegen.table(x[:2000]), uri, max_rows_per_file=1000)
    centroids = IndicesBuilder(d, "vec").train_ivf(4).centroids
    d.create_index("vec", "IVF_SQ", name="vec_idx", num_partitions=4, ivf_centroids=centroids)
    d = lance.write_dataset(lancegen.table(x[2000:2300], 2000), uri, mode="append")
    d.optimize.optimize_indices(num_indices_to_merge=0)  # a delta: the base's bounds
    d = lance.write_dataset(lancegen.table(x[2300:] * 3, 2300), uri, mode="append")
    own = d.create_index_uncommitted("vec", "IVF_SQ", name="tmp", fragment_ids=[3], num_partitions=4, ivf_centroids=centroids)
    nv = _n_versions(uri)
    with pytest.raises(ls.InvalidInputError, match="SQ bounds \\[.*\\], where the index's segment .* has \\["):
        ls.commit_existing_index_segments(uri, "vec_idx", "vec", [own])
    assert _n_versions(uri) == nv

    built, segs = lancegen.build_uncommitted_segments(str(tmp_path / "mixed"), "IVF_SQ")
    ls.commit_existing_index_segments(built.uri, "vec_idx", "vec", segs[:5])
    ls.commit_existing_index_segments(built.uri, "vec_idx", "vec", segs[5:])  # its own bounds: accepted
    m = ls.merge_existing_index_segments(built.uri, segs[:2], requantize_sq=True)
    v = ls.commit_existing_index_segments(built.uri, "vec_idx", "vec", [m], replaces=segs[:2]).version
    d = lance.dataset(built.uri)
    assert d.version == v
    assert lancegen.recall(d, built.vectors, lancegen.vectors(10, seed=5), nprobes=4) >= 0.5
