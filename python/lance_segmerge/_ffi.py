"""The one module that talks to the native (gopy-built) kernel.

It turns Python values into the kernel's plain arguments (strings, ints,
JSON) and the kernel's ``RuntimeError("[tag] ...")`` into typed exceptions.
The native module is imported lazily, so that importing lance_segmerge (for
example in a process that only unpickles a plan) costs nothing.
"""

from __future__ import annotations

import json
import threading
import uuid
from types import ModuleType
from typing import Any, Callable, Mapping, Optional

from .errors import InternalError, InvalidInputError, translate

_lock = threading.Lock()
_native: Optional[ModuleType] = None
# Operation ids running in this process, so that a driver can cancel the
# merges its worker threads run.
_active: set[str] = set()


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


def _check_args(name: str, args: tuple[Any, ...]) -> None:
    """What gopy would mangle or refuse with a bare TypeError: a NUL
    character (a C string ends there: "a\0b" would open "a"), a string
    that is not valid Unicode, an int out of Go's range."""
    for a in args:
        if isinstance(a, str):
            if "\x00" in a:
                raise InvalidInputError(f"{name}: a string argument holds a NUL character")
            try:
                a.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidInputError(f"{name}: a string argument is not valid Unicode ({exc.reason})") from None
        elif isinstance(a, int) and not isinstance(a, bool) and not -(2**63) <= a < 2**63:
            raise InvalidInputError(f"{name}: an integer argument is out of range ({a.bit_length()} bits)")


def call(name: str, *args: Any) -> Any:
    """Call an exported kernel function, translating its errors."""
    fn = getattr(native(), name, None)
    if fn is None:
        raise InternalError(
            f"the native kernel has no {name} (a test tool is only built with the segmerge_testtools tag: make build)"
        )
    _check_args(name, args)
    try:
        return fn(*args)
    except RuntimeError as exc:
        raise translate(exc) from exc
    except (TypeError, OverflowError, ValueError) as exc:  # gopy's own argument conversion
        raise InvalidInputError(f"{name}: {exc}") from exc


def call_json(name: str, *args: Any) -> Any:
    """Call a kernel function that returns JSON and decode the result."""
    return json.loads(call(name, *args))


def progress_snapshot(op_id: str) -> Optional[dict[str, Any]]:
    """The kernel's counters for a running operation, or None."""
    text = native().Progress(op_id)
    return json.loads(text) if text else None


def run_operation(
    name: str,
    args: tuple[Any, ...],
    on_progress: Optional[Callable[[dict[str, Any]], None]] = None,
    poll_seconds: float = 0.1,
) -> Any:
    """Run a long kernel call (its first argument is an operation id) on a
    worker thread, and poll its progress from the calling thread.

    Callbacks run on the calling thread, never on a Go thread. A
    KeyboardInterrupt cancels the operation, waits for the kernel to clean
    up its partial output, and is re-raised.
    """
    op_id = uuid.uuid4().hex
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call(name, op_id, *args)
        except BaseException as exc:  # delivered to the caller below
            box["error"] = exc

    worker = threading.Thread(target=target, name=f"lance-segmerge-{name}", daemon=True)
    with _lock:
        _active.add(op_id)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(poll_seconds)
            if on_progress is not None:
                snap = progress_snapshot(op_id)
                if snap is not None:
                    on_progress(snap)
    except BaseException:
        native().Cancel(op_id)
        worker.join()
        raise
    finally:
        with _lock:
            _active.discard(op_id)
    if "error" in box:
        raise box["error"]
    if on_progress is not None:
        final = progress_snapshot(op_id)  # the counters as the operation ended
        if final is not None:
            on_progress(final)
    return box["value"]


def running() -> int:
    """How many kernel operations run in this process."""
    with _lock:
        return len(_active)


def cancel_all() -> int:
    """Cancel every kernel operation running in this process; returns how
    many were running."""
    with _lock:
        ids = list(_active)
    return sum(1 for i in ids if native().Cancel(i))
