"""The Go reader reads every column of real index files (index.idx and
auxiliary.idx of every index type pylance builds) exactly as pylance's
LanceFileReader does, in each file format version."""

from __future__ import annotations

import base64
import json
import os

import lance
import lancegen
import pytest
from filecheck import assert_same, go_inspect
from lance.file import LanceFileReader

TYPES = [
    ("IVF_FLAT", {}),
    ("IVF_SQ", {}),
    ("IVF_PQ", {"num_sub_vectors": 4}),
    ("IVF_PQ", {"num_sub_vectors": 8, "num_bits": 4}),
    ("IVF_RQ", {"num_bits": 1}),
    ("IVF_RQ", {}),
    ("IVF_HNSW_FLAT", {}),
    ("IVF_HNSW_SQ", {}),
    ("IVF_HNSW_PQ", {"num_sub_vectors": 4}),
]


@pytest.fixture(scope="module")
def index_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("idxfiles")
    out = []
    x = lancegen.vectors(3000, seed=3)
    for version in ["2.0", "2.1", "2.2"]:
        for i, (itype, params) in enumerate(TYPES):
            uri = str(root / f"{version}-{i}")
            ds = lance.write_dataset(lancegen.table(x), uri, data_storage_version=version, max_rows_per_file=1000)
            ds.create_index("vec", itype, name="vec_idx", num_partitions=4, **params)
            (seg,) = lance.dataset(uri).describe_indices()[0].segments
            out.append((version, itype, params, os.path.join(uri, "_indices", seg.uuid)))
    return out


def test_index_files_equal_pylance(index_dirs):
    for version, itype, params, d in index_dirs:
        for name in ("index.idx", "auxiliary.idx"):
            path = os.path.join(d, name)
            label = f"{version} {itype} {params} {name}"
            ref = LanceFileReader(path)
            tbl = ref.read_all().to_table()
            ours = go_inspect(path)
            assert ours["version"] == version, label
            assert ours["num_rows"] == tbl.num_rows, label
            assert [f["name"] for f in ours["fields"]] == tbl.column_names, label
            for f, af in zip(ours["fields"], tbl.schema):
                assert f["nullable"] == af.nullable, f"{label} {f['name']} nullability"
            for col in tbl.column_names:
                assert_same(tbl[col], ours["columns"][col], f"{label} {col}")
            meta = {k.encode(): base64.b64decode(v) for k, v in ours["metadata"].items()}
            assert meta == dict(ref.metadata().schema.metadata), label
            for i, b in enumerate(ours["global_buffers"], start=1):
                assert base64.b64decode(b) == ref.read_global_buffer(i), f"{label} buffer {i}"


def test_partition_ranges(index_dirs):
    """Read one IVF partition at a time, as the merge does."""
    from lance_segmerge import _ffi

    for version, itype, params, d in index_dirs:
        if "HNSW" in itype:
            continue
        path = os.path.join(d, "auxiliary.idx")
        tbl = LanceFileReader(path).read_all().to_table()
        seg_json = go_inspect(path, 0, 0)
        lengths = json.loads(
            _ffi.call("DescribeIVF", path)
        )["lengths"]
        start = 0
        for n in lengths:
            part = go_inspect(path, start, start + n)
            for col in tbl.column_names:
                assert_same(tbl[col].slice(start, n), part["columns"][col], f"{version} {itype} {col} [{start},+{n})")
            start += n
        assert start == tbl.num_rows and seg_json["num_rows"] == start
