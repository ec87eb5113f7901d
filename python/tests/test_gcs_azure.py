"""Every verb on gs:// and az:// datasets, against fake-gcs-server and
Azurite (started by tools/with_emulators.py): pylance 14.0.2 writes the
datasets, we list, plan, merge and commit, and pylance reads and queries
what we committed. Bad input: unknown options, bad credentials, a store
that goes away in the middle of a merge or a commit."""

from __future__ import annotations

import http.client
import http.server
import json
import os
import pickle
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator

import lance
import lancegen
import numpy as np
import pytest

import lance_segmerge as ls

AZURE_ACCOUNT = "devstoreaccount1"
# Azurite's documented well-known key: a credential to our code all the same,
# so it must never show in plans, reprs or errors.
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
GCS_TOKEN = "gcs-token-" + uuid.uuid4().hex[:12]


def _emulator(store: str, env: str) -> str:
    why = os.environ.get(f"SEGMERGE_{store}_SKIP")
    if why:
        pytest.skip(why)
    endpoint = os.environ.get(env)
    if not endpoint:
        pytest.skip(f"{env} is not set (run through tools/with_emulators.py, as `make test` does)")
    return endpoint


def _gcs_bucket(endpoint: str) -> str:
    bucket = "sm-" + uuid.uuid4().hex[:12]
    req = urllib.request.Request(f"{endpoint}/storage/v1/b?project=segmerge", data=json.dumps({"name": bucket}).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).close()
    return bucket


@dataclass
class Cloud:
    """A dataset on an emulator. ``opts`` are the storage options we and
    pylance read with; ``write_opts`` those pylance writes with."""

    name: str
    uri: str
    endpoint: str
    opts: dict[str, str]
    write_opts: dict[str, str]
    secret: str
    x: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))

    def via(self, endpoint: str, **extra: str) -> dict[str, str]:
        """Our options, reaching the emulator at another endpoint."""
        if self.name == "gcs":
            sa = json.loads(self.opts["service_account_key"])
            return {**self.opts, "service_account_key": json.dumps({**sa, "gcs_base_url": endpoint}), **extra}
        return {**self.opts, "endpoint": f"{endpoint}/{AZURE_ACCOUNT}", **extra}


def _gcs_sa(endpoint: str) -> str:
    # object_store's service account extensions for emulators.
    return json.dumps({"gcs_base_url": endpoint, "disable_oauth": True, "client_email": "", "private_key": "", "private_key_id": ""})


def new_cloud(name: str, rows: int = 2000, deltas: int = 4, delta_rows: int = 250) -> Cloud:
    if name == "gcs":
        endpoint = _emulator("GCS", "SEGMERGE_GCS_ENDPOINT")
        # pylance 14's GCS backend (object_store) writes with the XML API,
        # whose uploads fake-gcs-server does not take; its OpenDAL backend
        # speaks the JSON API, but doubles the path of a dataset below the
        # bucket root. So: one bucket per dataset, written at its root.
        uri = "gs://" + _gcs_bucket(endpoint)
        opts = {"service_account_key": _gcs_sa(endpoint), "allow_http": "true", "google_storage_token": GCS_TOKEN}
        write_opts = {"use_opendal": "true", "endpoint": endpoint, "allow_anonymous": "true",
                      "disable_vm_metadata": "true", "disable_config_load": "true"}
        secret = GCS_TOKEN
    else:
        endpoint = _emulator("AZURE", "SEGMERGE_AZURE_ENDPOINT")
        container = os.environ.get("SEGMERGE_AZURE_CONTAINER", "segmerge")
        uri = f"az://{container}/{uuid.uuid4().hex[:12]}/vectors.lance"
        opts = {"account_name": AZURE_ACCOUNT, "account_key": AZURE_KEY, "endpoint": f"{endpoint}/{AZURE_ACCOUNT}", "allow_http": "true"}
        write_opts = opts
        secret = AZURE_KEY
    x = lancegen.vectors(rows + deltas * delta_rows, seed=11)
    ds = lance.write_dataset(lancegen.table(x[:rows]), uri, storage_options=write_opts, max_rows_per_file=1000)
    ds.create_index("vec", "IVF_PQ", name="vec_idx", num_partitions=4, num_sub_vectors=4)
    for i in range(deltas):
        lo = rows + i * delta_rows
        lance.write_dataset(lancegen.table(x[lo : lo + delta_rows], lo), uri, mode="append", storage_options=write_opts)
        lance.dataset(uri, storage_options=write_opts).optimize.optimize_indices(num_indices_to_merge=0)
    return Cloud(name, uri, endpoint, opts, write_opts, secret, x)


@pytest.fixture(params=["gcs", "azure"])
def cloud(request: pytest.FixtureRequest) -> Cloud:
    return new_cloud(str(request.param))


def segment_uuids(pds: lance.LanceDataset) -> list[str]:
    return sorted(str(s.uuid) for s in pds.describe_indices()[0].segments)


def test_list_plan_merge_commit(cloud: Cloud, capsys: pytest.CaptureFixture[str]) -> None:
    from lance_segmerge import _cli

    pds = lance.dataset(cloud.uri, storage_options=cloud.opts)
    ds = ls.open(cloud.uri, storage_options=cloud.opts)
    segs = ds.list_index_segments("vec_idx")
    assert sorted(s.uuid for s in segs) == segment_uuids(pds) and len(segs) == 5
    flags = [a for k, v in cloud.opts.items() for a in ("-o", f"{k}={v}")]
    assert _cli.main(["ls", cloud.uri, "--index", "vec_idx", "--json", *flags]) == 0
    assert sorted(s["uuid"] for s in json.loads(capsys.readouterr().out)) == segment_uuids(pds)
    assert all(s.num_rows for s in segs)
    queries = lancegen.vectors(20, seed=1)
    before = lancegen.recall(pds, cloud.x, queries, k=10, nprobes=4)

    plan = ds.plan_index_segment_merge("vec_idx", segments_per_task=2, max_segments_to_merge=4)
    for text in (plan.to_json(), repr(plan), repr(plan.tasks), repr(ds), str(pickle.dumps(plan))):
        assert cloud.secret not in text
    merged = [ds.merge_existing_index_segments(t) for t in plan.tasks]
    v = ds.commit_existing_index_segments(plan.index_name, plan.column, merged, replaces=plan.sources)
    v = getattr(v, "version", v)
    for read_opts in {"object_store": cloud.opts, "write backend": cloud.write_opts}.values():
        pds = lance.dataset(cloud.uri, storage_options=read_opts)
        assert pds.version == v
        kept = sorted(set(s.uuid for s in segs) - set(plan.sources))
        assert segment_uuids(pds) == sorted(kept + [m.uuid for m in merged])
        after = lancegen.recall(pds, cloud.x, queries, k=10, nprobes=4)
        assert abs(after - before) <= 0.01


def test_optimize_with_worker_processes_then_pylance_appends(cloud: Cloud) -> None:
    ds = ls.open(cloud.uri, storage_options=cloud.opts)
    # 20 queries, as the other recall checks: the 0.01 slack is two
    # neighbours of 200 (a lossless merge can still flip a PQ distance tie
    # at the k boundary: one CI run lost one of 100, 0.32 -> 0.31, and
    # 0.32 - 0.31 > 0.01 in floating point).
    queries = lancegen.vectors(20, seed=2)
    before = lancegen.recall(lance.dataset(cloud.uri, storage_options=cloud.opts), cloud.x, queries, k=10, nprobes=4)
    # Workers get the options through the pickled Dataset (the user passed
    # them in); nothing else carries them.
    assert pickle.loads(pickle.dumps(ds)).storage_options == cloud.opts
    v = ls.optimize(ds, "vec_idx", executor="processes", max_workers=2, fan_in=2, progress=False)
    v = getattr(v, "version", v)
    pds = lance.dataset(cloud.uri, storage_options=cloud.opts)
    assert pds.version == v and len(pds.describe_indices()[0].segments) == 1
    assert abs(lancegen.recall(pds, cloud.x, queries, k=10, nprobes=4) - before) <= 0.01
    assert ls.cleanup(ls.open(cloud.uri, storage_options=cloud.opts), 0, dry_run=True) == []
    # pylance commits on top of our version (the same create-if-absent
    # protocol), and we list what it did.
    more = lancegen.vectors(200, seed=3)
    lance.write_dataset(lancegen.table(more, 10_000), cloud.uri, mode="append", storage_options=cloud.write_opts)
    lance.dataset(cloud.uri, storage_options=cloud.write_opts).optimize.optimize_indices(num_indices_to_merge=0)
    pds = lance.dataset(cloud.uri, storage_options=cloud.opts)
    assert pds.version == v + 2
    assert sorted(s.uuid for s in ls.open(cloud.uri, storage_options=cloud.opts).list_index_segments("vec_idx")) == segment_uuids(pds)


def test_credentials_from_the_environment(cloud: Cloud, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment variables pylance reads, and no storage_options:
    we find the dataset (also with variables set after the extension
    loaded), and so does pylance (in a fresh process: its Azure backend
    reads the environment once per process)."""
    if cloud.name == "gcs":
        env = {"GOOGLE_SERVICE_ACCOUNT_KEY": cloud.opts["service_account_key"], "GOOGLE_ALLOW_HTTP": "true"}
    else:
        env = {"AZURE_STORAGE_ACCOUNT_NAME": AZURE_ACCOUNT, "AZURE_STORAGE_ACCOUNT_KEY": AZURE_KEY,
               "AZURE_STORAGE_ENDPOINT": cloud.opts["endpoint"], "AZURE_ALLOW_HTTP": "true"}
    want = segment_uuids(lance.dataset(cloud.uri, storage_options=cloud.opts))
    ls.open(cloud.uri, storage_options=cloud.opts)  # the extension is loaded before the variables are set
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert sorted(s.uuid for s in ls.open(cloud.uri).list_index_segments("vec_idx")) == want
    code = ("import json, sys, lance; ds = lance.dataset(sys.argv[1]); "
            "print(json.dumps(sorted(str(s.uuid) for s in ds.describe_indices()[0].segments)))")
    out = subprocess.run([sys.executable, "-c", code, cloud.uri], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == want
    if cloud.name == "azure":
        # object_store's emulator switch: Azurite at AZURITE_BLOB_STORAGE_URL,
        # its well-known account and key.
        monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_KEY")
        monkeypatch.delenv("AZURE_STORAGE_ENDPOINT")
        monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", cloud.endpoint)
        opts = {"use_emulator": "true"}
        assert segment_uuids(lance.dataset(cloud.uri, storage_options={**opts, "account_name": AZURE_ACCOUNT})) == want
        assert sorted(s.uuid for s in ls.open(cloud.uri, storage_options=opts).list_index_segments("vec_idx")) == want


def test_unknown_storage_option(cloud: Cloud) -> None:
    typo = "service_acount" if cloud.name == "gcs" else "acount_key"
    with pytest.raises(ls.InvalidInputError, match="did you mean") as ei:
        ls.open(cloud.uri, storage_options={**cloud.opts, typo: "value-" + cloud.secret})
    assert typo in str(ei.value) and cloud.secret not in str(ei.value)
    # An option of another store is named as such.
    with pytest.raises(ls.InvalidInputError, match="s3://"):
        ls.open(cloud.uri, storage_options={**cloud.opts, "aws_secret_access_key": "x"})
    with pytest.raises(ls.InvalidInputError, match="allow_http"):
        ls.open(cloud.uri, storage_options={**cloud.opts, "allow_http": "maybe"})


def test_bad_credentials(cloud: Cloud, tmp_path: Any) -> None:
    if cloud.name == "azure":
        # Azurite checks Shared Key signatures.
        wrong = "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmcta2V5LXdyb25nLWtleQ=="
        with pytest.raises(ls.InvalidInputError, match="credentials") as ei:
            ls.open(cloud.uri, storage_options={**cloud.opts, "account_key": wrong})
        assert wrong not in str(ei.value)
        with pytest.raises(ls.InvalidInputError, match="base64") as ei:
            ls.open(cloud.uri, storage_options={**cloud.opts, "account_key": "not a key!"})
        assert "not a key" not in str(ei.value)
    else:
        # fake-gcs-server takes any token; what we check is the key itself.
        with pytest.raises(ls.InvalidInputError, match="missing.json"):
            ls.open(cloud.uri, storage_options={"service_account": str(tmp_path / "missing.json")})
        bad = json.dumps({"type": "service_account", "client_email": "e", "private_key_id": "k",
                          "private_key": "-----BEGIN PRIVATE KEY-----\nnot-a-key-" + GCS_TOKEN + "\n-----END PRIVATE KEY-----\n"})
        with pytest.raises(ls.InvalidInputError, match="private key") as ei:
            ls.open(cloud.uri, storage_options={"service_account_key": bad})
        assert GCS_TOKEN not in str(ei.value)


class GoingAway:
    """An HTTP proxy in front of an emulator that stops answering (it drops
    every connection) after a given number of writes under a path."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("http://").split(":")
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def forward(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                if proxy.count(self.command, self.path):
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                up = http.client.HTTPConnection(host, int(port), timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                up.request(self.command, self.path, body=body, headers=headers)
                resp = up.getresponse()
                data = resp.read()
                self.send_response_only(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                # A HEAD answer's length is the object's, not its (empty) body's.
                length = resp.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(data))
                self.send_header("Content-Length", length)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                up.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.lock = threading.Lock()
        self.marker: str | None = None
        self.writes_left = -1
        self.dead = False
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def die_after_writes(self, marker: str, writes: int) -> None:
        with self.lock:
            self.marker, self.writes_left = marker, writes

    def count(self, method: str, path: str) -> bool:
        """Whether this request finds the proxy dead."""
        with self.lock:
            if not self.dead and self.marker and method in ("PUT", "POST") and self.marker in path:
                if self.writes_left == 0:
                    self.dead = True
                self.writes_left -= 1
            return self.dead

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def going_away(cloud: Cloud) -> Iterator[GoingAway]:
    p = GoingAway(cloud.endpoint)
    yield p
    p.close()


def test_store_goes_away_mid_merge_and_mid_commit(cloud: Cloud, going_away: GoingAway) -> None:
    pds = lance.dataset(cloud.uri, storage_options=cloud.opts)
    version, before = pds.version, segment_uuids(pds)
    queries = lancegen.vectors(10, seed=4)
    recall_before = lancegen.recall(pds, cloud.x, queries, k=10, nprobes=4)
    flaky = ls.open(cloud.uri, storage_options=cloud.via(going_away.url, client_max_retries="1", timeout="5s"))
    plan = flaky.plan_index_segment_merge("vec_idx", segments_per_task=5)
    (task,) = plan.tasks
    # The store goes away once the merge has written one file of its output.
    going_away.die_after_writes("_indices", 1)
    with pytest.raises(ls.StorageError) as ei:
        flaky.merge_existing_index_segments(task)
    assert isinstance(ei.value, OSError) and cloud.secret not in str(ei.value)

    # The dataset is exactly as it was; what the merge wrote is referenced
    # by no version, and cleanup finds and removes it.
    direct = ls.open(cloud.uri, storage_options=cloud.opts)
    pds = lance.dataset(cloud.uri, storage_options=cloud.opts)
    assert pds.version == version and segment_uuids(pds) == before
    assert lancegen.recall(pds, cloud.x, queries, k=10, nprobes=4) == recall_before
    orphans = ls.cleanup(direct, 0, dry_run=True)
    assert len(orphans) == 1 and orphans[0]["files"] >= 1 and orphans[0]["uuid"] not in before
    assert [o["uuid"] for o in ls.cleanup(direct, 0)] == [orphans[0]["uuid"]]
    assert ls.cleanup(direct, 0, dry_run=True) == []

    # A commit whose store goes away before the manifest is published
    # changes nothing either.
    merged = direct.merge_existing_index_segments(task)
    gone = GoingAway(cloud.endpoint)
    try:
        gone.die_after_writes("_versions", 0)
        flaky = ls.open(cloud.uri, storage_options=cloud.via(gone.url, client_max_retries="1", timeout="5s"))
        with pytest.raises(ls.StorageError):
            flaky.commit_existing_index_segments(plan.index_name, plan.column, [merged], replaces=plan.sources)
    finally:
        gone.close()
    pds = lance.dataset(cloud.uri, storage_options=cloud.opts)
    assert pds.version == version and segment_uuids(pds) == before
    # The same merged segment commits once the store is back.
    v = direct.commit_existing_index_segments(plan.index_name, plan.column, [merged], replaces=plan.sources)
    pds = lance.dataset(cloud.uri, storage_options=cloud.opts)
    assert pds.version == getattr(v, "version", v) == version + 1 and segment_uuids(pds) == [merged.uuid]
