#!/usr/bin/env python3
"""Former name of tools/with_emulators.py, kept so that old commands work:
runs a command next to moto (S3), fake-gcs-server (GCS) and Azurite (Azure
Blob) on loopback.

    python tools/with_moto.py -- go test ./...
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from with_emulators import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
