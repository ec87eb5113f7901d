"""Build hook: compile the Go kernel with gopy while building the package.

The metadata lives in pyproject.toml; this file only adds the native build
to `build_py` and marks the wheel as platform-specific.
"""

import os
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution


class BinaryDistribution(Distribution):
    def has_ext_modules(self) -> bool:
        return True


class BuildWithNative(build_py):
    def run(self) -> None:
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        dest = os.path.join(os.path.abspath(self.build_lib), "lance_segmerge", "_native")
        cmd = [sys.executable, os.path.join(here, "tools", "build_native.py"), "--python", sys.executable, "--dest", dest]
        # tools/build_wheels.py compiles the kernel for each target itself
        # (cross C compiler, old glibc) and hands the result over here.
        prebuilt = os.environ.get("SEGMERGE_PREBUILT_NATIVE")
        if prebuilt:
            cmd += ["--prebuilt", prebuilt]
        subprocess.run(cmd, check=True)


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildWithNative})
