"""Datasets written by older pylance releases (and LanceDB): that release
writes a base index and optimize deltas, we merge them (a two-level chain),
and the same release and pylance 14.0.2 query the result with at least the
recall of the release's own optimize_indices on a copy; a segment we build
for an appended fragment answers as well as the release's own delta.

The releases come from SEGMERGE_COMPAT_RELEASES (comma-separated); the
default slice is the lines whose layouts we read or write differently:
0.23.2 (single-file IVF_PQ, which we refuse as unsupported; PQ bit width
spelled num_bits), 0.27.1 (PQ codebook inline, HNSW upper levels outside
the offsets, index version 0, empty legacy index details) and 2.0.1
(IVF_RQ with a rotation matrix and no code_dim).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lance
import pytest

import lance_segmerge as ls

sys.path.insert(0, str(Path(__file__).parent))
from compat import venvs  # noqa: E402

HERE = Path(__file__).parent / "compat"
RELEASES = os.environ.get("SEGMERGE_COMPAT_RELEASES", "0.23.2,0.27.1,2.0.1").split(",")
CASES = [
    {"name": "IVF_PQ-l2", "kind": "IVF_PQ", "metric": "l2"},
    {"name": "IVF_PQ-cosine", "kind": "IVF_PQ", "metric": "cosine"},
    {"name": "IVF_HNSW_SQ-l2", "kind": "IVF_HNSW_SQ", "metric": "l2"},
    {"name": "IVF_HNSW_PQ-l2", "kind": "IVF_HNSW_PQ", "metric": "l2"},
    {"name": "IVF_FLAT-l2", "kind": "IVF_FLAT", "metric": "l2"},
    {"name": "IVF_RQ-l2", "kind": "IVF_RQ", "metric": "l2"},
]
# SEGMERGE_COMPAT_CASES=all (make test-compat) adds every other kind a
# release may write; a release that cannot write one skips it.
if os.environ.get("SEGMERGE_COMPAT_CASES") == "all":
    CASES += [
        {"name": "IVF_SQ-l2", "kind": "IVF_SQ", "metric": "l2"},
        {"name": "IVF_PQ4-l2", "kind": "IVF_PQ4", "metric": "l2"},
        {"name": "IVF_RQ-cosine", "kind": "IVF_RQ", "metric": "cosine"},
        {"name": "IVF_HNSW_FLAT-cosine", "kind": "IVF_HNSW_FLAT", "metric": "cosine"},
        {"name": "IVF_HNSW_SQ-dot", "kind": "IVF_HNSW_SQ", "metric": "dot"},
        {"name": "IVF_PQ-l2-stable", "kind": "IVF_PQ", "metric": "l2", "stable": True},
        {"name": "IVF_HNSW_SQ-l2-stable", "kind": "IVF_HNSW_SQ", "metric": "l2", "stable": True},
    ]
TOLERANCE = 0.03
# What make test-compat finds that we do not handle yet, as strict expected
# failures (a fix shows up as XPASS and fails until its entry goes), keyed
# (release line, test) or (release line, test, case name), e.g.
# ("0.27", "merge", "IVF_PQ4-l2"): "why". Empty: the last full run found
# nothing left (docs/compatibility.md).
KNOWN_GAPS: dict[tuple[str, ...], str] = {}


def _run(py: Path, script: str, *args: str) -> list[dict]:
    env = {**os.environ, "LANCE_LOG": "error", "RUST_BACKTRACE": "0"}
    env.pop("PYTHONPATH", None)
    out = subprocess.run([str(py), str(HERE / script), *args], check=True, capture_output=True, text=True, env=env, timeout=900)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def _written(request: pytest.FixtureRequest, release: tuple, case: dict, test: str) -> tuple[str, Path, dict]:
    """What the release wrote for case; skips a case it cannot write and
    marks a known gap as a strict expected failure."""
    rel, py, written = release
    w = written[case["name"]]
    if "error" in w:
        pytest.skip(f"{rel} cannot write {case['name']}: {w['error']}")
    line = ".".join(rel.split(".")[:2])
    why = KNOWN_GAPS.get((line, test)) or KNOWN_GAPS.get((line, test, case["name"]))
    if why:
        request.applymarker(pytest.mark.xfail(reason=why, strict=True))
    return rel, py, w


def _copy(uri: str, tag: str) -> str:
    """A copy of the dataset at uri, next to it; a LanceDB table keeps its
    ``.lance`` suffix (LanceDB opens tables by name)."""
    dst = f"{uri[:-len('.lance')]}_{tag}.lance" if uri.endswith(".lance") else f"{uri}.{tag}"
    shutil.copytree(uri, dst)
    return dst


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
def test_release_reads_our_merge(request, release, case):
    rel, py, w = _written(request, release, case, "merge")
    ours = _copy(w["uri"], "ours")
    assert len(ls.open(ours).list_index_segments("vec_idx")) == w["segments"] > 1
    if case["kind"].startswith("IVF_PQ") and _release(rel) < (0, 24):
        _refuses_single_file(ours)
        return
    ls.optimize(ours, "vec_idx", executor="local", fan_in=3, progress=False)  # 6 -> 2 -> 1
    assert len(ls.open(ours).list_index_segments("vec_idx")) == 1
    report = ls.verify_index(ours, "vec_idx", queries=16)
    assert all(s.verdict in ("clean", "unverified") for s in report.segments), report
    _both_read_as_well(rel, py, case, own=w["own"], ours=ours)


@pytest.mark.parametrize("case", [c for c in CASES if not c["kind"].startswith("IVF_HNSW")], ids=lambda c: c["name"])
def test_release_reads_our_build(request, release, case):
    """A segment we build for the release's newest fragment, with its
    index's model, answers in that release as the release's own delta."""
    rel, py, w = _written(request, release, case, "build")
    ours = _copy(w["build"], "ours")
    if case["kind"].startswith("IVF_PQ") and _release(rel) < (0, 24):
        with pytest.raises(ls.UnsupportedError, match="single-file"):
            ls.read_index_model(ours, "vec_idx")
        return
    if case.get("stable"):
        # Builds read row ids from the fragments' row id sequences, which
        # they do not yet: refused before anything is written.
        before = _tree(ours)
        with pytest.raises(ls.UnsupportedError, match="stable row ids"):
            ls.build_index_segment(ours, "vec", case["kind"], [0], ls.read_index_model(ours, "vec_idx"), name="vec_idx")
        assert _tree(ours) == before
        return
    ds = ls.open(ours)
    covered = {f for s in ds.list_index_segments("vec_idx") for f in s.fragment_ids}
    new = sorted({f.fragment_id for f in lance.dataset(ours).get_fragments()} - covered)
    assert len(new) == 1, new
    seg = ls.build_index_segment(ours, "vec", case["kind"].replace("PQ4", "PQ"), new, ls.read_index_model(ours, "vec_idx"), name="vec_idx")
    ls.commit_existing_index_segments(ours, "vec_idx", "vec", [seg])
    assert len(ls.open(ours).list_index_segments("vec_idx")) == w["segments"] + 1
    _both_read_as_well(rel, py, case, own=w["build_own"], ours=ours)


def _both_read_as_well(rel: str, py: Path, case: dict, *, own: str, ours: str) -> None:
    """The release and pylance 14.0.2 each query ours with at least the
    recall they get on the release's own result."""
    jobs = json.dumps([{"uri": u, "metric": case["metric"], "kind": case["kind"]} for u in (own, ours)])
    for reader in (py, Path(sys.executable)):
        theirs, got = _run(reader, "reader.py", jobs)
        assert "error" not in got, (rel, reader, got)
        assert got["rows"] == theirs["rows"]
        assert got["recall"] >= theirs.get("recall", 0) - TOLERANCE, (rel, reader, got, theirs)
