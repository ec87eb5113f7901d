"""Field tables: one declaration per field of a value type drives its
checks, its JSON form and both ways of reading JSON back.

A value type is a frozen dataclass whose fields are declared with
:func:`spec`. Each declaration names the check a constructor value goes
through (:func:`check_fields`, from ``__post_init__``) and, for the JSON
form, the key, an optional group (a nested object, such as a segment's
``"stats"``), the encoder, and two decoders:

- the **checked** decoder (:func:`from_dict`) is for JSON from outside: a
  plan from another machine, a file, a user's dict. A malformed value is an
  :class:`~lance_segmerge.errors.InvalidInputError` naming it; the
  constructor's checks then run on the result.
- the **kernel** decoder (:func:`from_kernel`) is for JSON the Go kernel
  wrote a moment ago in this process (a listing, a plan, a merge result):
  the same fields and the same conversions, without the checks, so that a
  plan over a thousand segments does not pay for them twice. It is a
  separate entry point chosen by the caller, never a mode.

A type declares which group is present in its JSON with ``_groups``:
``{"stats": "index_type"}`` writes the ``"stats"`` object only when
``index_type`` is not None.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional, TypeVar

from ._validate import _mapping

__all__ = ["Codec", "Spec", "spec", "check_fields", "to_dict", "from_dict", "from_kernel", "specs"]

T = TypeVar("T")

_ABSENT = object()

Check = Callable[[Any, str], Any]


def _same(v: Any) -> Any:
    return v


def _same_checked(v: Any, what: str) -> Any:
    return v


@dataclasses.dataclass(frozen=True)
class Spec:
    """How one field is checked and how it travels as JSON.

    Parameters
    ----------
    check : callable (value, what) -> value
        Validates (and may normalise, e.g. a list to a tuple) a constructor
        value; raises InvalidInputError naming ``what``.
    key : str
        The JSON key (the field name by default).
    group : str, optional
        The nested JSON object the key lives in.
    encode : callable value -> JSON
    decode : callable (JSON, what) -> value
        From outside JSON: may raise InvalidInputError.
    kernel : callable JSON -> value
        From the kernel's own JSON: no checks.
    missing : Any
        The JSON value an absent key stands for, before decoding (a JSON
        null is given to the decoder as None).
    """

    check: Check = _same_checked
    key: str = ""
    group: str = ""
    encode: Callable[[Any], Any] = _same
    decode: Check = _same_checked
    kernel: Callable[[Any], Any] = _same
    missing: Any = None


@dataclasses.dataclass(frozen=True)
class Codec:
    """A JSON form shared by several fields: encode, the checked decoder,
    the kernel decoder (see :class:`Spec`)."""

    encode: Callable[[Any], Any]
    decode: Check
    kernel: Callable[[Any], Any]


def spec(
    check: Check = _same_checked,
    *,
    codec: Optional[Codec] = None,
    default: Any = dataclasses.MISSING,
    default_factory: Any = dataclasses.MISSING,
    key: str = "",
    group: str = "",
    encode: Callable[[Any], Any] = _same,
    decode: Optional[Check] = None,
    kernel: Optional[Callable[[Any], Any]] = None,
    missing: Any = None,
    repr: bool = True,
    compare: bool = True,
) -> Any:
    """A dataclass field with its :class:`Spec` (``codec`` gives encode,
    decode and kernel at once). ``decode`` defaults to the identity;
    ``kernel`` to ``decode`` without its ``what``."""
    if codec is not None:
        encode, decode, kernel = codec.encode, codec.decode, codec.kernel
    dec: Check = decode or _same_checked

    def by_decode(v: Any) -> Any:
        return dec(v, "")

    s = Spec(check, key, group, encode, dec, kernel or by_decode, missing)
    return dataclasses.field(
        default=default, default_factory=default_factory, repr=repr, compare=compare, metadata={"spec": s}
    )


def specs(cls: type) -> tuple[tuple[str, Spec], ...]:
    """(field name, Spec) of every field of ``cls`` that has one, in order."""
    cached = cls.__dict__.get("_field_specs")
    if cached is None:
        fields = dataclasses.fields(cls)
        bare = [f.name for f in fields if "spec" not in f.metadata]
        if bare:
            raise TypeError(f"{cls.__name__}: fields {bare} have no spec(); a field table covers every field")
        cached = tuple((f.name, f.metadata["spec"]) for f in fields)
        setattr(cls, "_field_specs", cached)
    return cached


def check_fields(obj: Any, what: str) -> None:
    """Run every field's check on a frozen dataclass instance (from its
    ``__post_init__``), storing normalised values."""
    for name, s in specs(type(obj)):
        value = getattr(obj, name)
        out = s.check(value, f"{what} {name}".strip())
        if out is not value:
            object.__setattr__(obj, name, out)


def _groups(cls: type) -> Mapping[str, str]:
    return getattr(cls, "_groups", {})


def to_dict(obj: Any, *, groups: bool = True) -> dict[str, Any]:
    """The JSON form of ``obj``: each field under its key (in its group);
    a group is left out (JSON null) when its presence field is None, and
    every group is left out with ``groups=False``."""
    cls = type(obj)
    present = {g: getattr(obj, f) is not None for g, f in _groups(cls).items()}
    out: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for name, s in specs(cls):
        if s.group:
            if not groups:
                continue
            if present.get(s.group, True):
                nested.setdefault(s.group, {})[s.key or name] = s.encode(getattr(obj, name))
            continue
        out[s.key or name] = s.encode(getattr(obj, name))
    if groups:
        for g in _groups(cls):
            out[g] = nested.get(g) if present.get(g, True) else None
    return out


def from_dict(cls: type[T], d: Any, what: str) -> T:
    """Build ``cls`` from outside JSON: every value decoded (malformed is
    InvalidInputError), then the constructor's checks."""
    d = _mapping(d, what)
    groups = {g: _mapping(d.get(g) or {}, f"{what}: {g}") for g in {s.group for _, s in specs(cls) if s.group}}
    values: dict[str, Any] = {}
    for name, s in specs(cls):
        src = groups[s.group] if s.group else d
        raw = src.get(s.key or name, _ABSENT)
        if raw is _ABSENT:
            raw = s.missing
        values[name] = s.decode(raw, f"{what}: {s.key or name}")
    return cls(**values)


def from_kernel(cls: type[T], d: Mapping[str, Any]) -> T:
    """Build ``cls`` from JSON the kernel wrote: the same decoding, no
    checks (the instance is made without calling ``__init__``)."""
    obj = cls.__new__(cls)
    empty: Mapping[str, Any] = {}
    for name, s in specs(cls):
        src = (d.get(s.group) or empty) if s.group else d
        raw = src.get(s.key or name, _ABSENT)
        if raw is _ABSENT:
            raw = s.missing
        object.__setattr__(obj, name, s.kernel(raw))
    return obj
