"""A password in the dataset URI (s3://KEY:SECRET@bucket/path, which
pylance accepts) never appears in a repr, a log line, an error message, a
plan or the CLI's output; a pickled Dataset keeps it, as it keeps its
storage_options, so that workers can reopen the dataset."""

from __future__ import annotations

import logging
import os
import pickle
import shutil

import pytest

import lance_segmerge as ls
from lance_segmerge import _cli
from lance_segmerge._validate import redact_uri

SECRET = "s3cr3tPassw0rd"
KEY = "AKIDUSERNAME"


def test_userinfo_masked_everywhere(delta_datasets, tmp_path, caplog, capsys):
    path = str(tmp_path / "ds")
    shutil.copytree(delta_datasets["IVF_PQ"].uri, path)
    uri = f"file://{KEY}:{SECRET}@{path}"
    seen: list[str] = []
    caplog.set_level(logging.DEBUG, logger="lance_segmerge")

    ds = ls.open(uri)
    seen += [repr(ds), ds.display_uri, str(ds.__dict__.get("_info"))]
    plan = ds.plan_index_segment_merge("vec_idx", segments_per_task=2)
    seen += [plan.dataset_uri, plan.to_json(), repr(plan)]
    for call in (lambda: ds.list_index_segments("nope"), lambda: ls.open(uri + "-missing"),
                 lambda: ls.open(uri, version=99), lambda: ls.open(f"ftp://{KEY}:{SECRET}@host/x"),
                 lambda: ls.merge_existing_index_segments(ds, [ds.list_index_segments("vec_idx")[1]] * 2)):
        with pytest.raises(ls.SegmergeError) as ei:
            call()
        seen.append(str(ei.value))
    v = ls.optimize(uri, "vec_idx", progress=False).version
    ls.cleanup(uri, 0, dry_run=True)
    assert _cli.main(["ls", uri]) == 0
    assert _cli.main(["-vv", "plan", uri, "--index", "nope"]) == 4
    assert _cli.main(["ls", f"file://{KEY}:{SECRET}@{path}-missing"]) == 4
    out = capsys.readouterr()
    seen += [out.out, out.err]
    seen += [r.getMessage() for r in caplog.records]
    assert ls.open(path).version == v  # the same dataset
    assert seen and all(SECRET not in s and KEY not in s for s in seen), [s for s in seen if SECRET in s or KEY in s]
    assert f"file://***@{path}" in out.out
    # A pickled Dataset keeps the URI (as it keeps storage_options): workers
    # reopen the dataset with it.
    assert pickle.loads(pickle.dumps(ds)).uri == uri


def test_hand_made_plan_is_masked(delta_datasets):
    plan = ls.open(delta_datasets["IVF_PQ"].uri).plan_index_segment_merge("vec_idx", segments_per_task=2)
    d = {**plan.to_dict(), "dataset_uri": f"s3://{KEY}:{SECRET}@bucket/t.lance"}
    p = ls.MergePlan.from_dict(d)
    assert p.dataset_uri == "s3://***@bucket/t.lance" and SECRET not in repr(p) and SECRET not in p.to_json()


@pytest.mark.parametrize(
    "uri,want",
    [
        (f"s3://{KEY}:{SECRET}@bucket/t.lance", "s3://***@bucket/t.lance"),
        (f"s3://{KEY}@bucket", "s3://***@bucket"),
        ("s3://bucket/p@th", "s3://bucket/p@th"),
        ("/data/a@b.lance", "/data/a@b.lance"),
        (f"gs://u:{SECRET}@b/x?y=1", "gs://***@b/x?y=1"),
    ],
)
def test_redact_uri(uri, want):
    assert redact_uri(uri) == want
    assert os.fspath(want)
