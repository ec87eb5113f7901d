"""Datasets written by older pylance releases: that release writes a base
index and optimize deltas, we merge them (a two-level chain), and the same
release and pylance 14.0.2 query the result with at least the recall of the
release's own optimize_indices on a copy.

The releases come from SEGMERGE_COMPAT_RELEASES (comma-separated); the
default slice is the lines whose layouts we read or write differently:
0.23.2 (single-file IVF_PQ, which we refuse as unsupported; PQ bit width
spelled num_bits), 0.27.1 (PQ codebook inline) and 0.30.0 (HNSW upper
levels outside the offsets).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import lance_segmerge as ls

sys.path.insert(0, str(Path(__file__).parent))
from compat import venvs  # noqa: E402

HERE = Path(__file__).parent / "compat"
RELEASES = os.environ.get("SEGMERGE_COMPAT_RELEASES", "0.23.2,0.27.1,0.30.0").split(",")
CASES = [
    {"name": "IVF_PQ-l2", "kind": "IVF_PQ", "metric": "l2"},
    {"name": "IVF_PQ-cosine", "kind": "IVF_PQ", "metric": "cosine"},
    {"name": "IVF_HNSW_SQ-l2", "kind": "IVF_HNSW_SQ", "metric": "l2"},
    {"name": "IVF_HNSW_PQ-l2", "kind": "IVF_HNSW_PQ", "metric": "l2"},
    {"name": "IVF_FLAT-l2", "kind": "IVF_FLAT", "metric": "l2"},
]
TOLERANCE = 0.03


def _run(py: Path, script: str, *args: str) -> list[dict]:
    env = {**os.environ, "LANCE_LOG": "error", "RUST_BACKTRACE": "0"}
    env.pop("PYTHONPATH", None)
    out = subprocess.run([str(py), str(HERE / script), *args], check=True, capture_output=True, text=True, env=env, timeout=900)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def _release(name: str) -> tuple[int, ...]:
    return tuple(int(p) for p in name.split("-")[-1].split(".")[:2])


def _tree(uri: str) -> dict[str, int]:
    root = Path(uri)
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def _refuses_single_file(uri: str) -> None:
    """pylance 0.23 and earlier write IVF_PQ as one index.idx (format 0.x):
    every verb that reads it says so, and nothing is written."""
    before = _tree(uri)
    with pytest.raises(ls.UnsupportedError, match="single-file"):
        ls.optimize(uri, "vec_idx", executor="local", fan_in=3, progress=False)
    report = ls.verify_index(uri, "vec_idx", queries=4)
    assert {s.verdict for s in report.segments} == {"unverified"}, report
    assert _tree(uri) == before


@pytest.fixture(scope="module", params=RELEASES)
def release(request, tmp_path_factory):
    rel = request.param
    py = venvs.python_for(rel)
    root = tmp_path_factory.mktemp(f"compat-{rel}")
    written = {w["name"]: w for w in _run(py, "writer.py", str(root), json.dumps(CASES))}
    return rel, py, written


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_release_reads_our_merge(release, case):
    rel, py, written = release
    w = written[case["name"]]
    if "error" in w:
        pytest.skip(f"pylance {rel} cannot write {case['name']}: {w['error']}")
    ours = w["uri"] + ".ours"
    shutil.copytree(w["uri"], ours)
    assert len(ls.open(ours).list_index_segments("vec_idx")) == 6
    if case["kind"] == "IVF_PQ" and _release(rel) < (0, 24):
        _refuses_single_file(ours)
        return
    ls.optimize(ours, "vec_idx", executor="local", fan_in=3, progress=False)  # 6 -> 2 -> 1
    assert len(ls.open(ours).list_index_segments("vec_idx")) == 1
    report = ls.verify_index(ours, "vec_idx", queries=16)
    assert all(s.verdict in ("clean", "unverified") for s in report.segments), report
    jobs = json.dumps([{"uri": u, "metric": case["metric"], "kind": case["kind"]} for u in (w["own"], ours)])
    for reader in (py, Path(sys.executable)):
        own, got = _run(reader, "reader.py", jobs)
        assert "error" not in got, (rel, reader, got)
        assert got["rows"] == own["rows"]
        assert got["recall"] >= own.get("recall", 0) - TOLERANCE, (rel, reader, got, own)
