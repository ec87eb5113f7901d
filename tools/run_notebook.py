"""Execute a notebook headless (nbclient), failing on the first failing cell.

    python tools/run_notebook.py examples/quickstart.ipynb [--output FILE] [--timeout S]

The kernel is this interpreter (ipykernel), started in the notebook's
directory, with the repository's ``python/`` on PYTHONPATH so that a clone
after ``make build`` needs no install. ``--output`` writes the executed
notebook (with its tables and pictures); the source is never modified.
``make test`` runs it through python/tests/test_notebook.py.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]


def execute(path: Path, timeout: int = 600, output: Optional[Path] = None) -> Any:
    """Run every cell of the notebook at ``path``; return the executed
    notebook. Raises nbclient's CellExecutionError on a failing cell."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(str(path), as_version=4)
    env_path = os.environ.get("PYTHONPATH", "")
    parts = [str(REPO / "python")] + [p for p in env_path.split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in parts)
    os.environ.setdefault("LANCE_LOG", "error")
    os.environ.setdefault("LANCE_INCLUDE_VECTOR_CENTROIDS", "false")
    try:
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.resolve().parent)}},
        )
        client.execute()
    finally:
        if env_path:
            os.environ["PYTHONPATH"] = env_path
        else:
            os.environ.pop("PYTHONPATH", None)
    if output is not None:
        nbformat.write(nb, str(output))
    return nb


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebook", type=Path)
    ap.add_argument("--output", type=Path, help="write the executed notebook here")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = ap.parse_args(argv)
    from nbclient.exceptions import CellExecutionError

    try:
        execute(args.notebook, args.timeout, args.output)
    except CellExecutionError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"{args.notebook}: every cell ran" + (f"; executed copy in {args.output}" if args.output else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
