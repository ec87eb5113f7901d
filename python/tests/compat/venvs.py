"""Virtual environments holding older pylance (and LanceDB) releases.

Each release gets its own environment under ``.compat/<name>/`` in the
checkout (git-ignored, kept between runs like ``.venv``), created with the
Python interpreter ``.venv`` was made from and filled through pip's cache.
The release's own dependency pins decide pyarrow and numpy; nothing from
the main environment leaks in. A half-made environment (interrupted
install) is detected by its missing ``.ready`` marker and rebuilt.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
ROOT = Path(os.environ.get("SEGMERGE_COMPAT_VENVS", REPO / ".compat"))


def _base_python() -> str:
    """The interpreter the running venv was made from (sys._base_executable
    points at it for venvs made by ``python -m venv``)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def requirement(name: str) -> list[str]:
    """The pip requirements for a release name: ``0.20.0`` is pylance 0.20.0,
    ``lancedb-0.40.0`` is LanceDB 0.40.0 (which pins its own Lance)."""
    if name.startswith("lancedb-"):
        return [f"lancedb=={name.split('-', 1)[1]}", "pandas"]
    return [f"pylance=={name}"]


# Prints [lance, pyarrow, numpy] versions; LanceDB embeds its Lance, so a
# LanceDB environment names LanceDB's version instead.
_PROBE = """
import json, pyarrow, numpy
try:
    import lance
    v = lance.__version__
except ImportError:
    import lancedb
    v = "lancedb-" + lancedb.__version__
print(json.dumps([v, pyarrow.__version__, numpy.__version__]))
"""


def python_for(name: str) -> Path:
    """The interpreter of ``name``'s environment, creating it if needed."""
    env = ROOT / name
    py = env / "bin" / "python"
    ready = env / ".ready"
    if ready.exists():
        return py
    ROOT.mkdir(parents=True, exist_ok=True)
    with open(ROOT / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists():
            return py
        shutil.rmtree(env, ignore_errors=True)
        subprocess.run([_base_python(), "-m", "venv", str(env)], check=True)
        subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirement(name)],
            check=True,
        )
        probe = subprocess.run([str(py), "-c", _PROBE], check=True, capture_output=True, text=True)
        ready.write_text(probe.stdout)
    return py


def versions(name: str) -> list[str]:
    """[lance, pyarrow, numpy] versions inside ``name``'s environment."""
    python_for(name)
    return list(json.loads((ROOT / name / ".ready").read_text()))


if __name__ == "__main__":
    for n in sys.argv[1:]:
        print(n, python_for(n), versions(n), flush=True)
