"""Checks of untrusted values: arguments of the public API, and the fields
of segments, tasks and plans that travel between machines as JSON and
pickles (and that users build by hand). Every failure is an
:class:`InvalidInputError` naming the value; none of these helpers lets a
``KeyError``, ``TypeError``, ``OverflowError`` or ``RecursionError``
through, and none formats a value it was not asked to (a huge int has no
``repr`` past 4300 digits)."""

from __future__ import annotations

import json
import math
import reprlib
import uuid as _uuidlib
from datetime import timedelta
from typing import Any, Mapping, Optional

from .errors import InvalidInputError

_U32 = 2**32 - 1
_I32 = 2**31 - 1
_U64 = 2**64 - 1
#: Milliseconds since the epoch of 9999-12-31, the last instant datetime holds.
_MAX_MS = 253402300799999


def _show(value: Any) -> str:
    """A short description of a bad value, safe for any input (a huge int
    has no repr beyond 4300 digits; a deep or long one is cut)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    try:
        return reprlib.repr(value)
    except Exception:  # noqa: BLE001 - any repr may fail; describe by type
        return f"a {type(value).__name__}"


def _int(value: Any, what: str, lo: int = 0, hi: int = _U64) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{what} must be an integer, got {_show(value)}")
    if not lo <= value <= hi:
        raise InvalidInputError(f"{what} must be between {lo} and {hi}, got {_show(value)}")
    return int(value)


def _ints(value: Any, what: str, item: str, lo: int = 0, hi: int = _U64) -> tuple[int, ...]:
    """A list or tuple (``what``) of integers (``item``) in [lo, hi], as a
    tuple (None is empty).

    The check runs in C (the set of the items' types, their minimum and
    maximum) and falls back to one item at a time only to name what is
    wrong: a segment of 2048 partitions lists 2048 row counts, and a plan
    of a thousand segments would otherwise spend most of its time here.
    """
    items = _seq(value, what)
    if items and set(map(type, items)) == {int} and lo <= min(items) and max(items) <= hi:
        return items
    return tuple(_int(x, item, lo, hi) for x in items)


def _opt_int(value: Any, what: str, lo: int = 0, hi: int = _U64) -> Optional[int]:
    return None if value is None else _int(value, what, lo, hi)


def _str(value: Any, what: str, *, empty: bool = True) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {_show(value)}")
    if not empty and not value:
        raise InvalidInputError(f"{what} must not be empty")
    return value


def _opt_str(value: Any, what: str) -> Optional[str]:
    return None if value is None else _str(value, what)


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInputError(f"{what} must be True or False, got {_show(value)}")
    return value


def _opt_bool(value: Any, what: str) -> Optional[bool]:
    return None if value is None else _bool(value, what)


def _seq(value: Any, what: str) -> tuple[Any, ...]:
    """A list or tuple (None is empty)."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise InvalidInputError(f"{what} must be a list, got {_show(value)}")
    return tuple(value)


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{what} must be a JSON object (a dict), got {_show(value)}")
    return value


def _uuid(value: Any, what: str) -> str:
    text = _str(value, what, empty=False)
    try:
        _uuidlib.UUID(text)
    except ValueError:
        raise InvalidInputError(f"{what} must be a UUID, got {_show(value)}") from None
    return text


def _loads(text: Any, what: str) -> Any:
    """json.loads for untrusted text: malformed, too deep or not text is an
    InvalidInputError."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInputError(f"{what} is not UTF-8 JSON ({exc})") from None
    if not isinstance(text, str):
        raise InvalidInputError(f"{what} must be a JSON string, got {_show(text)}")
    try:
        return json.loads(text)
    except RecursionError:
        raise InvalidInputError(f"{what} is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and numbers past int's digit limit
        raise InvalidInputError(f"{what} is not valid JSON: {_show(str(exc))}") from None


#: The largest value a kernel argument of Go type int takes.
_I64 = 2**63 - 1


def _opt_pos_int(value: Any, what: str, hi: int = _I64) -> Optional[int]:
    """None, or a positive int (not a bool) up to hi."""
    return None if value is None else _int(value, what, 1, hi)


def _seconds(value: Any, what: str) -> float:
    """A non-negative, finite number of seconds, or a timedelta."""
    if isinstance(value, timedelta):
        secs = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            secs = float(value)
        except OverflowError:
            raise InvalidInputError(f"{what} is too large: {_show(value)}") from None
    else:
        raise InvalidInputError(f"{what} must be a number of seconds or a datetime.timedelta, got {_show(value)}")
    if math.isnan(secs) or math.isinf(secs):
        raise InvalidInputError(f"{what} must be a finite number of seconds, got {_show(value)}")
    if secs < 0:
        raise InvalidInputError(f"{what} must not be negative, got {_show(value)}")
    if secs > 100 * 365 * 86400:
        raise InvalidInputError(f"{what} must be at most 100 years, got {_show(value)}")
    return secs


def _storage_options(value: Any) -> dict[str, str]:
    """storage_options: None, or a mapping of str keys to str (or number,
    bool) values, as pylance takes them."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"storage_options must be a dict of str to str, got {_show(type(value).__name__)}")
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not k:
            raise InvalidInputError(f"storage_options keys must be non-empty strings, got {_show(k)}")
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            v = str(v)
        if not isinstance(v, str):
            raise InvalidInputError(f"storage option {k!r} must be a string, got a {type(v).__name__}")
        if "\x00" in k or "\x00" in v:
            raise InvalidInputError(f"storage option {k!r} holds a NUL character")
        out[k] = v
    return out


def _name(value: Any, what: str) -> str:
    """A non-empty string without NUL characters (an index or column name)."""
    text = _str(value, what, empty=False)
    if "\x00" in text:
        raise InvalidInputError(f"{what} holds a NUL character")
    return text



def redact_uri(uri: str) -> str:
    """A URI with its userinfo masked ("s3://KEY:SECRET@bucket/t.lance" is
    "s3://***@bucket/t.lance"), for everything that prints, logs or
    serialises a dataset URI; the kernel masks its messages the same way."""
    if not isinstance(uri, str):
        return _show(uri)
    i = uri.find("://")
    if i < 0:
        return uri
    rest = uri[i + 3 :]
    end = min([j for j in (rest.find("/"), rest.find("?"), rest.find("#")) if j >= 0], default=len(rest))
    at = rest.rfind("@", 0, end)
    if at < 0:
        return uri
    return uri[: i + 3] + "***" + rest[at:]


# -- field checks: (value, what) -> value, for field tables (_fields) --------------


def str_field(value: Any, what: str) -> str:
    return _str(value, what)


def opt_str_field(value: Any, what: str) -> Optional[str]:
    return _opt_str(value, what)


def bool_field(value: Any, what: str) -> bool:
    return _bool(value, what)


def opt_bool_field(value: Any, what: str) -> Optional[bool]:
    return _opt_bool(value, what)


def bytes_field(value: Any, what: str) -> bytes:
    if not isinstance(value, bytes):
        raise InvalidInputError(f"{what} must be bytes, got {_show(value)}")
    return value


def float_field(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(f"{what} must be a number, got {_show(value)}")
    return float(value)


def opt_float_field(value: Any, what: str) -> Optional[float]:
    return None if value is None else float_field(value, what)


def int_field(lo: int = 0, hi: int = _U64) -> Any:
    """A check of an int field in [lo, hi]."""
    return lambda value, what: _int(value, what, lo, hi)


def opt_int_field(lo: int = 0, hi: int = _U64) -> Any:
    return lambda value, what: _opt_int(value, what, lo, hi)


def ints_field(lo: int = 0, hi: int = _U64) -> Any:
    """A check of a tuple-of-ints field (lists become tuples)."""
    return lambda value, what: _ints(value, what, what, lo, hi)


def strs_field(value: Any, what: str) -> tuple[str, ...]:
    return tuple(_str(v, what) for v in _seq(value, what))


def tuple_of(cls: type, noun: str) -> Any:
    """A check of a tuple field whose items are ``cls`` instances."""

    def check(value: Any, what: str) -> tuple[Any, ...]:
        items = _seq(value, what)
        if not all(isinstance(x, cls) for x in items):
            raise InvalidInputError(f"{what} must be {noun}")
        return items

    return check


def optional(check: Any) -> Any:
    """``check``, letting None through."""
    return lambda value, what: None if value is None else check(value, what)


def required(key: str) -> Any:
    """A decoder that refuses an absent or null value: ``what`` has no ``key``."""

    def decode(value: Any, what: str) -> Any:
        if value is None:
            raise InvalidInputError(f"{what.rsplit(':', 1)[0]} has no {key!r}")
        return value

    return decode


def seq_field(value: Any, what: str) -> tuple[Any, ...]:
    """A decoder: a JSON list (null is empty) as a tuple."""
    return _seq(value, what)
