"""Session fixtures: real Lance datasets written by the pinned pylance."""

from __future__ import annotations

import collections
import os
import shutil
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))

lance = pytest.importorskip("lance", reason="the compatibility tests need pylance 14.0.2")

import lancegen  # noqa: E402

INDEX_TYPES = ["IVF_FLAT", "IVF_SQ", "IVF_PQ", "IVF_RQ"]
REPO = Path(__file__).resolve().parents[2]
COMPAT = REPO / "testdata" / "lance-compat"


def pytest_report_header(config: pytest.Config) -> str:
    return f"pylance {lance.__version__}"


@pytest.fixture(scope="session")
def delta_datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, lancegen.Built]:
    """One dataset per index type: a base segment and 3 delta segments
    (optimize_indices(num_indices_to_merge=0) after each append). V2
    manifest names (pylance's default)."""
    root = tmp_path_factory.mktemp("deltas")
    return {t: lancegen.build_with_deltas(str(root / t), t) for t in INDEX_TYPES}


@pytest.fixture(scope="session")
def v1_dataset(tmp_path_factory: pytest.TempPathFactory) -> lancegen.Built:
    """IVF_PQ with deltas under the V1 manifest naming scheme."""
    root = tmp_path_factory.mktemp("v1")
    return lancegen.build_with_deltas(str(root / "pq_v1"), "IVF_PQ", v2_manifest_paths=False)


@pytest.fixture(scope="session")
def uncommitted_pq(tmp_path_factory: pytest.TempPathFactory) -> tuple[lancegen.Built, list]:
    """Six fragments, one uncommitted IVF_PQ segment each (shared model)."""
    root = tmp_path_factory.mktemp("uncommitted")
    return lancegen.build_uncommitted_segments(str(root / "pq"), "IVF_PQ")


@pytest.fixture
def copy_dataset(tmp_path: Path) -> Callable[[str], str]:
    """Copy a dataset directory, so a test can damage or commit to it."""

    def copy(uri: str) -> str:
        dst = tmp_path / (Path(uri).name + "-copy")
        shutil.copytree(uri, dst)
        return str(dst)

    return copy


@pytest.fixture(autouse=True)
def _quiet_lance() -> Iterator[None]:
    os.environ.setdefault("LANCE_LOG", "error")
    yield


# -- the reliability suites' counts ---------------------------------------------

#: Cases and trials the reliability suites ran and passed (bad-input cases,
#: fault trials), printed at the end of the session.
RELIABILITY: "collections.Counter[str]" = collections.Counter()


def pytest_sessionfinish(session: pytest.Session) -> None:
    # Under pytest-xdist each worker counts its own share; the controller
    # sums them (pytest_testnodedown) before its summary.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["segmerge_reliability"] = dict(RELIABILITY)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    RELIABILITY.update(getattr(node, "workeroutput", {}).get("segmerge_reliability", {}))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    if RELIABILITY:
        terminalreporter.write_sep("-", "reliability suites")
        for name, n in sorted(RELIABILITY.items()):
            terminalreporter.write_line(f"{name}: {n}")
