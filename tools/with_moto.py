#!/usr/bin/env python3
"""Run a command with a local S3 server (moto's server mode) on loopback.

    python tools/with_moto.py -- go test ./...

Starts ``moto.server`` on a free port of 127.0.0.1, waits until it answers,
exports ``SEGMERGE_S3_ENDPOINT=http://127.0.0.1:<port>`` (plus dummy
credentials) to the command, and stops the server when the command exits.
Needs moto[server] (installed by `make venv`).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    args = sys.argv[1:]
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    port = free_port()
    log = open(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"moto-{port}.log"), "w")
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(endpoint + "/moto-api/", timeout=1)
                break
            except Exception:
                if server.poll() is not None:
                    print("moto server exited; see", log.name, file=sys.stderr)
                    return 1
                time.sleep(0.1)
        env = {
            **os.environ,
            "SEGMERGE_S3_ENDPOINT": endpoint,
            "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
            "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
            "AWS_REGION": os.environ.get("AWS_REGION", "us-east-1"),
        }
        return subprocess.call(args, env=env)
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


if __name__ == "__main__":
    sys.exit(main())
