"""The wheels of `make wheel`, installed as a user gets them.

For each CPython line, a fresh virtual environment whose PATH holds no Go
toolchain and no C compiler installs the wheel (with the ``lance`` extra
from PyPI), then runs ``lance-segmerge --version``, the small demo and a
short slice of this test suite against that installation. The aarch64
wheels are checked with auditwheel and by their ELF headers; they are run
only where an aarch64 interpreter can be started (not on this machine
kind, which has no emulator installed).

`make test-wheel` builds the wheels and runs this file with
SEGMERGE_WHEEL_DIR pointing at them; `make test` does not (a build of the
eight wheels takes minutes).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO
from lance_segmerge._version import __version__

WHEELS = os.environ.get("SEGMERGE_WHEEL_DIR")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not WHEELS, reason="make test-wheel runs these (SEGMERGE_WHEEL_DIR names the wheels of make wheel)"),
]
sys.path.insert(0, str(REPO / "tools"))
from build_wheels import WORK, find_python  # noqa: E402

PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
# Fast files that need neither the test tools (absent from a wheel) nor Ray
# or Dask: a merge, a plan, scalar segments, and bad input.
SLICE = ["test_plan.py", "test_btree.py", "test_errors.py", "test_merge.py"]
NEEDS_TEST_TOOLS = ["test_rq_128d_merge_agrees_with_pylance_optimize"]  # reads files with DescribeIVF
NEWEST_POLICY = (2, 28)  # the issue: no newer than manylinux_2_28


def wheel_for(version: str, arch: str) -> Path:
    tag = "cp" + version.replace(".", "")
    found = glob.glob(os.path.join(WHEELS or "", f"lance_segmerge-{__version__}-{tag}-{tag}-*{arch}*.whl"))
    assert len(found) == 1, f"expected one {tag} {arch} wheel of version {__version__} in {WHEELS}, found {found}"
    return Path(found[0])


def auditwheel_policy(wheel: Path) -> tuple[int, int]:
    show = subprocess.run([os.path.join(WORK, "tools", "bin", "auditwheel"), "show", str(wheel)],
                          capture_output=True, text=True, check=True).stdout
    m = re.search(r'consistent with the following platform tag:\s*"manylinux_(\d+)_(\d+)_', show)
    assert m, show
    return int(m.group(1)), int(m.group(2))


def extension_of(wheel: Path, tmp: Path) -> Path:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.startswith("lance_segmerge/_native/_segmerge") and n.endswith(".so")]
        return Path(z.extract(name, tmp))


def elf_facts(so: Path) -> tuple[str, list[str]]:
    header = subprocess.run(["readelf", "-h", str(so)], capture_output=True, text=True, check=True).stdout
    dynamic = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True, check=True).stdout
    machine = re.search(r"Machine:\s*(.+)", header)
    assert machine, header
    return machine.group(1).strip(), re.findall(r"Shared library: \[([^\]]+)\]", dynamic)


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
@pytest.mark.parametrize("version", PYTHONS)
def test_wheel_is_manylinux_without_libpython(version, arch, tmp_path):
    wheel = wheel_for(version, arch)
    assert auditwheel_policy(wheel) <= NEWEST_POLICY
    machine, needed = elf_facts(extension_of(wheel, tmp_path))
    assert machine == {"x86_64": "Advanced Micro Devices X86-64", "aarch64": "AArch64"}[arch]
    # Only the C library: no libpython (a static interpreter loads it too),
    # no libresolv, nothing auditwheel would have to graft.
    assert sorted(needed) == ["libc.so.6", "libpthread.so.0"], needed


@pytest.mark.parametrize("version", PYTHONS)
def test_wheel_installs_and_runs_without_go(version, tmp_path):
    python = find_python(version)
    if python is None:
        pytest.skip(f"no CPython {version} on this machine")
    wheel = wheel_for(version, "x86_64")
    env_dir = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(env_dir)], check=True)
    bin_dir = str(env_dir / "bin")
    for tool in ("go", "gcc", "cc", "clang", "zig"):
        assert shutil.which(tool, path=bin_dir) is None, tool
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "GOROOT", "CC")}
    env["PATH"] = bin_dir
    py = str(env_dir / "bin" / "python")

    def run(*cmd: str, cwd: Path = tmp_path, timeout: int = 900) -> str:
        out = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        assert out.returncode == 0, f"{cmd} failed:\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
        return out.stdout

    run(py, "-m", "pip", "install", "-q", f"{wheel}[lance]", "pytest>=8")
    assert run(str(env_dir / "bin" / "lance-segmerge"), "--version").strip() == (
        f"lance-segmerge {__version__} (kernel {__version__})"
    )
    where = run(py, "-c", "import lance_segmerge; print(lance_segmerge.__file__)", cwd=REPO).strip()
    assert where.startswith(str(env_dir)), where

    demo = run(py, "-m", "lance_segmerge", "demo", "--small")
    assert re.search(r"^version \d+: 1 segment\(s\)$", demo, re.M), demo
    assert re.search(r"^lance-segmerge optimize \((local|processes)\)\s+1\s", demo, re.M), demo

    # The slice runs from the checkout's tests against the installed package
    # (no PYTHONPATH: `import lance_segmerge` finds the wheel's copy).
    tests = [str(REPO / "python" / "tests" / name) for name in SLICE]
    deselect = " and ".join(f"not {name}" for name in NEEDS_TEST_TOOLS)
    out = run(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", deselect, *tests, cwd=REPO, timeout=1200)
    assert re.search(r"\d+ passed", out) and "failed" not in out, out[-2000:]
