"""Scalar and full-text indices as pylance 14.0.2 writes them (a base and
an optimize delta per append, for BTREE, BITMAP, LABEL_LIST, INVERTED,
NGRAM, ZONEMAP and BLOOMFILTER): their segments are listed with their type
and files, and every verb that handles vector indices only refuses them
with an UnsupportedError naming the type (never NotFoundError, which would
say the dataset is damaged), leaving the dataset exactly as it was."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_segmerge as ls

ROWS = 600
APPENDS = 3
#: index name -> (column, pylance index type, our type name, the files pylance writes)
INDICES = {
    "id_idx": ("id", "BTREE", "BTREE", {"page_data.lance", "page_lookup.lance"}),
    "cat_idx": ("cat", "BITMAP", "BITMAP", {"bitmap_page_lookup.lance"}),
    "tags_idx": ("tags", "LABEL_LIST", "LABEL_LIST", {"bitmap_page_lookup.lance"}),
    "text_idx": ("text", "INVERTED", "INVERTED", {"metadata.lance", "part_0_tokens.lance", "part_0_invert.lance", "part_0_docs.lance"}),
    # 256-document posting blocks (FTS format 3), which we do not read yet
    "text_v3": ("text", "INVERTED", "INVERTED", {"metadata.lance", "part_0_tokens.lance", "part_0_invert.lance", "part_0_docs.lance"}),
    "cat_ngram": ("cat", "NGRAM", "NGRAM", {"ngram_postings.lance"}),
    "id_zm": ("id", "ZONEMAP", "ZONEMAP", {"zonemap.lance"}),
    "id_bf": ("id", "BLOOMFILTER", "BLOOMFILTER", {"bloomfilter.lance"}),
}


INDEX_VERSIONS = {"LABEL_LIST": 1, "INVERTED": 2}
#: index name -> create_scalar_index parameters
PARAMS = {"text_v3": {"format_version": 3, "block_size": 256}}
#: indices merges handle; the others are refused by every verb
MERGED = set(INDICES) - {"text_v3"}


def _table(start: int) -> pa.Table:
    rng = np.random.default_rng(start)
    i = np.arange(start, start + ROWS)
    return pa.table({
        "id": pa.array(i),
        "cat": pa.array([f"c{k % 7}" for k in i]),
        "tags": pa.array([[f"t{k % 3}", f"t{k % 5}"] for k in i]),
        "text": pa.array([f"hello world {k} lance segment" for k in i]),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.normal(size=ROWS * 8).astype(np.float32)), 8),
    })


@pytest.fixture(scope="module")
def scalar_uri(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("scalar") / "t")
    ds = lance.write_dataset(_table(0), uri)
    for name, (col, kind, _, _) in INDICES.items():
        ds.create_scalar_index(col, kind, name=name, **PARAMS.get(name, {}))
    ds.create_index("vec", "IVF_PQ", num_partitions=2, num_sub_vectors=2)
    for a in range(APPENDS):
        ds = lance.write_dataset(_table(ROWS * (a + 1)), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
    return uri


@pytest.fixture
def uri(scalar_uri, tmp_path):
    dst = str(tmp_path / "t")
    shutil.copytree(scalar_uri, dst)
    return dst


def _state(uri: str) -> tuple:
    """The dataset's version and every file under it (name, size)."""
    files = []
    for root, _, names in os.walk(uri):
        files += [(os.path.relpath(os.path.join(root, n), uri), os.path.getsize(os.path.join(root, n))) for n in names]
    return lance.dataset(uri).version, sorted(files)


@pytest.mark.parametrize("name", sorted(INDICES))
def test_scalar_segments_are_listed_with_their_type_and_files(scalar_uri, name):
    col, _, ours, files = INDICES[name]
    segs = ls.open(scalar_uri).list_index_segments(name)
    pylance = {s.uuid for d in lance.dataset(scalar_uri).describe_indices() if d.name == name for s in d.segments}
    assert {s.uuid for s in segs} == pylance and len(segs) == 1 + APPENDS
    # pylance 14.0.2 writes LABEL_LIST segments as index version 1 and
    # INVERTED as 2, the others 0 (the reference notes say every scalar type
    # is 0); an INVERTED index of FTS format 3 as 3.
    assert {s.index_version for s in segs} == {3 if name == "text_v3" else INDEX_VERSIONS.get(ours, 0)}
    for s in segs:
        assert s.index_type == ours
        assert s.num_partitions is None
        on_disk = set(os.listdir(os.path.join(scalar_uri, "_indices", s.uuid)))
        assert {f.path for f in s.files} == on_disk
        assert files <= on_disk
        assert s.file_version == "2.2"  # what pylance 14.0.2 writes for scalar and full-text files
        if ours in ("BTREE", "ZONEMAP", "BLOOMFILTER"):
            assert s.num_rows == ROWS  # BTREE: a row per indexed row; ZONEMAP, BLOOMFILTER: the zones' lengths
        elif ours in ("BITMAP", "LABEL_LIST"):
            # Counted from the row maps the segment stores, checked against
            # the column's values in the fragments it covers.
            ds = lance.dataset(scalar_uri)
            values = pa.concat_tables([ds.get_fragment(f).to_table(columns=[col]) for f in s.fragment_ids])[col].to_pylist()
            per_key: dict = {}
            for v in values:
                for k in set(v) if ours == "LABEL_LIST" else [v]:
                    per_key[k] = per_key.get(k, 0) + 1
            assert s.distinct_keys == len(per_key)
            assert s.largest_key_rows == max(per_key.values())
            assert s.num_rows == (ROWS if ours == "BITMAP" else None)
        elif name == "text_idx":
            # Documents and tokens, from the segment's files.
            assert s.num_rows == ROWS and s.distinct_keys == ROWS + 4  # hello, world, lanc, segment and the numbers
        else:
            assert s.num_rows is None  # a layout we do not read: listed by its files
    # Tables render with the unknown numbers left out.
    assert segs.to_arrow().num_rows == len(segs)
    assert ours in segs.to_text()


def test_listing_every_index_keeps_to_vector_ones(scalar_uri):
    assert {s.name for s in ls.open(scalar_uri).list_index_segments()} == {"vec_idx"}


#: verbs that only vector indices have
VECTOR_VERBS = ("health", "reindex", "read_index_model", "search_segment")


@pytest.mark.parametrize("name", ["cat_idx", "text_idx", "text_v3", "id_bf", "tags_idx", "cat_ngram"])
def test_every_verb_refuses_a_scalar_index_by_its_type(uri, name):
    """Layouts we do not merge yet are refused by every verb that would
    read them (verify reports the structure check skipped); BITMAP and
    LABEL_LIST (merged, test_bitmap.py), NGRAM (test_ngram.py),
    BLOOMFILTER (test_zonemap.py) and INVERTED (test_fts.py) by the verbs
    of vector indices."""
    ours = INDICES[name][2]
    before = _state(uri)
    segs = ls.open(uri).list_index_segments(name)
    calls = {
        "plan": lambda: ls.plan_index_segment_merge(uri, name),
        "merge": lambda: ls.merge_existing_index_segments(uri, segs[:2]),
        "optimize": lambda: ls.optimize(uri, name, progress=False),
        "maintain": lambda: ls.maintain(uri, name),
        "verify": lambda: ls.verify_index(uri, name),
        "health": lambda: ls.health(uri, name),
        "repair": lambda: ls.repair_index(uri, name),
        "reindex": lambda: ls.reindex(uri, name, progress=False),
        "read_index_model": lambda: ls.read_index_model(uri, name),
        "search_segment": lambda: ls.search_segment(uri, name, segs[0].uuid, np.zeros(8, np.float32)),
    }
    if name in MERGED:
        calls = {v: c for v, c in calls.items() if v in VECTOR_VERBS}
    else:  # an INVERTED index of 256-document blocks
        rep = calls.pop("verify")()
        assert [c.verdict for c in rep.segments[0].checks if c.name == "structure"] == ["skipped"]
        assert any("posting_block_size" in c.message for c in rep.segments[0].checks)
        calls.pop("repair")
    for verb, call in calls.items():
        with pytest.raises(ls.UnsupportedError, match=ours) as info:
            call()
        assert not isinstance(info.value, ls.NotFoundError), verb
    assert _state(uri) == before
    # pylance answers as before.
    assert lance.dataset(uri).count_rows("id = 5") == 1


def test_a_mix_of_vector_and_scalar_segments_is_refused(uri):
    vec = ls.open(uri).list_index_segments("vec_idx")
    bt = ls.open(uri).list_index_segments("id_idx")
    before = _state(uri)
    for mix in ([vec[0], bt[0]], [bt[0], vec[0]]):
        with pytest.raises((ls.UnsupportedError, ls.InvalidInputError), match="BTREE|vector"):
            ls.merge_existing_index_segments(uri, mix)
    assert _state(uri) == before


def test_our_commit_takes_a_pylance_built_scalar_segment(uri):
    """commit_existing_index_segments commits segments of any index type
    that pylance built uncommitted (it checks their files and coverage)."""
    ds = lance.write_dataset(_table(ROWS * (APPENDS + 1)), uri, mode="append")
    frag = ds.get_fragments()[-1].fragment_id
    seg = ds.create_index_uncommitted("cat", "BITMAP", name="cat_idx", fragment_ids=[frag], replace=True)
    out = ls.commit_existing_index_segments(ds, "cat_idx", "cat", [seg])
    ds = lance.dataset(uri)
    assert out.version == ds.version
    assert len(ls.open(uri).list_index_segments("cat_idx")) == 2 + APPENDS
    assert "ScalarIndexQuery" in ds.scanner(filter="cat = 'c3'").explain_plan()
    assert ds.count_rows("cat = 'c3'") == sum(1 for k in range(ROWS * (APPENDS + 2)) if k % 7 == 3)


def test_cli_lists_and_refuses_scalar_indices(uri):
    run = [sys.executable, "-m", "lance_segmerge"]
    out = subprocess.run(run + ["ls", uri, "--index", "cat_idx"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "BITMAP" in out.stdout
    out = subprocess.run(run + ["optimize", uri, "--index", "text_v3"], capture_output=True, text=True, env=dict(os.environ))
    assert out.returncode == 7, (out.returncode, out.stderr)  # UnsupportedError
    assert "INVERTED" in out.stderr and "posting_block_size" in out.stderr and "NotFound" not in out.stderr


def test_maintain_all_passes_over_what_it_cannot_read_and_merges_the_rest(uri, caplog):
    """maintain_all over the whole table: every index but the INVERTED one
    of 256-document blocks (not read yet) ends in one segment, that one is left as
    it was with a warning naming it; named explicitly, it is refused."""
    text_before = [s.uuid for s in ls.open(uri).list_index_segments("text_v3")]
    with pytest.raises(ls.UnsupportedError, match="INVERTED"):
        ls.maintain_all(uri, index_names=["id_idx", "text_v3"], policy="all")
    with pytest.raises(ls.InvalidInputError, match="index_names"):
        ls.maintain_all(uri, index_names=["id_idx", "id_idx"])
    with caplog.at_level("WARNING", logger="lance_segmerge.maintain"):
        reports = ls.maintain_all(uri, policy="all")
    assert "text_v3" in caplog.text and "INVERTED" in caplog.text
    assert {r.index_name for r in reports} == MERGED | {"vec_idx"}
    for name in {r.index_name for r in reports}:
        assert len(ls.open(uri).list_index_segments(name)) == 1, name
    assert [s.uuid for s in ls.open(uri).list_index_segments("text_v3")] == text_before
    # pylance searches the merged full-text index: every row has "hello".
    hits = lance.dataset(uri).to_table(full_text_query=lance.query.MatchQuery("hello", "text"), columns=["id"])
    assert sorted(hits["id"].to_pylist()) == list(range(ROWS * (APPENDS + 1)))
    assert lance.dataset(uri).count_rows("id = 5") == 1


def test_cli_maintain_without_an_index_maintains_every_index(uri):
    run = [sys.executable, "-m", "lance_segmerge", "maintain", uri, "--policy", "all"]
    out = subprocess.run(run + ["--watch", "5"], capture_output=True, text=True)
    assert out.returncode == 3 and "--index" in out.stderr, (out.returncode, out.stderr)  # InvalidInputError
    out = subprocess.run(run + ["--executor", "local"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for name in MERGED | {"vec_idx"}:
        assert f"{name}: version" in out.stdout, (name, out.stdout)
        assert len(ls.open(uri).list_index_segments(name)) == 1, name
    assert "text_v3" in out.stderr and "INVERTED" in out.stderr  # passed over, with a warning
