#!/usr/bin/env python3
"""Run a command next to local object-store emulators on loopback.

    python tools/with_emulators.py -- go test ./...

Starts, each on a free port of 127.0.0.1:

- S3: moto's server mode (``moto[server]``, from `make venv`), exported as
  ``SEGMERGE_S3_ENDPOINT`` with dummy AWS credentials;
- Google Cloud Storage: fake-gcs-server (a Go module, installed by
  `make emulators` into .emulators/bin), exported as
  ``SEGMERGE_GCS_ENDPOINT`` and a bucket ``SEGMERGE_GCS_BUCKET``;
- Azure Blob Storage: Azurite's blob service (the npm package ``azurite``,
  installed by `make emulators` into .emulators/azurite), exported as
  ``SEGMERGE_AZURE_ENDPOINT`` (the blob service URL; the account is
  Azurite's well-known ``devstoreaccount1``), a container
  ``SEGMERGE_AZURE_CONTAINER``, and ``AZURITE_BLOB_STORAGE_URL`` (where
  object_store's ``use_emulator`` looks).

waits until each answers, runs the command, and stops them all when it
exits. The command never reaches a cloud metadata service: the GCE
metadata server and the Azure managed identity endpoint are pointed at a
closed loopback port. An emulator that is not installed is skipped with a message, and
``SEGMERGE_<GCS|AZURE>_SKIP`` tells the tests why.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parents[1]
EMULATORS = REPO / ".emulators"

AZURE_ACCOUNT = "devstoreaccount1"
# Azurite's documented well-known key (not a secret).
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
BUCKET = "segmerge"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find(env: str, *candidates: Path | str) -> Optional[str]:
    """The first existing executable among $env, candidates and PATH."""
    if os.environ.get(env):
        return os.environ[env]
    for c in candidates:
        if isinstance(c, Path):
            if c.exists():
                return str(c)
        elif shutil.which(c):
            return shutil.which(c)
    return None


def wait_until(ok: Callable[[], bool], proc: subprocess.Popen[bytes], what: str, log: str, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            print(f"with_emulators: {what} exited with {proc.returncode}; see {log}", file=sys.stderr)
            return False
        try:
            if ok():
                return True
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.1)
    print(f"with_emulators: {what} did not answer within {seconds:.0f}s; see {log}", file=sys.stderr)
    return False


def answers(url: str, accept: tuple[int, ...] = (200,)) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                return r.status in accept
        except urllib.error.HTTPError as e:
            return e.code in accept

    return check


def azure_shared_key_request(method: str, url: str, account: str, key: str, body: bytes = b"") -> int:
    """Send one Shared Key-signed request to an Azure blob endpoint (here:
    to create a container on Azurite) and return the status."""
    from urllib.parse import parse_qsl, urlsplit

    u = urlsplit(url)
    headers = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": "2023-11-03"}
    length = str(len(body)) if body else ""
    canon_headers = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
    canon_resource = f"/{account}{u.path}" + "".join(f"\n{k.lower()}:{v}" for k, v in sorted(parse_qsl(u.query)))
    to_sign = f"{method}\n\n\n{length}\n\n\n\n\n\n\n\n\n{canon_headers}{canon_resource}"
    sig = base64.b64encode(hmac.new(base64.b64decode(key), to_sign.encode(), hashlib.sha256).digest()).decode()
    req = urllib.request.Request(url, data=body or None, method=method,
                                 headers={**headers, "Authorization": f"SharedKey {account}:{sig}", "Content-Length": str(len(body))})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def gcs_create_bucket(endpoint: str, bucket: str) -> int:
    req = urllib.request.Request(f"{endpoint}/storage/v1/b?project=segmerge", data=json.dumps({"name": bucket}).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


class Emulators:
    def __init__(self, tmp: str) -> None:
        self.tmp = tmp
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.env: dict[str, str] = {}

    def spawn(self, name: str, argv: list[str]) -> tuple[subprocess.Popen[bytes], str]:
        log = os.path.join(self.tmp, f"{name}.log")
        with open(log, "wb") as f:
            proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.tmp)
        self.procs.append((name, proc))
        return proc, log

    def start_moto(self) -> None:
        port = free_port()
        proc, log = self.spawn("moto", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)])
        endpoint = f"http://127.0.0.1:{port}"
        if wait_until(answers(endpoint + "/moto-api/"), proc, "moto server", log):
            self.env.update({
                "SEGMERGE_S3_ENDPOINT": endpoint,
                "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
                "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
                "AWS_REGION": os.environ.get("AWS_REGION", "us-east-1"),
            })

    def start_gcs(self) -> None:
        exe = find("SEGMERGE_FAKE_GCS_SERVER", EMULATORS / "bin" / "fake-gcs-server", "fake-gcs-server")
        if exe is None:
            self.skip("GCS", "fake-gcs-server is not installed (`make emulators` installs it from the Go module proxy)")
            return
        port = free_port()
        endpoint = f"http://127.0.0.1:{port}"
        proc, log = self.spawn("fake-gcs-server", [
            exe, "-backend", "memory", "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
            "-public-host", "127.0.0.1", "-external-url", endpoint, "-log-level", "error",
        ])
        if not wait_until(answers(endpoint + "/_internal/healthcheck"), proc, "fake-gcs-server", log):
            self.skip("GCS", f"fake-gcs-server did not start (see {log})")
            return
        if gcs_create_bucket(endpoint, BUCKET) not in (200, 409):
            self.skip("GCS", "fake-gcs-server refused to create a bucket")
            return
        self.env.update({"SEGMERGE_GCS_ENDPOINT": endpoint, "SEGMERGE_GCS_BUCKET": BUCKET})

    def start_azurite(self) -> None:
        exe = find("SEGMERGE_AZURITE", EMULATORS / "azurite" / "node_modules" / ".bin" / "azurite-blob", "azurite-blob")
        if exe is None:
            self.skip("AZURE", "Azurite is not installed (`make emulators` installs it from npm; it needs node and npm)")
            return
        port = free_port()
        endpoint = f"http://127.0.0.1:{port}"
        proc, log = self.spawn("azurite", [
            exe, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
            "--skipApiVersionCheck", "--loose", "--silent", "--disableProductStyleUrl",
        ])
        # An unsigned request is refused (403), which proves it answers.
        if not wait_until(answers(f"{endpoint}/{AZURE_ACCOUNT}?comp=list", accept=(200, 403)), proc, "Azurite", log, seconds=90):
            self.skip("AZURE", f"Azurite did not start (see {log})")
            return
        url = f"{endpoint}/{AZURE_ACCOUNT}/{BUCKET}?restype=container"
        if azure_shared_key_request("PUT", url, AZURE_ACCOUNT, AZURE_KEY) not in (201, 409):
            self.skip("AZURE", "Azurite refused to create a container")
            return
        self.env.update({
            "SEGMERGE_AZURE_ENDPOINT": endpoint,
            "SEGMERGE_AZURE_CONTAINER": BUCKET,
            "AZURITE_BLOB_STORAGE_URL": endpoint,
        })

    def skip(self, store: str, why: str) -> None:
        print(f"with_emulators: {why}; the {store} tests will be skipped", file=sys.stderr)
        self.env[f"SEGMERGE_{store}_SKIP"] = why

    def stop(self) -> None:
        for _, proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for name, proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> int:
    args = sys.argv[1:]
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="segmerge-emulators-")
    emu = Emulators(tmp)
    # Tests must never reach a cloud metadata service (169.254.169.254):
    # point the GCE metadata server and the Azure managed identity
    # endpoint, for pylance and for us, at a closed loopback port.
    emu.env.update({"GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_ROOT": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9",
                    "IDENTITY_ENDPOINT": "http://127.0.0.1:9/metadata/identity/oauth2/token"})
    try:
        emu.start_moto()
        emu.start_gcs()
        emu.start_azurite()
        return subprocess.call(args, env={**os.environ, **emu.env})
    finally:
        emu.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
