"""The wheels of `make wheel`, installed as a user gets them.

For each CPython line, a fresh virtual environment whose PATH holds no Go
toolchain and no C compiler installs the wheel (with the ``lance`` extra
from PyPI), then runs ``lance-segmerge --version``, the small demo and a
short slice of this test suite against that installation. The aarch64
wheels are checked with auditwheel and by their ELF headers; they are run
under qemu-user with Debian 12's aarch64 python3.11
(tools/aarch64_python.sh installs both where it can), and the x86_64
wheel of 3.11 under Debian's own /usr/bin/python3.11: both interpreters
are linked statically to libpython, which is what proves the extension
needs no shared libpython.

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

import lance
import lancegen
import numpy as np
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
AARCH64_ROOT = Path(os.environ.get("SEGMERGE_AARCH64_ROOT", os.path.join(WORK, "aarch64-root")))


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


def unpack(wheel: Path, tmp: Path) -> Path:
    site = tmp / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    return site


def three_deltas(tmp: Path) -> tuple[str, str]:
    """A pylance-written IVF_PQ index of a base and three deltas, and a
    copy that pylance's own optimize_indices merged."""
    x = lancegen.vectors(4000, seed=5)
    uri = str(tmp / "ds")
    ds = lance.write_dataset(lancegen.table(x[:2500]), uri)
    ds.create_index("vec", "IVF_PQ", name="vec_idx", num_partitions=4, num_sub_vectors=4)
    for lo in (2500, 3000, 3500):
        ds = lance.write_dataset(lancegen.table(x[lo : lo + 500], lo), uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
    theirs = str(tmp / "theirs")
    shutil.copytree(uri, theirs)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=4)
    return uri, theirs


def answers(uri: str) -> list[list[int]]:
    ds = lance.dataset(uri)
    qs = lancegen.vectors(8, seed=6)
    return [ds.to_table(nearest={"column": "vec", "q": q, "k": 10, "nprobes": 2}, columns=["id"])["id"].to_pylist()
            for q in qs.astype(np.float32)]


def merge_under(interpreter: list[str], machine: str, site: Path, tmp: Path) -> None:
    """Our optimize, run by `interpreter` from the unpacked wheel, merges
    pylance's four segments into one that answers as pylance's merge."""
    uri, theirs = three_deltas(tmp)
    script = (
        f"import sys; sys.path.insert(0, {str(site)!r})\n"
        "import platform, lance_segmerge as ls\n"
        f"ds = ls.optimize({uri!r}, 'vec_idx', executor='local', progress=False)\n"
        "print(platform.machine(), ls.kernel_version(), len(ds.list_index_segments('vec_idx')))\n"
    )
    out = subprocess.run([*interpreter, "-c", script], capture_output=True, text=True, timeout=600,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp)})
    assert out.returncode == 0, out.stderr[-4000:]
    assert out.stdout.split() == [machine, __version__, "1"], out.stdout
    assert len(lance.dataset(uri).describe_indices()[0].segments) == 1
    assert answers(uri) == answers(theirs)


def test_x86_64_wheel_loads_in_a_static_interpreter(tmp_path):
    debian = Path("/usr/bin/python3.11")
    if not debian.exists():
        pytest.skip("no /usr/bin/python3.11 (Debian's statically linked interpreter) here")
    assert "libpython" not in subprocess.run(["readelf", "-d", str(debian)], capture_output=True, text=True).stdout
    merge_under([str(debian)], "x86_64", unpack(wheel_for("3.11", "x86_64"), tmp_path), tmp_path)


def test_aarch64_wheel_merges_under_emulation(tmp_path):
    qemu = shutil.which("qemu-aarch64-static")
    python = AARCH64_ROOT / "usr" / "bin" / "python3.11"
    if qemu is None or not python.exists():
        pytest.skip(f"the aarch64 wheels are built, not run: no qemu-aarch64-static or no {python} "
                    "(sh tools/aarch64_python.sh installs them with apt)")
    merge_under([qemu, "-L", str(AARCH64_ROOT), str(python)], "aarch64", unpack(wheel_for("3.11", "aarch64"), tmp_path), tmp_path)


def test_sdist_builds_the_kernel_from_source(tmp_path):
    # Unlike the wheels, the sdist compiles the kernel where it is
    # installed (Go and a C compiler needed), without the test tools.
    (sdist,) = glob.glob(os.path.join(WHEELS or "", f"lance_segmerge-{__version__}.tar.gz"))
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    py = str(env_dir / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "-q", sdist], check=True, env=env, cwd=tmp_path, timeout=900)
    script = (
        "import lance_segmerge as ls, lance_segmerge._ffi as f, importlib.resources as r\n"
        "native = sorted(p.name for p in r.files('lance_segmerge._native').iterdir() if p.name.endswith('.so'))\n"
        f"segs = ls.open({str(REPO / 'testdata' / 'lance-compat' / 'v0.27.1' / 'pq_in_schema')!r}).list_index_segments()\n"
        "print(ls.kernel_version(), len(native), hasattr(f.native(), 'DescribeIVF'), segs[0].index_type)\n"
    )
    out = subprocess.run([py, "-c", script], check=True, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout.split() == [__version__, "1", "False", "IVF_PQ"], out.stdout
