"""Exception classes of lance_segmerge.

Every error the package raises is a :class:`SegmergeError`. Each subclass
matches one error kind of the Go kernel (the ``[tag]`` its messages start
with) and, where one fits, also inherits the builtin exception a caller would
naturally catch: a missing dataset is a ``FileNotFoundError``, a bad argument
a ``ValueError``.
"""

from __future__ import annotations

import re

__all__ = [
    "SegmergeError",
    "InvalidInputError",
    "NotFoundError",
    "CorruptError",
    "ConflictError",
    "CancelledError",
    "UnsupportedError",
    "StorageError",
    "InternalError",
    "WorkerError",
]


class SegmergeError(Exception):
    """Base class of every error raised by lance_segmerge."""

    #: The kernel's tag for this kind of error.
    tag = "internal"


class InvalidInputError(SegmergeError, ValueError):
    """The caller's input is wrong: a bad argument, incompatible segments."""

    tag = "invalid_input"


class NotFoundError(SegmergeError, FileNotFoundError):
    """A dataset, version, index, segment or file does not exist."""

    tag = "not_found"


class CorruptError(SegmergeError):
    """Stored bytes break the Lance format."""

    tag = "corrupt"


class ConflictError(SegmergeError):
    """A concurrent change invalidated the work; re-plan and retry."""

    tag = "conflict"


class CancelledError(SegmergeError):
    """The operation was cancelled (explicitly or by KeyboardInterrupt)."""

    tag = "cancelled"


class UnsupportedError(SegmergeError, NotImplementedError):
    """Valid input that lance_segmerge does not handle (yet)."""

    tag = "unsupported"


class StorageError(SegmergeError, OSError):
    """The store failed: a disk error, or an object store that stayed
    unreachable or failing after retries."""

    tag = "io"


class InternalError(SegmergeError):
    """A bug in lance_segmerge (including a recovered Go panic)."""

    tag = "internal"


class WorkerError(SegmergeError):
    """A worker died while running a task (killed, out of memory, crashed),
    or its executor lost it. The message names the task; ``items`` holds
    the positions of the tasks concerned in the executor's batch. Nothing
    was committed: rerunning is safe."""

    tag = "worker"

    def __init__(self, message: str, items: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.items = tuple(items)


_BY_TAG: dict[str, type[SegmergeError]] = {
    cls.tag: cls
    for cls in (
        InvalidInputError,
        NotFoundError,
        CorruptError,
        ConflictError,
        CancelledError,
        UnsupportedError,
        StorageError,
        InternalError,
        WorkerError,
    )
}

_TAG_RE = re.compile(r"\[([a-z_]+)\] ")


def translate(exc: BaseException) -> SegmergeError:
    """Map an error raised by the native module to its typed exception.

    The kernel reports errors as ``RuntimeError("[tag] message")``; anything
    without a known tag becomes an :class:`InternalError`.
    """
    text = str(exc)
    m = _TAG_RE.match(text)
    if m is None or m[1] not in _BY_TAG:
        return InternalError(text)
    return _BY_TAG[m[1]](text[m.end() :])
