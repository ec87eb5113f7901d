"""examples/quickstart.ipynb runs headless from a clone, every cell, and
shows what it promises: tables as HTML, pictures as PNG, progress widgets."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("nbclient", reason="the notebook test needs nbclient, nbformat and ipykernel")
pytest.importorskip("ipykernel", reason="the notebook test needs ipykernel")
nbformat = pytest.importorskip("nbformat")

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "examples" / "quickstart.ipynb"


def _runner():
    spec = importlib.util.spec_from_file_location("run_notebook", REPO / "tools" / "run_notebook.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_notebook_is_committed_clean():
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code), "commit the notebook without outputs"


def test_quickstart_notebook_runs(tmp_path):
    out = tmp_path / "executed.ipynb"
    nb = _runner().execute(NOTEBOOK, timeout=300, output=out)  # raises on the first failing cell
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code)
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    kinds = [k for o in outputs for k in o.get("data", {})]
    assert kinds.count("image/png") >= 3  # partition sizes, the merge tree, sizes before and after
    assert kinds.count("text/html") >= 4  # dataset, listing, plan, report (and a DataFrame)
    assert "application/vnd.jupyter.widget-view+json" in kinds  # progress bars are widgets in Jupyter
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "segments 25 -> 1, recall@10" in text
    assert json.loads(out.read_text())["cells"]
