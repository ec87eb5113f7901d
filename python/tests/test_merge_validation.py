"""Every refused merge raises the matching typed exception, names the
segment at fault, and leaves nothing under _indices/."""

from __future__ import annotations

import dataclasses
import logging
import os

import lance
import lancegen
import pytest
from lance.indices import IndicesBuilder
from lance.lance import indices as native_indices

import lance_segmerge as ls


def dirs(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "_indices")))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One dataset (two vector columns), and segments built every way a
    merge can be refused."""
    root = tmp_path_factory.mktemp("validation")
    x = lancegen.vectors(3000, seed=21)
    tbl = lancegen.table(x).append_column("vec2", lancegen.table(x[:, ::-1].copy())["vec"])
    uri = str(root / "ds")
    ds = lance.write_dataset(tbl, uri, max_rows_per_file=500)
    ib = IndicesBuilder(ds, "vec")
    ivf = ib.train_ivf(4)
    ivf_other = IndicesBuilder(ds, "vec").train_ivf(4, sample_rate=32)
    pq = ib.train_pq(ivf, 4, sample_rate=8)
    pq_other = ib.train_pq(ivf, 4, sample_rate=4)
    common = {"num_partitions": 4, "ivf_centroids": ivf.centroids}
    mk = lambda frag, t="IVF_PQ", name="vec_idx", col="vec", **kw: ds.create_index_uncommitted(  # noqa: E731
        col, t, name=name, fragment_ids=[frag], **kw
    )
    s = {
        "pq0": mk(0, num_sub_vectors=4, pq_codebook=pq.codebook, **common),
        "pq1": mk(1, num_sub_vectors=4, pq_codebook=pq.codebook, **common),
        "pq2_codebook": mk(2, num_sub_vectors=4, pq_codebook=pq_other.codebook, **common),
        "pq2_centroids": mk(2, num_sub_vectors=4, pq_codebook=pq.codebook, num_partitions=4, ivf_centroids=ivf_other.centroids),
        "pq2_name": mk(2, name="other", num_sub_vectors=4, pq_codebook=pq.codebook, **common),
        "pq2_field": mk(2, col="vec2", num_sub_vectors=4, pq_codebook=pq.codebook, **common),
        "pq2_cosine": mk(2, num_sub_vectors=4, pq_codebook=pq.codebook, metric="cosine", **common),
        "sq2": mk(2, "IVF_SQ", **common),
        "sq3": mk(3, "IVF_SQ", **common),
        "rq2": mk(2, "IVF_RQ", rabitq_model=native_indices.build_rq_model(lancegen.DIM), **common),
        "rq3": mk(3, "IVF_RQ", rabitq_model=native_indices.build_rq_model(lancegen.DIM), **common),
        "hnsw4": mk(4, "IVF_HNSW_SQ", **common),
        "hnsw5": mk(5, "IVF_HNSW_SQ", **common),
        "hflat4": mk(4, "IVF_HNSW_FLAT", **common),
        "hflat5_m12": mk(5, "IVF_HNSW_FLAT", m=12, **common),
        "flat5": mk(5, "IVF_FLAT", **common),
    }
    ods = ls.open(uri)
    s["m01"] = ods.merge_existing_index_segments([s["pq0"], s["pq1"]])
    return uri, s


@pytest.mark.parametrize(
    "pick,exc,match",
    [
        ([], ls.InvalidInputError, "at least one"),
        (["pq0", "pq0"], ls.InvalidInputError, "appears twice"),
        (["m01", "pq1"], ls.InvalidInputError, "both cover fragment 1"),
        (["pq0", "pq2_name"], ls.InvalidInputError, "belongs to index \"other\""),
        (["pq0", "pq2_field"], ls.InvalidInputError, "indexes fields"),
        (["pq0", "pq2_centroids"], ls.InvalidInputError, "IVF centroids"),
        (["pq0", "pq2_codebook"], ls.InvalidInputError, "PQ codebook"),
        (["pq0", "pq2_cosine"], ls.InvalidInputError, "distance type"),
        (["pq0", "sq2"], ls.InvalidInputError, "index type"),
        (["rq2", "rq3"], ls.InvalidInputError, "RQ rotation"),
        (["hflat4", "flat5"], ls.InvalidInputError, "index type IVF_FLAT, where segment .* has IVF_HNSW_FLAT"),
    ],
)
def test_refused(world, pick, exc, match):
    uri, s = world
    before = dirs(uri)
    segs = [s[k] for k in pick]
    with pytest.raises(exc, match=match) as ei:
        ls.merge_existing_index_segments(uri, segs)
    # The message names a segment at fault.
    if len(pick) == 2 and pick[0] != pick[1]:
        uuid = s[pick[1]].uuid if not isinstance(s[pick[1]], ls.IndexSegment) else s[pick[1]].uuid
        first = s[pick[0]].uuid
        assert uuid in str(ei.value) or first in str(ei.value)
    assert dirs(uri) == before


def test_sq_bounds_requantized_by_default_strict_on_request(world, caplog):
    uri, s = world
    before = dirs(uri)
    with pytest.raises(ls.InvalidInputError, match="SQ bounds.*requantize_sq=False refuses") as ei:
        ls.merge_existing_index_segments(uri, [s["sq2"], s["sq3"]], requantize_sq=False)
    assert s["sq3"].uuid in str(ei.value)
    with pytest.raises(ls.InvalidInputError, match="SQ bounds"):
        ls.api.plan_segments(ls.open(uri), [ls.IndexSegment.from_lance_index(s[k]) for k in ("sq2", "sq3")], 2, requantize_sq=False)
    assert dirs(uri) == before
    with caplog.at_level(logging.INFO, logger="lance_segmerge"):
        out = ls.merge_existing_index_segments(uri, [s["sq2"], s["sq3"]])
    assert out.fragment_ids == (2, 3) and out.num_rows == 1000
    notes = [r for r in caplog.records if r.levelno == logging.INFO and "re-quantized" in r.getMessage()]
    assert len(notes) == 1 and "union" in notes[0].getMessage(), [r.getMessage() for r in caplog.records]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="lance_segmerge"):
        plan = ls.api.plan_segments(ls.open(uri), [ls.IndexSegment.from_lance_index(s[k]) for k in ("sq2", "sq3")], 2)
    assert plan.requantize_sq and len(plan.tasks) == 1
    # IVF_HNSW_SQ shards with their own bounds: re-quantized by default too,
    # refused on request.
    out = ls.merge_existing_index_segments(uri, [s["hnsw4"], s["hnsw5"]])
    assert out.fragment_ids == (4, 5) and out.num_rows == 1000 and out.index_type == "IVF_HNSW_SQ"
    with pytest.raises(ls.InvalidInputError, match="SQ bounds.*requantize_sq=False refuses"):
        ls.merge_existing_index_segments(uri, [s["hnsw4"], s["hnsw5"]], requantize_sq=False)


def test_missing_and_damaged_inputs(world, tmp_path):
    uri, s = world
    import shutil

    copy = str(tmp_path / "copy")
    shutil.copytree(uri, copy)
    before = dirs(copy)
    os.remove(os.path.join(copy, "_indices", s["pq1"].uuid, "auxiliary.idx"))
    with pytest.raises(ls.NotFoundError, match=s["pq1"].uuid):
        ls.merge_existing_index_segments(copy, [s["pq0"], s["pq1"]])
    assert dirs(copy) == before
    path = os.path.join(copy, "_indices", s["pq0"].uuid, "auxiliary.idx")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 100)
    with pytest.raises(ls.CorruptError, match=s["pq0"].uuid):
        ls.merge_existing_index_segments(copy, [s["pq0"], s["sq2"]])
    assert dirs(copy) == before


def test_future_version_and_bad_arguments(world):
    uri, s = world
    before = dirs(uri)
    seg = ls.IndexSegment.from_lance_index(s["pq1"])
    future = ls.IndexSegment.from_dict({**seg.to_dict(), "dataset_version": 99, "metadata": ""})
    with pytest.raises(ls.InvalidInputError, match="dataset version 99"):
        ls.merge_existing_index_segments(uri, [s["pq0"], future])
    with pytest.raises(ls.InvalidInputError):
        ls.merge_existing_index_segments(uri, [s["pq0"], "not a segment"])
    with pytest.raises(ls.InvalidInputError):
        ls.merge_existing_index_segments(uri, s["pq0"])
    with pytest.raises(ls.InvalidInputError, match="window_rows"):
        ls.merge_existing_index_segments(uri, [s["pq0"], s["pq1"]], window_rows=0)
    with pytest.raises(ls.InvalidInputError, match="index_uuid"):
        ls.merge_existing_index_segments(uri, [s["pq0"], s["pq1"]], index_uuid="nope")
    assert dirs(uri) == before
    assert dataclasses.is_dataclass(seg)
