"""Scalar indices written by older releases, then kept by pylance 14.0.2:
a table indexed under pylance 0.23.2, 0.27.1 or 2.0.1 (BITMAP keys in hash
order, LABEL_LIST
without a map of null lists, ZONEMAP without a map of null rows, NGRAM
posting lists in 2.0 buffers marked compression "none", FTS format 1) gets
14.0.2's optimize deltas after an upgrade; our optimize merges each index
and answers every filter (and full-text query) as 14.0.2's own
optimize_indices and a scan do, and an index layout we do not read is
UnsupportedError naming it, with the dataset left as it was."""

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
from compat.scalar_writer import nested, number_keys, text  # noqa: E402

HERE = Path(__file__).parent / "compat"
#: the releases test_compat_releases' slice installs (ZONEMAP from 2.0.1 on)
RELEASES = os.environ.get("SEGMERGE_COMPAT_RELEASES", "0.23.2,0.27.1,2.0.1").split(",")
FILTERS = {
    "k_btree": ["k = 7", "k > 490", "k < -495"],
    "c_bitmap": ["c = 'c3'", "c IN ('c1', 'c36')"],
    "b_bitmap": ["b = 7", "b IN (0, 299)", "b IS NULL", "b > 290"],
    "tags_label_list": ["array_has_any(tags, [4])", "array_has_all(tags, [1, 2])"],
    "z_zonemap": ["z IS NULL", "z = 7", "z > 490"],
    "c_ngram": ["contains(c, '36')", "contains(c, 'c1')"],
}
#: full-text indices and their queries (t_inverted keeps positions where
#: the release does; pylance 14.0.2 drops them converting 0.23/0.27's)
FTS = {
    "c_inverted": ["c3", "c1 c36"],
    "t_inverted": ["alpha", "lance merge w3", "segment", '"alpha beta"', '"index merge segment"'],
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
    assert w["version"] == rel and set(FILTERS) - {"z_zonemap"} | set(FTS) <= set(w["indices"]), w
    w["pristine"] = str(root / "pristine")
    shutil.copytree(w["uri"], w["pristine"])
    rng = np.random.default_rng(9)
    for a in range(2):
        start = 100_000 + 2000 * a
        i = np.arange(start, start + 2000)
        lance.write_dataset(pa.table({
            "id": pa.array(i), "k": pa.array(rng.integers(-500, 500, 2000)),
            "z": pa.array(rng.integers(-500, 500, 2000), mask=rng.random(2000) < 0.05),
            "c": pa.array([f"c{x % 37}" for x in i]),
            "b": number_keys(rng),
            "tags": pa.array([[int(x % 5), int(x % 3)] for x in i], type=pa.list_(pa.int64())),
            "t": pa.array(text(i, rng)),
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
    # The release reads our merge as it reads 14.0.2's (rows, or the same error).
    assert _release_filters(upgraded["version"], ours, name) == _release_filters(upgraded["version"], theirs, name)
    (seg,) = ls.open(ours).list_index_segments(name)
    (own,) = ls.open(theirs).list_index_segments(name)
    assert seg.index_version == own.index_version  # the newer layout's, as pylance's merge records
    assert [s.verdict for s in ls.verify_index(ours, name).segments] == ["clean"]


NESTED_FILTERS = {"sx_btree": ["s.x = 7", "s.x > 95", "s.x IS NULL"], "sc_bitmap": ["s.c = 'c3'", "s.c IN ('c1', 'c5')"]}


def test_the_release_s_indices_of_a_struct_s_members_take_new_rows(upgraded, tmp_path):
    """The release indexed members of a struct ("s.x", "s.c") and left an
    append unindexed; 14.0.2 appends another. pylance 14.0.2's own
    optimize_indices fails on such an index; maintain_all(index_new=True)
    reads the release's data files, indexes the new rows and merges each
    index to one segment that answers as a scan, verifies clean, and that
    the release itself answers with."""
    if not upgraded["nested_indices"]:
        pytest.skip(f"{upgraded['version']} indexes no member of a struct")
    uri = str(tmp_path / "n")
    shutil.copytree(upgraded["nested_uri"], uri)
    lance.write_dataset(nested(10_000), uri, mode="append")
    with pytest.raises(OSError, match="No column with name"):
        lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    filters = [f for n in upgraded["nested_indices"] for f in NESTED_FILTERS[n]]
    truth = {f: _ids(uri, f, use_index=False) for f in filters}
    assert all(truth.values()), truth
    reports = ls.maintain_all(uri, index_new=True, policy="all")
    assert {r.index_name: (r.indexed_rows, r.segments_after) for r in reports} == \
        {n: (4000, 1) for n in upgraded["nested_indices"]}
    for name in upgraded["nested_indices"]:
        (seg,) = ls.open(uri).list_index_segments(name)
        assert sorted(seg.fragment_ids) == [0, 1, 2]
        assert [s.verdict for s in ls.verify_index(uri, name).segments] == ["clean"]
    assert {f: _ids(uri, f) for f in filters} == truth
    assert _release(upgraded["version"], uri, "filters", filters) == truth


def test_zones_of_a_dictionary_column_the_release_wrote(upgraded, tmp_path):
    """The release wrote a dictionary column in its own data files; our
    ZONEMAP build of those fragments reads its dictionary pages and writes
    the file pylance 14.0.2 writes, and a ZONEMAP 14.0.2 created merges
    with a delta we build for 14.0.2's append and answers as a scan."""
    from lance.file import LanceFileReader

    uri = str(tmp_path / "n")
    shutil.copytree(upgraded["nested_uri"], uri)
    mine = ls.build_index_segment(uri, "d", "ZONEMAP", [0, 1], name="d_zm")
    theirs = lance.dataset(uri).create_index_uncommitted("d", "ZONEMAP", name="d_zm", fragment_ids=[0, 1])
    a = LanceFileReader(f"{uri}/_indices/{mine.uuid}/zonemap.lance")
    b = LanceFileReader(f"{uri}/_indices/{theirs.uuid}/zonemap.lance")
    assert a.read_all().to_table() == b.read_all().to_table()
    assert sum(a.read_all().to_table()["null_count"].to_pylist()) == len([v for v in range(2 * 2000) if v % 13 == 0])
    assert a.read_global_buffer(1) == b.read_global_buffer(1)  # the null rows, fragment by fragment
    lance.dataset(uri).create_scalar_index("d", "ZONEMAP", name="d_idx")
    lance.write_dataset(nested(10_000), uri, mode="append")
    (rep,) = ls.maintain_all(uri, index_names=["d_idx"], index_new=True, policy="all")
    assert (rep.indexed_rows, rep.segments_after) == (2000, 1)
    assert [s.verdict for s in ls.verify_index(uri, "d_idx").segments] == ["clean"]
    for f in ["d = 'd3'", "d IS NULL"]:
        assert _ids(uri, f) == _ids(uri, f, use_index=False), f
    assert _ids(uri, "d IS NULL")


def test_the_release_s_own_segments_verify_clean(upgraded):
    """Keys in hash order, the missing maps and FTS format 1 are the
    release's layout, not damage."""
    for name in (set(FILTERS) | set(FTS)) & set(upgraded["indices"]):
        segs = ls.verify_index(upgraded["uri"], name).segments
        assert {s.verdict for s in segs} <= {"clean", "unverified"}, (name, segs)
    # The number keys' order is the release's: hash order up to 2.0.1.
    keys = _bitmap_keys(upgraded["pristine"], "b_bitmap")
    old = tuple(int(x) for x in upgraded["version"].split(".")) <= (2, 0, 1)
    assert (keys != sorted(keys, key=lambda k: (k is not None, k))) == old, keys[:20]


def _bitmap_keys(uri: str, name: str) -> list:
    """The keys of a one-segment BITMAP as its file holds them."""
    from lance.file import LanceFileReader

    (ix,) = [i for i in lance.dataset(uri).list_indices() if i["name"] == name]
    path = Path(uri) / "_indices" / ix["uuid"] / "bitmap_page_lookup.lance"
    return LanceFileReader(str(path)).read_all().to_table()["keys"].to_pylist()


def _fts(uri: str, name: str, positions: bool) -> dict:
    """Every query's rows and scores, or the error pylance raises (a
    phrase query on an index without positions)."""
    ds = lance.dataset(uri)
    out = {}
    for q in FTS[name]:
        try:
            t = ds.to_table(full_text_query={"query": q, "columns": [name.split("_")[0]]}, columns=["id"])
            out[q] = sorted(zip(t["id"].to_pylist(), np.round(t["_score"].to_numpy(), 4).tolist()))
        except ValueError as e:
            out[q] = f"ValueError: {str(e)[:60]}"
    # Phrase queries need positions (an error without them).
    assert all(isinstance(v, list) and v for q, v in out.items() if positions or not q.startswith('"')), out
    return out


def _release(release: str, uri: str, mode: str, queries: list[str]) -> dict:
    """Each query's answer as the release's own pylance gives it
    (compat/release_answers.py): ids (with scores for fts), or its error's
    type."""
    env = {**os.environ, "LANCE_LOG": "error"}
    env.pop("PYTHONPATH", None)
    out = subprocess.run([str(venvs.python_for(release)), str(HERE / "release_answers.py"), uri, mode, json.dumps(queries)],
                         check=True, capture_output=True, text=True, env=env, timeout=300)
    return json.loads(out.stdout.splitlines()[-1])


def _release_filters(release: str, uri: str, name: str) -> dict:
    return _release(release, uri, "filters", FILTERS[name])


def _release_fts(release: str, uri: str, name: str) -> dict:
    got = _release(release, uri, "fts:" + name.split("_")[0], FTS[name])
    assert all(isinstance(v, list) and v for v in got.values()), got
    return got


def _invert(uri: str, name: str) -> tuple[dict, pa.Table, pa.Table]:
    """The merged segment's metadata.lance keys, invert file and docs file."""
    from lance.file import LanceFileReader

    (ix,) = [i for i in lance.dataset(uri).list_indices() if i["name"] == name]
    d = Path(uri) / "_indices" / ix["uuid"]
    keys = LanceFileReader(str(d / "metadata.lance")).metadata().schema.metadata
    return ({k.decode(): v.decode() for k, v in keys.items() if k != b"params"},
            LanceFileReader(str(d / "part_0_invert.lance")).read_all().to_table(),
            LanceFileReader(str(d / "part_0_docs.lance")).read_all().to_table())


@pytest.mark.parametrize("name", sorted(FTS))
def test_a_full_text_index_of_the_release_merges_as_pylance_merges_it(upgraded, tmp_path, name):
    """FTS format 1: 2.0.1 wrote it with no format keys, and pylance
    14.0.2 keeps it in its deltas (format_version "1", fixed32 tails,
    positions per document); 14.0.2 converts 0.23/0.27's older layout to
    it at its first delta. Our merge writes format 1 as 14.0.2's merge
    does: the same posting blocks, scores, impacts and positions, the same
    answers; a segment we build for a new fragment is format 1 too."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(upgraded["uri"], ours)
    shutil.copytree(upgraded["uri"], theirs)
    n = len(ls.open(ours).list_index_segments(name))
    assert n >= 2
    lance.dataset(theirs).optimize.optimize_indices(index_names=[name], num_indices_to_merge=n)
    ls.optimize(ours, name, progress=False)
    assert len(ls.open(ours).list_index_segments(name)) == 1
    # 2.0.1's t_inverted keeps positions; 14.0.2's conversion of 0.23/0.27's drops them
    positions = name == "t_inverted" and upgraded["version"] == "2.0.1"
    want = _fts(theirs, name, positions)
    assert _fts(ours, name, positions) == want
    (k_ours, inv_ours, docs_ours), (k_theirs, inv_theirs, docs_theirs) = _invert(ours, name), _invert(theirs, name)
    assert docs_ours.equals(docs_theirs) and docs_ours.schema.metadata == docs_theirs.schema.metadata  # row ids, token counts, total_tokens
    assert k_ours == k_theirs and k_ours["format_version"] == "1" and k_ours["posting_tail_codec"] == "fixed32_v1", (k_ours, k_theirs)
    assert inv_ours.schema == inv_theirs.schema
    assert inv_ours.equals(inv_theirs)  # blocks, scores, lengths, impacts (and positions), row for row
    assert ("_position" in inv_ours.column_names) == positions, inv_ours.column_names
    assert [s.verdict for s in ls.verify_index(ours, name).segments] == ["clean"]
    (merged,), (own,) = ls.open(ours).list_index_segments(name), ls.open(theirs).list_index_segments(name)
    # pylance's merge records FTS format 2 (field 15) over format 1 files;
    # ours keeps the format its deltas record, 1: all else is the same.
    assert merged.index_version == own.index_version == 1
    assert merged.index_details[:-2] == own.index_details[:-2]
    assert (merged.index_details[-2:], own.index_details[-2:]) == (b"\x78\x01", b"\x78\x02")
    if upgraded["version"] == "2.0.1":
        # The release that created the index reads our merge as it reads 14.0.2's.
        assert _release_fts(upgraded["version"], ours, name) == _release_fts(upgraded["version"], theirs, name)

    # A new fragment: pylance's optimize delta, and one we build.
    rng = np.random.default_rng(3)
    i = np.arange(200_000, 200_300)
    more = pa.table({"id": pa.array(i), "k": pa.array(rng.integers(-500, 500, 300)), "z": pa.array(rng.integers(-500, 500, 300)),
                     "c": pa.array([f"c{x % 37}" for x in i]), "tags": pa.array([[1, 2]] * 300, type=pa.list_(pa.int64())),
                     "t": pa.array(text(i, rng))})
    for uri in (ours, theirs):
        lance.write_dataset(more, uri, mode="append")
    lance.dataset(theirs).optimize.optimize_indices(index_names=[name], num_indices_to_merge=0)
    col = name.split("_")[0]
    new = max(f.fragment_id for f in lance.dataset(ours).get_fragments())
    seg = ls.build_index_segment(ours, col, "INVERTED", [new], name=name)
    ls.commit_existing_index_segments(ours, name, col, [seg])
    (delta,) = [x for x in ls.open(theirs).list_index_segments(name) if tuple(x.fragment_ids) == (new,)]
    # recorded as pylance records its own delta: version 1, FTS format 1
    assert (seg.index_version, seg.index_details) == (delta.index_version, delta.index_details)
    assert seg.index_version == 1 and seg.format_version == 1
    assert _fts(ours, name, positions) == _fts(theirs, name, positions)
    lance.dataset(ours).optimize.optimize_indices(index_names=[name], num_indices_to_merge=2)  # pylance merges ours
    assert _fts(ours, name, positions) == _fts(theirs, name, positions)


def test_a_full_text_index_of_the_layout_before_format_1_is_unsupported(upgraded, tmp_path):
    """0.23/0.27 wrote one invert.lance per segment and no metadata.lance:
    verify calls it unverified (not damaged) and a build that must read it
    is UnsupportedError naming the layout, with the dataset untouched."""
    uri = str(tmp_path / "t")
    shutil.copytree(upgraded["pristine"], uri)
    if upgraded["version"] == "2.0.1":
        assert [s.verdict for s in ls.verify_index(uri, "c_inverted").segments] == ["clean"]  # format 1 already
        return
    (v,) = ls.verify_index(uri, "c_inverted").segments
    assert v.verdict == "unverified" and v.damage == (), v
    lance.write_dataset(pa.table({"id": [1], "k": [1], "z": [1], "c": ["c1"], "tags": pa.array([[1]], type=pa.list_(pa.int64())),
                                  "t": ["alpha"]}), uri, mode="append")
    new = max(f.fragment_id for f in lance.dataset(uri).get_fragments())
    before = sorted(p.relative_to(uri).as_posix() for p in Path(uri).rglob("*"))
    with pytest.raises(ls.UnsupportedError, match="pylance 0.27 and earlier"):
        ls.build_index_segment(uri, "c", "INVERTED", [new], name="c_inverted")
    assert sorted(p.relative_to(uri).as_posix() for p in Path(uri).rglob("*")) == before
