"""Every verb on s3:// datasets, against a local S3 server (moto), with
pylance reading the results through the same endpoint."""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import lance
import lancegen
import pytest

import lance_segmerge as ls

SECRET = "not-a-real-secret-" + uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def s3_endpoint():
    endpoint = os.environ.get("SEGMERGE_S3_ENDPOINT")
    proc = None
    if not endpoint:
        pytest.importorskip("moto", reason="moto[server] is needed for the S3 tests")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        endpoint = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                urllib.request.urlopen(endpoint + "/moto-api/", timeout=1)
                break
            except Exception:
                time.sleep(0.1)
    yield endpoint
    if proc is not None:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def s3_dataset(s3_endpoint):
    boto3 = pytest.importorskip("boto3")
    bucket = "segmerge-" + uuid.uuid4().hex[:10]
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key=SECRET).create_bucket(Bucket=bucket)
    opts = {"aws_endpoint": s3_endpoint, "aws_access_key_id": "testing", "aws_secret_access_key": SECRET,
            "aws_region": "us-east-1", "allow_http": "true"}
    uri = f"s3://{bucket}/vectors.lance"
    x = lancegen.vectors(3000, seed=9)
    ds = lance.write_dataset(lancegen.table(x[:2000]), uri, storage_options=opts, max_rows_per_file=1000)
    ds.create_index("vec", "IVF_PQ", name="vec_idx", num_partitions=4, num_sub_vectors=4)
    for i in range(4):
        lo = 2000 + 250 * i
        lance.write_dataset(lancegen.table(x[lo : lo + 250], lo), uri, mode="append", storage_options=opts)
        lance.dataset(uri, storage_options=opts).optimize.optimize_indices(num_indices_to_merge=0)
    return uri, opts, x


def test_list_plan_merge_commit_on_s3(s3_dataset):
    uri, opts, x = s3_dataset
    pds = lance.dataset(uri, storage_options=opts)
    ds = ls.open(uri, storage_options=opts)
    segs = ds.list_index_segments("vec_idx")
    assert [s.uuid for s in segs] == [s.uuid for s in pds.describe_indices()[0].segments]
    assert len(segs) == 5 and all(s.num_rows for s in segs)
    before = lancegen.recall(pds, x, lancegen.vectors(20, seed=1), k=10, nprobes=4)

    plan = ds.plan_index_segment_merge("vec_idx", segments_per_task=2, max_segments_to_merge=4)
    assert SECRET not in plan.to_json() and SECRET not in repr(plan) and SECRET not in repr(ds)
    merged = [ds.merge_existing_index_segments(t) for t in plan.tasks]
    v = ds.commit_existing_index_segments(plan.index_name, plan.column, merged, replaces=plan.sources).version
    pds = lance.dataset(uri, storage_options=opts)
    assert pds.version == v
    assert sorted(s.uuid for s in pds.describe_indices()[0].segments) == sorted([segs[0].uuid] + [m.uuid for m in merged])
    after = lancegen.recall(pds, x, lancegen.vectors(20, seed=1), k=10, nprobes=4)
    assert abs(after - before) <= 0.01
    # S3 listings are ordered: no version hint, V2 names.
    assert ds.manifest_scheme == "V2"


def test_optimize_on_s3_with_worker_processes(s3_dataset):
    uri, opts, x = s3_dataset
    ds = ls.open(uri, storage_options=opts)
    # Workers get the options through the pickled Dataset (the user passed
    # them in); nothing else carries them.
    assert pickle.loads(pickle.dumps(ds)).storage_options == opts
    v = ls.optimize(ds, "vec_idx", executor="processes", max_workers=2, fan_in=2, progress=False).version
    pds = lance.dataset(uri, storage_options=opts)
    assert pds.version == v and len(pds.describe_indices()[0].segments) == 1
    pds.to_table(nearest={"column": "vec", "q": x[0], "k": 5})
    assert ls.cleanup(ds, 0, dry_run=True) == []


def test_errors_do_not_leak_credentials(s3_dataset):
    uri, opts, _ = s3_dataset
    with pytest.raises(ls.NotFoundError) as ei:
        ls.open(uri, storage_options=opts).list_index_segments("nope")
    assert SECRET not in str(ei.value)
    with pytest.raises(ls.NotFoundError) as ei:
        ls.open(uri.replace("vectors", "missing"), storage_options=opts)
    assert SECRET not in str(ei.value)
    bad = {**opts, "aws_endpoint": opts["aws_endpoint"].replace("http://", "http://user:" + SECRET + "@")}
    with pytest.raises(ls.SegmergeError) as ei:
        ls.open(uri, storage_options={**bad, "allow_http": "false"})
    assert SECRET not in str(ei.value)
    with pytest.raises(ls.InvalidInputError, match="allow_http"):
        ls.open(uri, storage_options={**opts, "allow_http": "false"})


def test_cli_and_uri_with_storage_options(s3_dataset, capsys):
    from lance_segmerge import _cli

    uri, opts, x = s3_dataset
    flags = [a for k, v in opts.items() for a in ("-o", f"{k}={v}")]
    assert _cli.main(["ls", uri, "--index", "vec_idx", "--json", *flags]) == 0
    listed = __import__("json").loads(capsys.readouterr().out)
    assert [s["uuid"] for s in listed] == [s.uuid for s in ls.open(uri, storage_options=opts).list_index_segments("vec_idx")]
    # Without the options the endpoint is unknown: a clean error, no traceback.
    assert _cli.main(["ls", uri, "-o", "aws_region=us-east-1", "-o", "aws_access_key_id=x",
                      "-o", "aws_secret_access_key=y", "-o", "aws_endpoint=http://127.0.0.1:9", "-o", "allow_http=true",
                      "-o", "max_retries=0", "-o", "timeout=2s"]) == _cli.EXIT_CODES[ls.StorageError]
    assert "error:" in capsys.readouterr().err
    assert _cli.main(["ls", uri, "-o", "no-equals-sign"]) == _cli.EXIT_USAGE
    # optimize() takes a URI and its options (a Dataset carries its own).
    before = len(ls.open(uri, storage_options=opts).list_index_segments("vec_idx"))
    v = ls.optimize(uri, "vec_idx", storage_options=opts, progress=False).version
    assert lance.dataset(uri, storage_options=opts).version == v
    assert len(ls.open(uri, storage_options=opts).list_index_segments("vec_idx")) <= before
    with pytest.raises(ls.InvalidInputError, match="storage_options"):
        ls.optimize(ls.open(uri, storage_options=opts), "vec_idx", storage_options=opts)


def test_unreachable_endpoint_is_a_storage_error():
    opts = {"aws_endpoint": "http://127.0.0.1:9", "allow_http": "true", "aws_region": "us-east-1",
            "aws_access_key_id": "x", "aws_secret_access_key": "y", "max_retries": "1", "timeout": "2s"}
    with pytest.raises(ls.StorageError) as ei:
        ls.open("s3://bucket/t.lance", storage_options=opts)
    assert isinstance(ei.value, OSError) and "127.0.0.1:9" in str(ei.value)
