"""The one checker of every public argument, by name.

Each public function of the package is decorated with :func:`checked`,
which runs, before the body, the checker registered here under each of its
parameter names: the same argument name gets the same rule in every verb,
and is checked once, at the public entry (internal calls go to the
undecorated internals, which trust their arguments). A parameter with no
checker is an error when the module defining the function is imported,
unless the decorator is told that the body converts it (``converts=``):
the dataset handle (:func:`lance_segmerge._handles.resolve`), segment
lists, plans and models.

A checker takes the caller's value and returns the value the body uses
(normalised: a list becomes a tuple, ``"L2"`` becomes ``"l2"``); a wrong
value is an :class:`InvalidInputError` naming the argument. ``None``
passes (unchecked) exactly where the parameter's default is ``None``, so
no checker accepts it; ``0`` never stands for a default.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import inspect
from typing import Any, Callable, Optional, TypeVar

from ._validate import (
    _I64,
    _bool,
    _int,
    _name,
    _seconds,
    _show,
    _storage_options,
    _uuid,
)
from .errors import InvalidInputError

__all__ = [
    "checked", "CHECKERS", "INDEX_TYPES", "SCALAR_BUILD_TYPES", "METRICS", "EXECUTORS", "POLICIES", "policy_options",
    "normalize_index_type", "normalize_metric",
]

F = TypeVar("F", bound=Callable[..., Any])

#: Checker of each public argument name.
CHECKERS: dict[str, Callable[[Any], Any]] = {}

_I31 = 2**31 - 1
INDEX_TYPES = ("IVF_FLAT", "IVF_SQ", "IVF_PQ", "IVF_RQ")
#: Scalar index types whose segments the kernel builds from a column's data.
SCALAR_BUILD_TYPES = ("BTREE", "BITMAP", "LABEL_LIST", "ZONEMAP", "BLOOMFILTER", "NGRAM", "INVERTED")
METRICS = ("l2", "cosine", "dot")
EXECUTORS = ("auto", "local", "processes", "ray", "dask")
POLICIES = ("all", "tiered")
HNSW_GRAPH = ("reuse", "rebuild")


def _register(*names: str) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    def add(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        for n in names or (fn.__name__.strip("_"),):
            if n in CHECKERS:
                raise RuntimeError(f"two checkers for argument {n!r}")
            CHECKERS[n] = fn
        return fn

    return add


def _positive(name: str, hi: int = _I31) -> Callable[[Any], int]:
    def check(v: Any) -> int:
        return _int(v, name, 1, hi)

    check.__name__ = name
    return check


def _flag(name: str) -> Callable[[Any], bool]:
    def check(v: Any) -> bool:
        return _bool(v, name)

    check.__name__ = name
    return check


def _choice(name: str, allowed: tuple[str, ...]) -> Callable[[Any], str]:
    def check(v: Any) -> str:
        if not isinstance(v, str) or v not in allowed:
            raise InvalidInputError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {_show(v)}")
        return v

    check.__name__ = name
    return check


# -- names and handles --------------------------------------------------------


for _n in ("index_name", "column", "name"):
    CHECKERS[_n] = functools.partial(_name, what=_n)


@_register()
def _index_names(v: Any) -> tuple[str, ...]:
    """Index names: a non-empty list of distinct names."""
    if isinstance(v, str) or not isinstance(v, (list, tuple)) or not v:
        raise InvalidInputError(f"index_names must be a non-empty list of index names, got {_show(v)}")
    names = tuple(_name(x, what="index_names") for x in v)
    if len(set(names)) != len(names):
        raise InvalidInputError(f"index_names lists a name twice: {_show(v)}")
    return names


CHECKERS["version"] = lambda v: _int(v, "version", 1, _I64)
CHECKERS["storage_options"] = _storage_options
CHECKERS["index_uuid"] = lambda v: _uuid(v, "index_uuid")


@_register()
def _segment(v: Any) -> str:
    """One segment, by uuid: a str or anything with a ``uuid``."""
    return _uuid(getattr(v, "uuid", v), "segment")


@_register()
def _replaces(v: Any) -> tuple[str, ...]:
    """The committed segments a commit replaces: uuids, or objects with a
    ``uuid`` (IndexSegment, pylance's Index)."""
    import uuid as uuidlib

    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise InvalidInputError(f"replaces must be a list of segments or uuids, got {_show(v)}")
    out = []
    for r in v:
        u = r if isinstance(r, str) else getattr(r, "uuid", None)
        if u is None:
            raise InvalidInputError(f"replaces holds {_show(r)}, not a segment or a uuid")
        out.append(str(uuidlib.UUID(_uuid(str(u), "a segment uuid in replaces"))))
    return tuple(out)


# -- flags ---------------------------------------------------------------------------

for _n in ("with_stats", "with_provenance", "requantize_sq", "resume", "verify", "deep", "dry_run", "catch_up", "index_new"):
    CHECKERS[_n] = _flag(_n)


@_register()
def _progress(v: Any) -> Any:
    """None, a bool (a tqdm bar), or a callable receiving snapshots."""
    if v is None or isinstance(v, bool) or callable(v):
        return v
    raise InvalidInputError(f"progress must be True, False, None or a callable, got {_show(v)}")


@_register()
def _properties(v: Any) -> dict[str, str]:
    """Key-values written into a commit's transaction (its
    transaction_properties): a dict of non-empty str keys to str values,
    at most 64 pairs of at most 4 KiB each. Keys starting with
    ``lance_segmerge.`` are the package's own."""
    if not isinstance(v, dict):
        raise InvalidInputError(f"properties must be a dict of str to str, got {_show(v)}")
    if len(v) > 56:
        raise InvalidInputError(f"properties hold {len(v)} pairs (at most 56: the package adds its own)")
    out: dict[str, str] = {}
    for k, x in v.items():
        if not isinstance(k, str) or not k or not isinstance(x, str) or len(k) > 4096 or len(x) > 4096:
            raise InvalidInputError(f"properties must map non-empty str keys to str values of at most 4 KiB, got {_show(k)}: {_show(x)}")
        if k.startswith("lance_segmerge."):
            raise InvalidInputError(f"property {k!r}: keys starting with 'lance_segmerge.' are the package's own")
        out[k] = x
    return out


# pylance's create_scalar_index keywords for an INVERTED index, and their types
FTS_PARAMS: dict[str, tuple[type, ...]] = {
    "base_tokenizer": (str,), "language": (str,), "with_position": (bool,), "max_token_length": (int, type(None)),
    "lower_case": (bool,), "stem": (bool,), "remove_stop_words": (bool,), "custom_stop_words": (list, tuple, type(None)),
    "ascii_folding": (bool,),
}


@_register()
def _params(v: Any) -> dict[str, Any]:
    """A full-text index's analyzer parameters: a dict of pylance's
    ``create_scalar_index`` keywords (see FTS_PARAMS)."""
    if not isinstance(v, dict):
        raise InvalidInputError(f"params must be a dict of analyzer parameters, got {_show(v)}")
    out: dict[str, Any] = {}
    for k, x in v.items():
        if k not in FTS_PARAMS:
            raise InvalidInputError(f"params: unknown key {_show(k)} (known: {', '.join(FTS_PARAMS)})")
        kinds = FTS_PARAMS[k]
        if not any(type(x) is t or t is not bool and isinstance(x, t) and not isinstance(x, bool) for t in kinds):
            raise InvalidInputError(f"params[{k!r}] must be {' or '.join(t.__name__ for t in kinds)}, got {_show(x)}")
        if k == "max_token_length" and x is not None and not 0 <= x < 1 << 31:
            raise InvalidInputError(f"params['max_token_length'] must be in [0, 2^31), got {x}")
        if k == "custom_stop_words" and x is not None:
            if not all(isinstance(w, str) for w in x):
                raise InvalidInputError(f"params['custom_stop_words'] must be a list of str, got {_show(x)}")
            x = list(x)
        out[k] = x
    return out


CHECKERS["retrain"] = _choice("retrain", ("auto", "never", "always"))
CHECKERS["retrain_max_rows"] = _positive("retrain_max_rows", _I64)


@_register("on_report", "on_pass")
def _callback(v: Any) -> Any:
    if callable(v):
        return v
    raise InvalidInputError(f"a callback must be callable or None, got {_show(v)}")


# -- sizes of a merge, a plan, a tree ------------------------------------------

CHECKERS["window_rows"] = _positive("window_rows")
CHECKERS["parallelism"] = _positive("parallelism")
CHECKERS["memory_bytes"] = _positive("memory_bytes", _I64)
CHECKERS["target_rows_per_task"] = _positive("target_rows_per_task", _I64)
CHECKERS["fragments_per_task"] = _positive("fragments_per_task")
CHECKERS["hnsw_graph"] = _choice("hnsw_graph", HNSW_GRAPH)
CHECKERS["max_retries"] = lambda v: _int(v, "max_retries", 0, 10_000)
CHECKERS["segments_per_task"] = lambda v: _int(v, "segments_per_task", 2, _I31)
CHECKERS["fan_in"] = lambda v: _int(v, "fan_in", 2, _I31)
CHECKERS["target_segments"] = lambda v: _int(v, "target_segments", 1, _I31)


CHECKERS["max_segments_to_merge"] = lambda v: _int(v, "max_segments_to_merge", 2, _I31)


# -- the merge policy ---------------------------------------------------------------

CHECKERS["policy"] = _choice("policy", POLICIES)
CHECKERS["segments_per_tier"] = lambda v: _int(v, "segments_per_tier", 2, _I31)
CHECKERS["max_segment_rows"] = _positive("max_segment_rows", _I64)
CHECKERS["floor_rows"] = _positive("floor_rows", _I64)
CHECKERS["max_segments"] = _positive("max_segments")


@_register()
def _deletes_pct_allowed(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 100:
        raise InvalidInputError(f"deletes_pct_allowed must be a percentage in [0, 100], got {_show(v)}")
    return float(v)


def policy_options(
    policy: str,
    segments_per_tier: Optional[int],
    max_segment_rows: Optional[int],
    floor_rows: Optional[int],
    deletes_pct_allowed: Optional[float],
    max_segments: Optional[int],
) -> dict[str, Any]:
    """The rules between the (already checked) policy arguments, and their
    encoding for the kernel (a missing key is the kernel's default)."""
    given = {
        "segments_per_tier": segments_per_tier,
        "max_segment_rows": max_segment_rows,
        "floor_rows": floor_rows,
        "deletes_pct_allowed": deletes_pct_allowed,
        "max_segments": max_segments,
    }
    if policy != "tiered":
        extra = [k for k, v in given.items() if v is not None]
        if extra:
            raise InvalidInputError(f"{', '.join(extra)} only apply to policy='tiered'")
        return {}
    if floor_rows is not None and max_segment_rows is not None and floor_rows > max_segment_rows:
        raise InvalidInputError(f"floor_rows ({floor_rows}) is above max_segment_rows ({max_segment_rows})")
    return {"policy": policy, **{k: v for k, v in given.items() if v is not None}}


# -- where work runs ----------------------------------------------------------------


@_register()
def _executor(v: Any) -> Any:
    """A name of :data:`EXECUTORS`, a ``concurrent.futures.Executor``, or an
    object with ``map`` and ``cancel`` (see lance_segmerge.executors)."""
    if isinstance(v, str):
        if v not in EXECUTORS:
            raise InvalidInputError(
                f"executor must be 'auto', 'local', 'processes', 'ray', 'dask' or a concurrent.futures.Executor, got {_show(v)}"
            )
        return v
    if isinstance(v, cf.Executor) or (hasattr(v, "map") and hasattr(v, "cancel")):
        return v
    raise InvalidInputError(
        f"executor must be 'auto', 'local', 'processes', 'ray', 'dask' or a concurrent.futures.Executor, got {_show(v)}"
    )


CHECKERS["max_workers"] = lambda v: _int(v, "max_workers", 1, 4096)


@_register()
def _watch(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v != v or v == float("inf"):
        raise InvalidInputError(f"watch must be a positive number of seconds, got {_show(v)}")
    return float(v)


CHECKERS["max_conflicts"] = lambda v: _int(v, "max_conflicts", 0, 10_000)
CHECKERS["older_than"] = lambda v: _seconds(v, "older_than")


# -- models and builds ------------------------------------------------------------


def normalize_index_type(v: Any) -> str:
    """A vector index type, any case: ``IVF_FLAT``, ``IVF_SQ``, ``IVF_PQ``, ``IVF_RQ``."""
    t = v.upper() if isinstance(v, str) else v
    if t not in INDEX_TYPES:
        raise InvalidInputError(f"index_type must be one of {', '.join(INDEX_TYPES)}, got {_show(v)}")
    return str(t)


@_register("index_type")
def _index_type(v: Any) -> str:
    """An index type the build verbs take, any case: a vector type, or a
    scalar type built from the column (``BTREE``, ``BITMAP``, ``LABEL_LIST``,
    ``ZONEMAP``, ``BLOOMFILTER``, ``NGRAM``, ``INVERTED``; ``FTS`` is
    ``INVERTED``)."""
    t = v.upper() if isinstance(v, str) else v
    if t == "FTS":
        t = "INVERTED"
    if t not in INDEX_TYPES + SCALAR_BUILD_TYPES:
        raise InvalidInputError(f"index_type must be one of {', '.join(INDEX_TYPES + SCALAR_BUILD_TYPES)}, got {_show(v)}")
    return str(t)


def normalize_metric(v: Any) -> str:
    """A metric name, any case (``euclidean`` is ``l2``)."""
    m = v.lower() if isinstance(v, str) else v
    if m == "euclidean":
        m = "l2"
    if m not in METRICS:
        raise InvalidInputError(f"metric must be one of {', '.join(METRICS)}, got {_show(v)}")
    return str(m)


CHECKERS["metric"] = normalize_metric
CHECKERS["num_partitions"] = _positive("num_partitions")
CHECKERS["num_sub_vectors"] = _positive("num_sub_vectors")
CHECKERS["num_bits"] = _positive("num_bits", 64)
CHECKERS["sample_rate"] = lambda v: _int(v, "sample_rate", 1, _I31)
CHECKERS["max_iters"] = lambda v: _int(v, "max_iters", 1, _I31)
CHECKERS["seed"] = lambda v: _int(v, "seed", 0, 2**64 - 1)


@_register()
def _fragment_ids(v: Any) -> tuple[int, ...]:
    """A non-empty list of fragment ids (ints or pylance LanceFragments)."""
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise InvalidInputError("fragment_ids must be a non-empty list of fragment ids")
    out: list[int] = []
    for f in v:
        f = getattr(f, "fragment_id", f)
        if isinstance(f, bool) or not isinstance(f, int) or not 0 <= f < 2**32:
            raise InvalidInputError(f"fragment ids must be non-negative integers below 2**32, got {_show(f)}")
        out.append(int(f))
    if not out:
        raise InvalidInputError("fragment_ids must be a non-empty list of fragment ids")
    return tuple(out)


# -- verification -------------------------------------------------------------------

CHECKERS["sample_rows"] = lambda v: _int(v, "sample_rows", 1, 1 << 24)
CHECKERS["queries"] = lambda v: _int(v, "queries", 0, 1 << 16)
CHECKERS["k"] = lambda v: _int(v, "k", 1, 1 << 14)
CHECKERS["nprobes"] = lambda v: _int(v, "nprobes", 1, 1 << 20)


# -- the decorator ------------------------------------------------------------------


def checked(*, converts: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Check every argument of a public function with its checker before the
    body runs; ``converts`` names the parameters the body converts itself
    (the dataset, segments, a plan, a model...). Defaults are not checked:
    they are the function's own values. ``None`` passes where the default
    is ``None``."""

    def wrap(fn: F) -> F:
        sig = inspect.signature(fn)
        todo = []
        nullable = {p.name for p in sig.parameters.values() if p.default is None}
        for p in sig.parameters.values():
            if p.name in converts or p.name == "self" or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                continue
            if p.name not in CHECKERS:
                raise RuntimeError(f"{fn.__qualname__}: argument {p.name!r} has no checker in lance_segmerge._args")
            todo.append(p.name)
        names = tuple(todo)

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError as exc:
                raise TypeError(f"{fn.__qualname__}(): {exc}") from None
            given = bound.arguments
            for n in names:
                if n in given and not (given[n] is None and n in nullable):
                    given[n] = CHECKERS[n](given[n])
            return fn(*bound.args, **bound.kwargs)

        run.__wrapped__ = fn
        return run  # type: ignore[return-value]

    return wrap
