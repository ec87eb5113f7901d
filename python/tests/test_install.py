"""`pip install .` works on a fresh environment, and the installed package
imports and runs from outside the source tree."""

from __future__ import annotations

import os
import subprocess
import venv

import pytest
from conftest import COMPAT, REPO
from lance_segmerge._version import __version__


@pytest.mark.slow
def test_pip_install_fresh_venv(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = str(env_dir / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run(
        [py, "-m", "pip", "install", "-q", str(REPO)],
        check=True,
        env=env,
        cwd=tmp_path,
        timeout=900,
    )
    script = (
        "import lance_segmerge, os, sys\n"
        "assert 'site-packages' in lance_segmerge.__file__, lance_segmerge.__file__\n"
        "import importlib.metadata\n"
        "print(lance_segmerge.kernel_version(), importlib.metadata.version('lance-segmerge'))\n"
        f"segs = lance_segmerge.open({str(COMPAT / 'v0.27.1' / 'pq_in_schema')!r}).list_index_segments()\n"
        "assert segs[0].index_type == 'IVF_PQ', segs\n"
        "import importlib.resources as r\n"
        "files = sorted(p.name for p in r.files('lance_segmerge._native').iterdir())\n"
        "assert not [f for f in files if f.endswith(('.c', '.go', '.h'))], files\n"
        "assert (r.files('lance_segmerge') / 'py.typed').is_file()\n"
    )
    out = subprocess.run([py, "-c", script], check=True, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout.strip() == f"{__version__} {__version__}"  # the kernel's and the installed distribution's
