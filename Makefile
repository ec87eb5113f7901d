# lance-segmerge: everything a fresh machine needs, from Go modules to the
# Python test dependencies, is installed by these targets.
#
#   make demo   build a Lance dataset with many delta segments and show them
#   make test   go vet, go test, build the extension, pytest against pylance
#
# Needs: Go 1.26+, a C compiler (cgo), Python 3.10+ built with a shared
# libpython (pyenv and distro Pythons are), network access to PyPI and the Go
# module proxy.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
GO     ?= go

# The Go toolchain's SIMD package (simd/archsimd) backs the hot distance
# kernels of HNSW graph builds (gokernel/hnsw/sqdist_simd.go, behind a build
# tag, AVX2 detected at run time); every kernel has a portable fallback,
# which test-go also runs (GOEXPERIMENT= ...). GOEXPERIMENT= make build
# builds without it.
export GOEXPERIMENT ?= simd

PY_DEPS := pybindgen==0.22.1 "setuptools>=68" wheel \
           pylance==14.0.2 "pyarrow>=17" "numpy>=1.24" "pytest>=8" "mypy>=1.10" \
           "ray>=2.40" "dask>=2024.1" "distributed>=2024.1" "tqdm>=4.60" \
           "moto[server]>=5.1" boto3 "matplotlib>=3.8"

.PHONY: all venv build test test-go test-py vet demo bench proto fuzz clean

all: build

$(VENV)/.deps: Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(PY_DEPS)
	touch $@

venv: $(VENV)/.deps

# Generate and compile the gopy extension into python/lance_segmerge/_native.
build: venv
	$(PY) tools/build_native.py --python $(abspath $(PY))

vet:
	$(GO) vet ./...

# Go and Python tests run next to a local S3 server (moto, on loopback),
# which tools/with_moto.py starts and stops.
test-go: vet venv
	$(PY) tools/with_moto.py -- $(GO) test ./...
	GOEXPERIMENT= $(GO) test ./gokernel/hnsw/ ./gokernel/vecmath/
	$(MAKE) fuzz FUZZTIME=$(CI_FUZZTIME)

test-py: build
	$(PY) -m mypy
	PYTHONPATH=python $(PY) tools/with_moto.py -- $(PY) -m pytest -q

test: test-go test-py

demo: build
	PYTHONPATH=python $(PY) -m lance_segmerge.demo

# Benchmarks against pylance (bench/README.md): `make bench` runs the
# default preset (2M rows, ~200 deltas; tens of minutes), BENCH_PRESET=small
# or smoke for less.
BENCH_PRESET ?= default
bench: build
	PYTHONPATH=python $(PY) bench/bench_merge.py --preset $(BENCH_PRESET)

# Regenerate the protobuf Go code (needs protoc, e.g. Debian's
# protobuf-compiler). The generated files are committed.
proto:
	cd gokernel/internal/pb && $(GO) generate ./...

# Run every fuzz target for a while; `make test` runs each for CI_FUZZTIME.
FUZZTIME ?= 30s
CI_FUZZTIME ?= 3s
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) sh tools/fuzz.sh

clean:
	rm -rf _build build dist python/lance_segmerge/_native/pybind.py \
	       python/lance_segmerge/_native/go.py python/lance_segmerge/_native/_segmerge*
