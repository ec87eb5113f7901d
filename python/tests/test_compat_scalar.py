"""Scalar indices written by older releases, then kept by pylance 14.0.2:
a table indexed under pylance 0.23.2, 0.27.1 or 2.0.1 (BITMAP keys in hash
order, LABEL_LIST
without a map of null lists, ZONEMAP without a map of null rows, NGRAM
posting lists in 2.0 buffers marked compression "none", FTS format 1) gets
14.0.2's optimize deltas after an upgrade; our optimize merges each index
and answers every filter as 14.0.2's own optimize_indices and a scan do,
and an index layout we do not read is UnsupportedError naming it, with the
dataset left as it was."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_segmerge as ls

sys.path.insert(0, str(Path(__file__).parent))
from compat import venvs  # noqa: E402

HERE = Path(__file__).parent / "compat"
#: the releases test_compat_releases' slice installs (ZONEMAP from 2.0.1 on)
RELEASES = os.environ.get("SEGMERGE_COMPAT_RELEASES", "0.23.2,0.27.1,2.0.1").split(",")
FILTERS = {
    "k_btree": ["k = 7", "k > 490", "k < -495"],
    "c_bitmap": ["c = 'c3'", "c IN ('c1', 'c36')"],
    "tags_label_list": ["array_has_any(tags, [4])", "array_has_all(tags, [1, 2])"],
    "z_zonemap": ["z IS NULL", "z = 7", "z > 490"],
    "c_ngram": ["contains(c, '36')", "contains(c, 'c1')"],
}


@pytest.fixture(scope="module", params=RELEASES)
def upgraded(request, tmp_path_factory) -> dict:
    """The release's table, then two appends with 14.0.2's deltas."""
    rel = request.param
    py = venvs.python_for(rel)
    root = tmp_path_factory.mktemp(f"compat-scalar-{rel}")
    env = {**os.environ, "LANCE_LOG": "error", "RUST_BACKTRACE": "0"}
    env.pop("PYTHONPATH", None)
    out = subprocess.run([str(py), str(HERE / "scalar_writer.py"), str(root)], check=True, capture_output=True, text=True,
                         env=env, timeout=900)
    w = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))
    assert w["version"] == rel and set(FILTERS) - {"z_zonemap"} <= set(w["indices"]), w
    rng = np.random.default_rng(9)
    for a in range(2):
        start = 100_000 + 2000 * a
        i = np.arange(start, start + 2000)
        lance.write_dataset(pa.table({
            "id": pa.array(i), "k": pa.array(rng.integers(-500, 500, 2000)),
            "z": pa.array(rng.integers(-500, 500, 2000), mask=rng.random(2000) < 0.05),
            "c": pa.array([f"c{x % 37}" for x in i]),
            "tags": pa.array([[int(x % 5), int(x % 3)] for x in i], type=pa.list_(pa.int64())),
        }), w["uri"], mode="append")
        for name in list(w["indices"]):
            try:
                lance.dataset(w["uri"]).optimize.optimize_indices(index_names=[name], num_indices_to_merge=0)
            except BaseException as e:  # noqa: BLE001 - pylance 14.0.2 panics on some of 0.23's (PanicException)
                w.setdefault("not_upgraded", {})[name] = f"{type(e).__name__}: {e}"
                w["indices"].remove(name)
    return w


def _ids(uri: str, f: str, use_index: bool = True) -> list[int]:
    return sorted(lance.dataset(uri).to_table(filter=f, columns=["id"], use_scalar_index=use_index)["id"].to_pylist())


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_an_index_of_the_release_merges_with_its_later_deltas(upgraded, tmp_path, name):
    if name not in upgraded["indices"]:
        why = upgraded.get("not_upgraded", {}).get(name)
        pytest.skip(f"{upgraded['version']}'s {name}: pylance 14.0.2's optimize_indices {why}" if why
                    else f"{upgraded['version']} builds no {name}")
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(upgraded["uri"], ours)
    shutil.copytree(upgraded["uri"], theirs)
    n = len(ls.open(ours).list_index_segments(name))
    assert n == 3  # the release's one segment and 14.0.2's two deltas
    lance.dataset(theirs).optimize.optimize_indices(index_names=[name], num_indices_to_merge=n)
    ls.optimize(ours, name, progress=False)
    assert len(ls.open(ours).list_index_segments(name)) == 1
    for f in FILTERS[name]:
        got = _ids(ours, f)
        assert got == _ids(theirs, f) == _ids(ours, f, use_index=False), f
        assert got, f
    (seg,) = ls.open(ours).list_index_segments(name)
    (own,) = ls.open(theirs).list_index_segments(name)
    assert seg.index_version == own.index_version  # the newer layout's, as pylance's merge records
    assert [s.verdict for s in ls.verify_index(ours, name).segments] == ["clean"]


def test_the_release_s_own_segments_verify_clean(upgraded):
    """Keys in hash order and the missing maps are the release's layout,
    not damage."""
    for name in set(FILTERS) & set(upgraded["indices"]):
        segs = ls.verify_index(upgraded["uri"], name).segments
        assert {s.verdict for s in segs} <= {"clean", "unverified"}, (name, segs)


def test_a_full_text_index_of_the_release_is_unsupported(upgraded, tmp_path):
    uri = str(tmp_path / "fts")
    shutil.copytree(upgraded["uri"], uri)
    before = sorted(p.relative_to(uri).as_posix() for p in Path(uri).rglob("*"))
    with pytest.raises(ls.UnsupportedError, match='format_version "1?"'):
        ls.optimize(uri, "c_inverted", progress=False)
    assert sorted(p.relative_to(uri).as_posix() for p in Path(uri).rglob("*")) == before
