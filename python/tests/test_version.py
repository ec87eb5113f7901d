"""One version number: the package's (python/lance_segmerge/_version.py),
the Go kernel's (kernel_version(), also the writer version our manifests
record), the CLI's and the built distribution's."""

from __future__ import annotations

import re
import subprocess
import sys

import lance_segmerge as ls
import pytest
from conftest import REPO
from lance_segmerge._version import __version__


def test_kernel_and_package_versions_are_one():
    assert re.fullmatch(r"\d+\.\d+\.\d+([ab]\d+|rc\d+|\.dev\d+)?", __version__), __version__
    assert ls.__version__ == __version__
    assert ls.kernel_version() == __version__


def test_cli_prints_the_version():
    out = subprocess.run([sys.executable, "-m", "lance_segmerge", "--version"], capture_output=True, text=True, timeout=120,
                         cwd=REPO, env={"PYTHONPATH": str(REPO / "python"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"lance-segmerge {__version__} (kernel {__version__})"


def test_the_distribution_takes_the_package_version():
    # pyproject.toml holds no version of its own: setuptools reads _version.py.
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["project"]["dynamic"] == ["version"] and "version" not in meta["project"]
    out = subprocess.run([sys.executable, "setup.py", "--version"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == __version__
