"""Shallow clones (pylance's shallow_clone): the clone's manifest points its
data files, deletion files and index segments at the source's root (a base
path). We list and merge them where they live, write the output under the
clone's own root, commit it to the clone; pylance queries the result, and
the source is untouched."""

from __future__ import annotations

import os
import shutil

import lance
import lancegen
import numpy as np
import pytest

import lance_segmerge as ls


def tree(root: str) -> dict[str, tuple[int, int]]:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            st = os.stat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns)
    return out


def build_source(uri: str, stable: bool) -> np.ndarray:
    x = lancegen.vectors(2900, seed=71)
    lance.write_dataset(lancegen.table(x[:2000]), uri, max_rows_per_file=1000, enable_stable_row_ids=stable)
    lance.dataset(uri).create_index("vec", "IVF_PQ", name="vec_idx", **lancegen.index_params("IVF_PQ"))
    for lo in (2000, 2300, 2600):
        lance.write_dataset(lancegen.table(x[lo : lo + 300], lo), uri, mode="append")
        lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(uri).delete("id >= 100 AND id < 150 OR id >= 2350 AND id < 2360")
    return x


@pytest.mark.parametrize("stable", [False, True], ids=["addresses", "stable-row-ids"])
def test_merge_and_commit_a_shallow_clone(tmp_path, stable):
    src = str(tmp_path / "src")
    x = build_source(src, stable)
    pclone = lance.dataset(src).shallow_clone(str(tmp_path / "clone"), lance.dataset(src).version)
    clone = pclone.uri
    ref = lance.dataset(src).shallow_clone(str(tmp_path / "ref"), lance.dataset(src).version).uri
    before_src = tree(src)
    src_version = lance.dataset(src).version

    segs = ls.open(clone).list_index_segments("vec_idx")
    assert len(segs) == 4 and all(s.base_id == 0 for s in segs)
    assert all(s.num_rows and s.index_type == "IVF_PQ" for s in segs)  # read from the source's root

    out = ls.optimize(lance.dataset(clone), "vec_idx", fan_in=2, progress=False)
    assert isinstance(out, lance.LanceDataset)
    (merged,) = ls.open(clone).list_index_segments("vec_idx")
    assert merged.base_id is None and sorted(os.listdir(os.path.join(clone, "_indices", merged.uuid))) == ["auxiliary.idx", "index.idx"]
    live = 2900 - 60
    assert merged.num_rows == live  # deleted rows are dropped (stable ids: not owned; addresses: the deletion files)

    # pylance queries the clone, as it queries a clone it merged itself.
    lance.dataset(ref).optimize.optimize_indices(num_indices_to_merge=4)
    q = lancegen.vectors(20, seed=72)
    r_ours = lancegen.recall(lance.dataset(clone), x, q, k=10, nprobes=4)
    r_ref = lancegen.recall(lance.dataset(ref), x, q, k=10, nprobes=4)
    assert abs(r_ours - r_ref) <= 0.02, (r_ours, r_ref)
    assert lance.dataset(clone).count_rows() == live
    for qv in q[:5]:
        got = lance.dataset(clone).to_table(nearest={"column": "vec", "q": qv, "k": 10, "nprobes": 4}, columns=["id"])["id"].to_pylist()
        assert not [i for i in got if 100 <= i < 150 or 2350 <= i < 2360]

    # The source is untouched: same files, same versions, same answers.
    assert tree(src) == before_src
    assert lance.dataset(src).version == src_version
    assert len(lance.dataset(src).describe_indices()[0].segments) == 4
    # And work on the clone goes on: an append, a pylance delta, our merge.
    lance.write_dataset(lancegen.table(lancegen.vectors(200, seed=73), 5000), clone, mode="append")
    lance.dataset(clone).optimize.optimize_indices(num_indices_to_merge=0)
    ls.optimize(clone, "vec_idx", progress=False)
    assert len(lance.dataset(clone).describe_indices()[0].segments) == 1
    assert tree(src) == before_src


def test_scalar_builds_into_a_shallow_clones_index(tmp_path):
    """A BTREE and a ZONEMAP segment built for rows appended to a clone,
    whose existing segments live in the source's root: the builds read
    their page and zone sizes there, and pylance answers as a scan."""
    src = str(tmp_path / "src")
    build_source(src, False)
    ds = lance.dataset(src)
    ds.create_scalar_index("id", "BTREE", name="id_bt")
    lance.dataset(src).create_scalar_index("id", "ZONEMAP", name="id_zm")
    clone = lance.dataset(src).shallow_clone(str(tmp_path / "clone"), lance.dataset(src).version).uri
    before_src = tree(src)
    x = lancegen.vectors(300, seed=5)
    lance.write_dataset(lancegen.table(x, 5000), clone, mode="append")
    new = [f.fragment_id for f in lance.dataset(clone).get_fragments()][-1:]
    for name, typ in (("id_bt", "BTREE"), ("id_zm", "ZONEMAP")):
        seg = ls.build_index_segment(clone, "id", typ, new, name=name)
        ls.commit_existing_index_segments(clone, name, "id", [seg])
    filters = ["id = 5100", "id > 5250", "id BETWEEN 90 AND 160"]
    ds = lance.dataset(clone)
    for f in filters:
        assert sorted(ds.to_table(filter=f, columns=["id"])["id"].to_pylist()) == \
            sorted(ds.to_table(filter=f, columns=["id"], use_scalar_index=False)["id"].to_pylist()), f
    assert tree(src) == before_src
