#!/usr/bin/env python3
"""Build the native kernel (pybind/ through gopy) into a Python package dir.

Used by `make build` (into python/lance_segmerge/_native) and by setup.py
(into the wheel's build directory), so both paths build the same way:

1. build gopy and goimports from this module's Go tool dependencies
   (go.mod pins gopy v0.4.10 with golang.org/x/tools raised so it builds on
   Go 1.26) into _build/bin;
2. run `gopy build` on ./pybind with the given interpreter, which must have
   pybindgen installed; output goes to _build/gopy (ignored by `go ... ./...`
   because of the leading underscore);
3. copy the three runtime files (the extension, its Python wrapper and gopy's
   go.py) into the destination, nothing else; the package's own __init__.py
   is committed.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import sysconfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINDIR = os.path.join(ROOT, "_build", "bin")


def run(cmd: list[str], env: dict[str, str] | None = None) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)


def go_tools(go: str) -> dict[str, str]:
    """Build gopy and goimports into _build/bin; return the environment
    that puts them first on PATH, with cgo and the SIMD kernels on."""
    os.makedirs(BINDIR, exist_ok=True)
    env = dict(os.environ)
    env["PATH"] = BINDIR + os.pathsep + env.get("PATH", "")
    env.setdefault("CGO_ENABLED", "1")
    # simd/archsimd kernels (behind a build tag, with portable fallbacks);
    # GOEXPERIMENT= (empty) builds without them.
    env.setdefault("GOEXPERIMENT", "simd")
    run([go, "build", "-o", os.path.join(BINDIR, "gopy"), "github.com/go-python/gopy"], env)
    run([go, "build", "-o", os.path.join(BINDIR, "goimports"), "golang.org/x/tools/cmd/goimports"], env)
    return env


def install_runtime(src: str, extension: str, dest: str) -> str | None:
    """Copy the runtime files (the extension, gopy's pybind.py wrapper and
    go.py) from src into the package directory dest, removing any other
    build's extension there; return an error message, or None."""
    dest = os.path.abspath(dest)
    os.makedirs(dest, exist_ok=True)
    for name in ("pybind.py", "go.py", extension):
        if not os.path.exists(os.path.join(src, name)):
            return f"{src} has no {name}"
    for stale in glob.glob(os.path.join(dest, "_segmerge*")):
        os.remove(stale)
    for name in ("pybind.py", "go.py", extension):
        shutil.copy2(os.path.join(src, name), os.path.join(dest, name))
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="interpreter to build for")
    ap.add_argument(
        "--dest",
        default=os.path.join(ROOT, "python", "lance_segmerge", "_native"),
        help="package directory to receive the runtime files",
    )
    ap.add_argument(
        "--tags",
        default="",
        help="Go build tags (make build passes segmerge_testtools: the test suite's tools; wheels build without)",
    )
    ap.add_argument(
        "--prebuilt",
        help="take the runtime files from this directory (tools/build_wheels.py builds them) instead of compiling",
    )
    args = ap.parse_args()
    if args.prebuilt:
        found = glob.glob(os.path.join(args.prebuilt, "_segmerge*.so"))
        if len(found) != 1:
            print(f"error: {args.prebuilt} should hold one _segmerge*.so, holds {found}", file=sys.stderr)
            return 1
        err = install_runtime(args.prebuilt, os.path.basename(found[0]), args.dest)
        if err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        return 0
    python = os.path.abspath(args.python) if os.sep in args.python else shutil.which(args.python) or args.python

    go = shutil.which("go")
    if go is None:
        print("error: the Go toolchain (go) is not on PATH; install Go 1.26+", file=sys.stderr)
        return 2
    env = go_tools(go)
    if args.tags:
        # gopy passes -build-tags to `go build` but not to the package
        # loader that finds the functions to bind; GOFLAGS reaches both.
        env["GOFLAGS"] = (env.get("GOFLAGS", "") + f" -tags={args.tags}").strip()
    out = os.path.join(ROOT, "_build", "gopy")
    shutil.rmtree(out, ignore_errors=True)
    run(
        [
            os.path.join(BINDIR, "gopy"),
            "build",
            f"-vm={python}",
            f"-output={out}",
            "-name=segmerge",
            "-no-make=true",
            f"-build-tags={args.tags}",
            "./pybind",
        ],
        env,
    )

    suffix = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    err = install_runtime(out, "_segmerge" + suffix, args.dest)
    if err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"native kernel installed in {os.path.abspath(args.dest)} ({sysconfig.get_platform()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
