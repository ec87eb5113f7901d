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
