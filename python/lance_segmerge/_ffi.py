"""The one module that talks to the native (gopy-built) kernel.

It turns Python values into the kernel's plain arguments (strings, ints,
JSON) and the kernel's ``RuntimeError("[tag] ...")`` into typed exceptions.
The native module is imported lazily, so that importing lance_segmerge (for
example in a process that only unpickles a plan) costs nothing.
"""

from __future__ import annotations

import json
import threading
from types import ModuleType
from typing import Any, Mapping, Optional

from .errors import InternalError, translate

_lock = threading.Lock()
_native: Optional[ModuleType] = None


def native() -> ModuleType:
    """Return the gopy wrapper module, importing it on first use.

    gopy's generated module changes the working directory while it loads the
    shared library, so the import is serialised.
    """
    global _native
    if _native is None:
        with _lock:
            if _native is None:
                try:
                    from ._native import pybind
                except ImportError as exc:  # pragma: no cover - build problem
                    raise InternalError(
                        "the lance_segmerge native kernel is not built; run `make build` "
                        f"or reinstall the package ({exc})"
                    ) from exc
                _native = pybind
    return _native


def options_json(storage_options: Optional[Mapping[str, str]]) -> str:
    """Encode storage options for the kernel (never logged)."""
    if not storage_options:
        return ""
    return json.dumps({str(k): str(v) for k, v in storage_options.items()})


def call(name: str, *args: Any) -> Any:
    """Call an exported kernel function, translating its errors."""
    fn = getattr(native(), name)
    try:
        return fn(*args)
    except RuntimeError as exc:
        raise translate(exc) from exc


def call_json(name: str, *args: Any) -> Any:
    """Call a kernel function that returns JSON and decode the result."""
    return json.loads(call(name, *args))
