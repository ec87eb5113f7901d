# lance-segmerge: everything a fresh machine needs, from Go modules to the
# Python test dependencies, is installed by these targets.
#
#   make demo   build a Lance dataset with many delta segments and show them
#   make test   go vet, go test, build the extension, pytest against pylance
#
# Needs: Go 1.26+, a C compiler (cgo), Python 3.10+ built with a shared
# libpython (pyenv and distro Pythons are), network access to PyPI and the Go
# module proxy; node and npm for the Azure emulator (Azurite) in `make test`.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
GO     ?= go

# The Go toolchain's SIMD package (simd/archsimd) backs the hot distance
# kernels of IVF assignment, PQ encoding and k-means
# (gokernel/vecmath/nearest_simd.go) and of HNSW graph builds
# (gokernel/hnsw/sqdist_simd.go), behind a build tag, AVX2 or AVX-512
# detected at run time; every kernel has a portable fallback, which test-go
# also runs (GOEXPERIMENT= ...). GOEXPERIMENT= make build builds without it.
export GOEXPERIMENT ?= simd

# Two sets: what building the extension and `make demo` need, and the rest
# (tests, executors, emulators, notebooks), so that the demo's set-up on a
# fresh clone does not wait for Ray, Dask and Jupyter.
PY_CORE := pybindgen==0.22.1 "setuptools>=68" wheel pylance==14.0.2 "pyarrow>=17" "numpy>=1.24"
PY_DEPS := "pytest>=8" "pytest-xdist>=3.5" "mypy>=1.10" \
           "ray>=2.40" "dask>=2024.1" "distributed>=2024.1" "tqdm>=4.60" \
           "moto[server]>=5.1" boto3 "matplotlib>=3.8" \
           "pandas>=2.0" "ipywidgets>=8.1" "nbclient>=0.10" "nbformat>=5.9" "ipykernel>=6.29"

.PHONY: all venv venv-core build test test-go test-py test-compat vet demo wheel test-wheel notebook bench bench-scale bench-drift proto fuzz clean emulators

all: build

$(VENV)/.core: Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(PY_CORE)
	touch $@
$(VENV)/.deps: $(VENV)/.core
	$(PY) -m pip install -q $(PY_DEPS)
	touch $@

venv-core: $(VENV)/.core
venv: $(VENV)/.deps

# Generate and compile the gopy extension into python/lance_segmerge/_native,
# with the test suite's tools (pybind/testtools_*.go); wheels and the sdist
# build without them. Then byte-compile the package, as pip does on install:
# where PYTHONDONTWRITEBYTECODE is set, every process would otherwise compile
# it afresh (gopy's generated go.py alone takes 20 ms, paid by the first
# call into the kernel; the whole package about 90 ms per import).
build: venv-core
	$(PY) tools/build_native.py --python $(abspath $(PY)) --tags segmerge_testtools
	$(PY) -m compileall -q python/lance_segmerge

vet:
	$(GO) vet ./...
	$(GO) vet -tags segmerge_testtools ./pybind/

# Go and Python tests run next to local object-store emulators on loopback
# (moto for S3, fake-gcs-server for GCS, Azurite for Azure Blob), which
# tools/with_emulators.py starts and stops. The Go fault suites (disk full,
# SIGKILL during merge and commit) run on their own, with their counts. The
# SIMD kernels' packages are tested a second time without GOEXPERIMENT=simd
# (their portable fallback).
test-go: vet venv emulators
	$(PY) tools/with_emulators.py -- $(GO) test -skip '^(TestFault|TestKillDuring)' ./...
	GO=$(GO) sh tools/faults.sh
	GOEXPERIMENT= $(GO) test ./gokernel/hnsw/ ./gokernel/vecmath/ ./gokernel/encode/ ./gokernel/train/

# pytest runs in PYTEST_WORKERS processes (pytest-xdist), each test file
# whole on one of them, so that a file's module fixtures are built once.
# Much of the suite waits on pylance, subprocesses and the disk: on 2 cores
# two workers took 6m57s where one took 13m41s. PYTEST_WORKERS=0 runs it
# in one process.
PYTEST_WORKERS ?= 2
test-py: build venv emulators
	$(PY) -m mypy
	PYTHONPATH=python $(PY) tools/with_emulators.py -- $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile

# The GCS and Azure emulators, installed into .emulators/ from the Go
# module proxy and npm. An emulator that cannot be installed (no npm, say)
# is reported here and its tests skip with that reason.
EMU              := .emulators
FAKE_GCS_VERSION := v1.56.1
AZURITE_VERSION  := 3.37.0
emulators: $(EMU)/bin/fake-gcs-server $(EMU)/azurite/node_modules/.bin/azurite-blob
$(EMU)/bin/fake-gcs-server:
	GOBIN=$(abspath $(EMU)/bin) $(GO) install github.com/fsouza/fake-gcs-server@$(FAKE_GCS_VERSION) \
	  || echo "warning: could not install fake-gcs-server; the GCS tests will be skipped" >&2
$(EMU)/azurite/node_modules/.bin/azurite-blob:
	mkdir -p $(EMU)/azurite
	npm install --prefix $(EMU)/azurite --no-audit --no-fund --loglevel=error azurite@$(AZURITE_VERSION) \
	  || echo "warning: could not install Azurite (needs node and npm); the Azure tests will be skipped" >&2

test: test-go test-py

# The whole compatibility matrix (python/tests/test_compat_releases.py):
# every release line in COMPAT_RELEASES writes every vector index kind it
# can, we merge and build, and it and pylance 14.0.2 query the result.
# Each release gets its own cached environment under .compat/; the first
# run installs them all (a few minutes), a run takes about 20 minutes.
# `make test` runs the slice in that file (0.23.2, 0.27.1, 2.0.1).
COMPAT_RELEASES ?= 0.20.0,0.23.2,0.27.1,0.30.0,0.33.0,0.36.0,0.39.0,1.0.4,2.0.1,4.0.2,6.1.0,8.0.1,10.0.0,12.0.0,13.0.0,lancedb-0.40.0
test-compat: build venv
	PYTHONPATH=python SEGMERGE_COMPAT_RELEASES=$(COMPAT_RELEASES) SEGMERGE_COMPAT_CASES=all \
	  $(PY) -m pytest -q -rs python/tests/test_compat_releases.py

demo: build
	PYTHONPATH=python $(PY) -m lance_segmerge demo

# manylinux wheels (CPython 3.10-3.13, x86_64 and aarch64) into dist/, the C
# side compiled by zig from PyPI for glibc 2.17 (tools/build_wheels.py);
# test-wheel installs each x86_64 wheel where no Go or C compiler is on
# PATH and runs the small demo and a slice of the tests against it, and
# merges with the 3.11 wheels under statically linked interpreters:
# Debian's, and Debian's aarch64 one under qemu-user when
# tools/aarch64_python.sh can install it (python/tests/test_wheel.py).
# Neither is part of `make test`.
WHEEL_PYTHONS ?= 3.10,3.11,3.12,3.13
WHEEL_ARCH    ?= x86_64,aarch64
wheel: venv-core
	$(PY) tools/build_wheels.py --pythons $(WHEEL_PYTHONS) --arch $(WHEEL_ARCH) --dist dist
test-wheel: wheel venv
	sh tools/aarch64_python.sh || echo "warning: no aarch64 interpreter under qemu; the aarch64 wheels will be built, not run" >&2
	PYTHONPATH=python SEGMERGE_WHEEL_DIR=$(abspath dist) $(PY) -m pytest -q -rs python/tests/test_wheel.py

# Execute examples/quickstart.ipynb headless (make test does too, in
# python/tests/test_notebook.py) and keep the executed copy, with its
# tables and pictures, in _build/.
notebook: build venv
	mkdir -p _build
	$(PY) tools/run_notebook.py examples/quickstart.ipynb --output _build/quickstart.ipynb

# Benchmarks against pylance (bench/README.md): `make bench` runs the
# default preset (2M rows, ~200 deltas; tens of minutes), BENCH_PRESET=small
# or smoke for less.
BENCH_PRESET ?= default
bench: build venv
	PYTHONPATH=python $(PY) bench/bench_merge.py --preset $(BENCH_PRESET)

# Merge speed where real indices live (bench/bench_scale.py, issue 17):
# SCALE_PRESET=partitions (128 and 2048 IVF partitions; about 40 minutes),
# cold (10M rows, page cache dropped; about 40), s3 (moto behind a 20 ms
# proxy; moto-bound, over 35 on 2 cores), smoke (seconds; make test runs it).
SCALE_PRESET ?= partitions
bench-scale: build venv
	PYTHONPATH=python $(PY) bench/bench_scale.py --preset $(SCALE_PRESET)

# Recall on moving data (bench/drift.py, issue 29): 50 appends, pylance's
# optimize_indices against maintain with and without retrain="auto"
# (about 10 minutes on 2 cores); DRIFT_PRESET=smoke for seconds.
DRIFT_PRESET ?= default
bench-drift: build venv
	PYTHONPATH=python $(PY) bench/drift.py --preset $(DRIFT_PRESET) --queries 200

# Regenerate the protobuf Go code (needs protoc, e.g. Debian's
# protobuf-compiler). The generated files are committed.
proto:
	cd gokernel/internal/pb && $(GO) generate ./...

# Run every fuzz target for a while. `make test` runs their seed corpora
# (go test) but not the fuzzer: a second of each took two minutes of
# CI's twenty, most of it the fuzzer's start-up.
FUZZTIME ?= 30s
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) sh tools/fuzz.sh

clean:
	rm -rf _build build dist python/lance_segmerge/_native/pybind.py \
	       python/lance_segmerge/_native/go.py python/lance_segmerge/_native/_segmerge*
