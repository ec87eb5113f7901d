"""Plain, picklable value types: index segments and their statistics.

Everything here is a frozen dataclass of plain fields (str, int, bytes,
tuples), so it pickles across process and machine boundaries (Ray, Dask,
multiprocessing) and round-trips through JSON. None of it holds a handle to
the native kernel or to an open dataset.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Mapping, Optional, SupportsIndex, Union, cast, overload

from . import _ffi, _fields
from ._display import Column, TableSpec, Tabular, compact_ids, human_bytes, kv_html, options, plural, short_id
from ._fields import Codec, spec
from ._handles import DatasetHandle, resolve
from ._validate import (
    _I32,
    _mapping,
    _MAX_MS,
    _U32,
    _int,
    _loads,
    _show,
    _str,
    _uuid,
    bool_field,
    bytes_field,
    int_field,
    ints_field,
    opt_bool_field,
    opt_int_field,
    opt_str_field,
    redact_uri,
    required,
    seq_field,
    str_field,
    strs_field,
    tuple_of,
)
from .errors import InvalidInputError

if TYPE_CHECKING:  # pragma: no cover
    from lance.dataset import Index as LanceIndex

    from ._handles import DatasetLike  # noqa: F811

__all__ = ["IndexFile", "IndexSegment", "SegmentList", "MergePlan", "MergeTask", "OperationProgress", "SEGMENT_FORMAT_VERSION", "PLAN_FORMAT_VERSION"]

#: Version of the IndexSegment serialisation; bumped on incompatible changes.
SEGMENT_FORMAT_VERSION = 1


def _ms_to_datetime(ms: Any, what: str = "created_at_ms") -> Optional[datetime]:
    if ms is None:
        return None
    return datetime.fromtimestamp(_int(ms, "created_at_ms", 0, _MAX_MS) / 1000.0, tz=timezone.utc)


def _kernel_ms(ms: Any) -> Optional[datetime]:
    return None if ms is None else datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc)


def _datetime_to_ms(dt: Optional[datetime]) -> Optional[int]:
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(round(dt.timestamp() * 1000))


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _unb64(s: Any, what: str = "bytes") -> bytes:
    """Decode strict base64 (None or "" is empty); anything else is an
    InvalidInputError."""
    if s is None or s == "":
        return b""
    if not isinstance(s, str):
        raise InvalidInputError(f"{what} must be a base64 string, got {_show(s)}")
    try:
        return base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidInputError(f"{what} is not valid base64 ({exc})") from None


def _kernel_b64(s: Any) -> bytes:
    return base64.b64decode(s or b"")


def _or(default: Any) -> Any:
    """A decoder mapping a JSON null (or 0, "") to ``default``."""
    return lambda v, what: v or default


def _zero_none(v: Any, what: str) -> Any:
    """A decoder: the kernel writes 0 for an absent statistic."""
    return v or None


def _tuple(v: Any) -> tuple[Any, ...]:
    return tuple(v or ())


def _created_at(value: Any, what: str) -> Optional[datetime]:
    if value is not None and not isinstance(value, datetime):
        raise InvalidInputError(f"{what} must be a datetime or None, got {_show(value)}")
    return value


def _fragment_ids(value: Any, what: str) -> tuple[int, ...]:
    frags = ints_field(0, _U32)(value, what)
    if any(a >= b for a, b in zip(frags, frags[1:])):
        raise InvalidInputError(f"{what} must be sorted and unique")
    return cast(tuple[int, ...], frags)


def _format_version(expected: int, what_type: str) -> Any:
    def check(value: Any, what: str) -> int:
        if _int(value, f"{what_type} format_version") != expected:
            raise InvalidInputError(
                f"{what_type} format_version {value} is not supported "
                f"(this lance_segmerge reads version {expected})"
            )
        return int(value)

    return check


_OPT_U64 = opt_int_field()


def _pairs(value: Any, what: str) -> tuple[tuple[str, str], ...]:
    """A check of key-value pairs (a dict becomes sorted pairs)."""
    if isinstance(value, Mapping):
        value = sorted(value.items())
    pairs = seq_field(value, what)
    for p in pairs:
        if not (isinstance(p, tuple) and len(p) == 2 and all(isinstance(x, str) for x in p)):
            raise InvalidInputError(f"{what} must be str key-value pairs, got {_show(p)}")
    return pairs


def _pairs_decode(value: Any, what: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    return tuple(sorted(_mapping(value, what).items()))


_PAIRS = Codec(dict, _pairs_decode, lambda v: tuple(sorted((v or {}).items())))
_B64 = Codec(_b64, _unb64, _kernel_b64)
_INTS_U32 = ints_field(0, _U32)


@dataclass(frozen=True)
class IndexFile:
    """One file of a segment directory.

    Parameters
    ----------
    path : str
        Path relative to the segment directory, e.g. ``"auxiliary.idx"``.
    size_bytes : int
        File size in bytes.
    """

    path: str = spec(lambda v, w: _str(v, "IndexFile path", empty=False), decode=required("path"))
    size_bytes: int = spec(int_field(), decode=required("size_bytes"))

    def __post_init__(self) -> None:
        _fields.check_fields(self, "IndexFile")

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size_bytes": self.size_bytes}

    @classmethod
    def from_dict(cls, d: Any, what: str = "a file") -> "IndexFile":
        return _fields.from_dict(cls, d, what)


def _files_decode(v: Any, what: str) -> tuple[IndexFile, ...]:
    return tuple(IndexFile.from_dict(f, what) for f in seq_field(v, what))


def _files_kernel(v: Any) -> tuple[IndexFile, ...]:
    return tuple(IndexFile(f["path"], f["size_bytes"]) for f in v or ())


@dataclass(frozen=True)
class IndexSegment:
    """One physical segment of a vector index, as the manifest and its files
    describe it.

    The first fields mirror pylance's :class:`lance.dataset.Index`; the
    statistics (``index_type`` onward) are read from the segment's
    ``index.idx`` and ``auxiliary.idx`` and are ``None`` when the files were
    not read. ``metadata`` holds the IndexMetadata protobuf exactly as
    committed, so nothing is lost when a segment travels through a plan.

    Every field is declared once, below, with its check and its JSON form
    (:mod:`lance_segmerge._fields`): :meth:`to_dict`, :meth:`from_dict`
    (outside JSON, checked) and the kernel's own JSON all follow it.

    Parameters
    ----------
    uuid : str
        Segment UUID; its files live under ``_indices/<uuid>/``.
    name : str
        Logical index name shared by all segments of the index.
    fields : tuple of int
        Field ids of the indexed column.
    dataset_version : int
        Dataset version the segment was built (or last merged) at.
    fragment_ids : tuple of int
        Fragments the segment covers, ascending.
    index_version : int
        Lance index format version of the segment.
    created_at : datetime, optional
        Creation time (UTC), when the manifest records it.
    base_id : int, optional
        Base path id, for segments of shallow clones.
    files : tuple of IndexFile
        Files of the segment directory, as the manifest lists them.
    index_details_type_url : str
        Type URL of the index details (``/lance.index.pb.VectorIndexDetails``).
    index_details : bytes
        Encoded index details.
    metadata : bytes
        The IndexMetadata protobuf, unknown fields included.
    index_type : str, optional
        ``IVF_FLAT``, ``IVF_SQ``, ``IVF_PQ``, ``IVF_RQ`` or ``IVF_HNSW_*``.
    distance_type : str, optional
        ``l2``, ``cosine``, ``dot`` or ``hamming``.
    num_partitions : int, optional
        IVF partition count.
    partition_rows : tuple of int
        Rows of each IVF partition in ``auxiliary.idx``.
    num_rows : int, optional
        Rows in the segment.
    pq_transposed : bool, optional
        IVF_PQ: codes stored in the query (transposed) layout.
    rq_packed : bool, optional
        IVF_RQ: codes stored in the packed (FastScan) layout.
    num_bits : int, optional
        Bits per code (PQ, SQ, RQ).
    num_sub_vectors : int, optional
        PQ sub-vectors.
    dimension : int, optional
        Vector (or RQ code) dimension.
    file_version : str, optional
        Lance file format version of the index files (``"2.0"``…``"2.2"``).
    index_file_bytes, auxiliary_file_bytes : int, optional
        Sizes of ``index.idx`` and ``auxiliary.idx``.
    hnsw_m, hnsw_ef_construction, hnsw_max_level : int, optional
        IVF_HNSW_*: the graphs' build parameters (``max_level`` caps the
        number of levels).
    hnsw_levels : int, optional
        IVF_HNSW_*: the most levels any partition's graph has.
    partition_graph_rows : tuple of int
        IVF_HNSW_*: rows of each partition's graph in ``index.idx`` (one per
        node and level).
    distinct_keys, largest_key_rows : int, optional
        BITMAP and LABEL_LIST: the segment's distinct keys (a null key
        counts as one) and the most rows one key holds. ``num_rows`` is
        counted for BITMAP (a key per indexed row), not for LABEL_LIST.
    format_version : int
        Serialisation version of this class.
    stale_rows : int, optional
        Rows a merge of this segment would drop: deleted (deletion files)
        or of fragments the dataset no longer has. Estimated from the
        manifest (the segment's rows minus the live rows of the fragments
        it covers; low by the count of null vectors, which are not
        indexed).
    committed_version, commit_operation, commit_properties : optional
        Provenance (``list_index_segments(with_provenance=True)``): the
        version whose commit first listed the segment, that commit's
        operation and its transaction properties (what lance-segmerge
        writes: the verb, the run, the version; a caller's key-values).
    """

    #: The ``stats`` object of the JSON form is present when ``index_type``
    #: is, ``provenance`` when ``committed_version`` is.
    _groups: ClassVar[dict[str, str]] = {"stats": "index_type", "provenance": "committed_version"}

    uuid: str = spec(lambda v, w: _uuid(v, "IndexSegment uuid"), decode=required("uuid"))
    name: str = spec(str_field, decode=required("name"))
    fields: tuple[int, ...] = spec(ints_field(-(2**31), _I32), decode=seq_field, kernel=_tuple)
    dataset_version: int = spec(int_field(), decode=required("dataset_version"))
    fragment_ids: tuple[int, ...] = spec(_fragment_ids, decode=seq_field, kernel=_tuple)
    index_version: int = spec(int_field(-(2**31), _I32), decode=_or(0))
    created_at: Optional[datetime] = spec(
        _created_at, default=None, key="created_at_ms", encode=_datetime_to_ms, decode=_ms_to_datetime, kernel=_kernel_ms
    )
    base_id: Optional[int] = spec(opt_int_field(0, _U32), default=None)
    files: tuple[IndexFile, ...] = spec(
        tuple_of(IndexFile, "IndexFile objects"), default=(), encode=lambda fs: [f.to_dict() for f in fs],
        decode=_files_decode, kernel=_files_kernel,
    )
    index_details_type_url: str = spec(str_field, default="", decode=_or(""))
    index_details: bytes = spec(bytes_field, default=b"", repr=False, codec=_B64)
    metadata: bytes = spec(bytes_field, default=b"", repr=False, codec=_B64)
    index_type: Optional[str] = spec(opt_str_field, default=None, group="stats")
    distance_type: Optional[str] = spec(opt_str_field, default=None, group="stats")
    num_partitions: Optional[int] = spec(_OPT_U64, default=None, group="stats")
    partition_rows: tuple[int, ...] = spec(
        _INTS_U32, default=(), repr=False, group="stats", encode=list, decode=seq_field, kernel=_tuple
    )
    num_rows: Optional[int] = spec(_OPT_U64, default=None, group="stats")
    pq_transposed: Optional[bool] = spec(opt_bool_field, default=None, group="stats")
    rq_packed: Optional[bool] = spec(opt_bool_field, default=None, group="stats")
    num_bits: Optional[int] = spec(_OPT_U64, default=None, group="stats", decode=_zero_none)
    num_sub_vectors: Optional[int] = spec(_OPT_U64, default=None, group="stats", decode=_zero_none)
    dimension: Optional[int] = spec(_OPT_U64, default=None, group="stats", decode=_zero_none)
    file_version: Optional[str] = spec(opt_str_field, default=None, group="stats")
    index_file_bytes: Optional[int] = spec(_OPT_U64, default=None, group="stats")
    auxiliary_file_bytes: Optional[int] = spec(_OPT_U64, default=None, group="stats")
    hnsw_m: Optional[int] = spec(_OPT_U64, default=None, group="stats", decode=_zero_none)
    hnsw_ef_construction: Optional[int] = spec(_OPT_U64, default=None, group="stats", decode=_zero_none)
    hnsw_max_level: Optional[int] = spec(_OPT_U64, default=None, group="stats", decode=_zero_none)
    hnsw_levels: Optional[int] = spec(_OPT_U64, default=None, group="stats", decode=_zero_none)
    partition_graph_rows: tuple[int, ...] = spec(
        _INTS_U32, default=(), repr=False, group="stats", encode=list, decode=seq_field, kernel=_tuple
    )
    distinct_keys: Optional[int] = spec(_OPT_U64, default=None, group="stats")
    largest_key_rows: Optional[int] = spec(_OPT_U64, default=None, group="stats")
    format_version: int = spec(
        _format_version(SEGMENT_FORMAT_VERSION, "IndexSegment"), default=SEGMENT_FORMAT_VERSION,
        missing=SEGMENT_FORMAT_VERSION,
    )
    stale_rows: Optional[int] = spec(_OPT_U64, default=None, group="stats")
    committed_version: Optional[int] = spec(_OPT_U64, default=None, group="provenance", key="version")
    commit_operation: Optional[str] = spec(opt_str_field, default=None, group="provenance", key="operation")
    commit_properties: tuple[tuple[str, str], ...] = spec(
        _pairs, default=(), repr=False, group="provenance", key="properties", codec=_PAIRS
    )

    def __post_init__(self) -> None:
        u = _uuid(self.uuid, "IndexSegment uuid")
        _fields.check_fields(self, f"segment {u}:")

    # -- serialisation -----------------------------------------------------

    @property
    def size_bytes(self) -> int:
        """Total size of the segment's files, in bytes."""
        return sum(f.size_bytes for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (bytes as base64; statistics
        under ``"stats"``, null when the files were not read)."""
        return _fields.to_dict(self)

    def _entry_dict(self) -> dict[str, Any]:
        """to_dict without the statistics: the manifest entry, all the kernel
        reads of a segment it is given (it opens the files for the rest).
        At 2048 partitions the statistics are most of a segment's JSON."""
        return _fields.to_dict(self, groups=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "IndexSegment":
        """Inverse of :meth:`to_dict`, for segments from outside (a plan
        from another machine, a file, a user's dict).

        Raises
        ------
        InvalidInputError
            ``d`` is not a segment: a missing or mistyped field, an
            out-of-range number, invalid base64.
        """
        return _fields.from_dict(cls, d, "an IndexSegment")

    @classmethod
    def _from_kernel(cls, d: Mapping[str, Any]) -> "IndexSegment":
        """The segment of JSON the kernel wrote in this process (a listing,
        a plan, a merge result): the same fields as :meth:`from_dict`,
        without the checks meant for outside input (a plan over a thousand
        deltas builds thousands of segments)."""
        return _fields.from_kernel(cls, d)

    def to_json(self) -> str:
        """Serialise to a JSON string."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, s: str) -> "IndexSegment":
        """Inverse of :meth:`to_json`; malformed input is an
        :class:`InvalidInputError`."""
        return cls.from_dict(_loads(s, "IndexSegment JSON"))

    # -- display -------------------------------------------------------------

    @property
    def layout(self) -> Optional[str]:
        """Code layout: ``"query"`` (PQ transposed, RQ packed),
        ``"row-major"``, or ``None`` (no layout flag, or no statistics)."""
        flag = self.pq_transposed if self.pq_transposed is not None else self.rq_packed
        return None if flag is None else ("query" if flag else "row-major")

    @property
    def partition_imbalance(self) -> Optional[float]:
        """Rows of the largest IVF partition over the mean (1.0 is
        perfectly balanced); ``None`` without statistics or rows."""
        return _imbalance(self.partition_rows)

    def _repr_html_(self) -> str:
        parts = self.partition_rows
        items: list[tuple[str, Any]] = [
            ("uuid", self.uuid),
            ("index", f"{self.name} ({self.index_type or '?'}, {self.distance_type or '?'})"),
            ("fragments", f"{len(self.fragment_ids)}: {compact_ids(self.fragment_ids)}"),
            ("rows", "-" if self.num_rows is None else f"{self.num_rows:,}"),
            ("IVF partitions", "-" if self.num_partitions is None else f"{self.num_partitions:,}"),
            ("partition rows", f"min {min(parts):,}, max {max(parts):,}, imbalance {self.partition_imbalance:.3g}" if parts and self.partition_imbalance else "-"),
            ("layout", self.layout or "-"),
            ("size", f"{human_bytes(self.size_bytes)} in {plural(len(self.files), 'file')}"),
            ("dataset version", self.dataset_version),
            ("index version", self.index_version),
            ("created", "-" if self.created_at is None else self.created_at.strftime("%Y-%m-%d %H:%M:%S UTC")),
            ("file version", self.file_version or "-"),
        ]
        return kv_html(f"IndexSegment {short_id(self.uuid)}", items)

    # -- pylance interop ---------------------------------------------------

    def to_lance_index(self) -> "LanceIndex":
        """Convert to pylance's :class:`lance.dataset.Index`.

        The result can be passed to pylance's
        ``commit_existing_index_segments`` or ``merge_existing_index_segments``.
        """
        from lance.dataset import Index
        from lance.dataset import IndexFile as LanceIndexFile

        return Index(
            uuid=self.uuid,
            name=self.name,
            fields=list(self.fields),
            dataset_version=self.dataset_version,
            fragment_ids=cast(Any, set(self.fragment_ids)),  # pylance accepts a set
            index_version=self.index_version,
            created_at=self.created_at,
            base_id=self.base_id,
            files=[LanceIndexFile(path=f.path, size_bytes=f.size_bytes) for f in self.files]
            or None,
            index_details=(self.index_details_type_url, self.index_details)
            if self.index_details_type_url
            else None,
        )

    @classmethod
    def from_lance_index(
        cls, index: "LanceIndex", dataset: Optional["DatasetLike"] = None
    ) -> "IndexSegment":
        """Build an IndexSegment from pylance's :class:`lance.dataset.Index`.

        Parameters
        ----------
        index : lance.dataset.Index
            A segment as pylance returns it (``create_index_uncommitted``,
            ``merge_existing_index_segments``, ``describe_indices``…).
        dataset : Dataset, str, os.PathLike or lance.LanceDataset, optional
            When given, the statistics are read from the segment's files in
            this dataset.
        """
        handle = None if dataset is None else resolve(dataset, cls=DatasetHandle)

        try:
            details = getattr(index, "index_details", None)
            entry = cls(
                uuid=str(index.uuid),
                name=index.name,
                fields=tuple(index.fields),
                dataset_version=index.dataset_version,
                fragment_ids=tuple(sorted(index.fragment_ids)),
                index_version=index.index_version,
                created_at=getattr(index, "created_at", None),
                base_id=getattr(index, "base_id", None),
                files=tuple(IndexFile(f.path, f.size_bytes) for f in getattr(index, "files", None) or ()),
                index_details_type_url=details[0] if details else "",
                index_details=bytes(details[1]) if details else b"",
            )
        except InvalidInputError:
            raise
        except (AttributeError, TypeError, ValueError, OverflowError, IndexError) as exc:
            raise InvalidInputError(f"not a lance.dataset.Index: {_show(index)} ({type(exc).__name__}: {exc})") from None
        uri = handle.uri if handle is not None else ""
        opts = handle.options_json if handle is not None else ""
        out = _ffi.call_json("DescribeSegment", uri, opts, json.dumps(entry._entry_dict()), handle is not None)
        return cls._from_kernel(out)


def _imbalance(parts: tuple[int, ...]) -> Optional[float]:
    total = sum(parts)
    if not parts or total == 0:
        return None
    return max(parts) * len(parts) / total


_SEGMENT_COLUMNS = (
    Column("uuid", "uuid"),
    Column("name", "text", label="index"),
    Column("index_type", "text", label="type"),
    Column("distance_type", "text", show=False),
    Column("fragment_ids", "ids", label="fragments"),
    Column("num_fragments", "int", total=True, show=False),
    Column("num_rows", "int", label="rows", total=True),
    Column("num_partitions", "int", label="partitions"),
    Column("partition_rows_min", "int", show=False),
    Column("partition_rows_max", "int", show=False),
    Column("partition_imbalance", "float", label="imbalance"),
    Column("layout", "text"),
    Column("size_bytes", "bytes", label="size", total=True),
    Column("index_file_bytes", "bytes", total=True, show=False),
    Column("auxiliary_file_bytes", "bytes", total=True, show=False),
    Column("dataset_version", "int", label="version"),
    Column("index_version", "int", show=False),
    Column("created_at", "time", label="created"),
    Column("file_version", "text", show=False),
    Column("num_bits", "int", show=False),
    Column("num_sub_vectors", "int", show=False),
    Column("dimension", "int", show=False),
)


def segments_table(segments: "Iterable[IndexSegment]", title: Optional[str] = None) -> TableSpec:
    """The table of a list of segments: one row per segment, with its
    statistics as columns; the summary holds the totals over the index,
    its IVF partition imbalance among them."""
    segs = list(segments)
    names = sorted({s.name for s in segs})
    types = sorted({s.index_type for s in segs if s.index_type})
    rows = tuple(
        (
            s.uuid, s.name, s.index_type, s.distance_type, s.fragment_ids, len(s.fragment_ids), s.num_rows,
            s.num_partitions, min(s.partition_rows) if s.partition_rows else None,
            max(s.partition_rows) if s.partition_rows else None, s.partition_imbalance, s.layout,
            s.size_bytes, s.index_file_bytes, s.auxiliary_file_bytes, s.dataset_version, s.index_version,
            s.created_at, s.file_version, s.num_bits, s.num_sub_vectors, s.dimension,
        )
        for s in segs
    )
    columns = tuple(
        dataclasses.replace(c, show=len(names) > 1) if c.name == "name" else c for c in _SEGMENT_COLUMNS
    )
    if title is None:
        what = ", ".join(names) if names else "no index"
        title = f"{plural(len(segs), 'segment')} of {what}" + (f" ({', '.join(types)})" if types else "")
    summary: list[tuple[str, str]] = []
    known_rows = [s.num_rows for s in segs if s.num_rows is not None]
    if known_rows:
        summary.append(("rows", f"{sum(known_rows):,}"))
    summary.append(("size", human_bytes(sum(s.size_bytes for s in segs))))
    summary.append(("fragments", f"{sum(len(s.fragment_ids) for s in segs):,}"))
    parts = SegmentList(segs).partition_rows() if len(names) == 1 else ()
    if parts:
        summary.append(("IVF partitions", f"{len(parts):,}"))
        summary.append(("partition imbalance", f"{_imbalance(parts):.3g} (largest / mean, over the index)"))
    return TableSpec(title, columns, rows, tuple(summary), "segment")


class SegmentList(list[IndexSegment], Tabular):
    """The segments of a listing: a ``list`` of :class:`IndexSegment` that
    also shows itself as a table (``to_arrow()``, ``to_pandas()``, HTML in
    notebooks, a compact ``repr``) and sums its statistics.

    Slices are SegmentLists too; everything else is plain ``list``
    behaviour (equality with lists, pickling, JSON through the elements).
    """

    def __repr__(self) -> str:
        return self.to_text(options.max_text_rows)

    @overload
    def __getitem__(self, i: SupportsIndex) -> IndexSegment: ...

    @overload
    def __getitem__(self, i: slice) -> "SegmentList": ...

    def __getitem__(self, i: Union[SupportsIndex, slice]) -> Union[IndexSegment, "SegmentList"]:
        if isinstance(i, slice):
            return SegmentList(super().__getitem__(i))
        return super().__getitem__(i)

    def _table_spec(self) -> TableSpec:
        return segments_table(self)

    @property
    def num_rows(self) -> int:
        """Rows over every segment (those with statistics)."""
        return sum(s.num_rows or 0 for s in self)

    @property
    def size_bytes(self) -> int:
        """Bytes of every segment's files."""
        return sum(s.size_bytes for s in self)

    def partition_rows(self) -> tuple[int, ...]:
        """Rows of each IVF partition over every segment: what a query
        probing that partition scans, across the index. Empty when the
        segments have no statistics or different partition counts (they
        then belong to different models)."""
        counts = {s.num_partitions for s in self}
        if not self or len(counts) != 1 or None in counts or any(len(s.partition_rows) != s.num_partitions for s in self):
            return ()
        return tuple(sum(col) for col in zip(*(s.partition_rows for s in self)))

    def partition_imbalance(self) -> Optional[float]:
        """Largest IVF partition over the mean, across the index
        (:meth:`partition_rows`); ``None`` when unknown."""
        return _imbalance(self.partition_rows())


def _count(v: Any) -> int:
    return int(v or 0)


@dataclass(frozen=True)
class OperationProgress:
    """A snapshot of a long operation's counters (merge, commit, build,
    verify), as the kernel reports them.

    Parameters
    ----------
    stage : str
        ``"validate"``, ``"merge"`` (``"build_graph"`` for IVF_HNSW_*, whose
        partitions merge and get their graphs together), ``"write_index"``,
        ``"commit"`` or ``"done"``.
    partitions_done, partitions_total : int
        IVF partitions merged so far, and in all.
    rows_read, rows_written : int
        Input rows read, output rows written.
    bytes_written : int
        Bytes of output files written.
    graph_rows_inserted, graph_rows_reused : int
        IVF_HNSW_*: rows inserted into the merged partitions' graphs by
        search, and rows kept with their edges from an input's graph.
    graph_distances : int
        IVF_HNSW_*: distances computed to build the graphs.
    """

    stage: str = spec(str_field, default="", kernel=lambda v: str(v or ""))
    partitions_done: int = spec(int_field(), default=0, kernel=_count)
    partitions_total: int = spec(int_field(), default=0, kernel=_count)
    rows_read: int = spec(int_field(), default=0, kernel=_count)
    rows_written: int = spec(int_field(), default=0, kernel=_count)
    bytes_written: int = spec(int_field(), default=0, kernel=_count)
    graph_rows_inserted: int = spec(int_field(), default=0, kernel=_count)
    graph_rows_reused: int = spec(int_field(), default=0, kernel=_count)
    graph_distances: int = spec(int_field(), default=0, kernel=_count)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "OperationProgress":
        """A snapshot of the kernel's counters (its own JSON)."""
        return _fields.from_kernel(cls, d)

    def to_dict(self) -> dict[str, Any]:
        return _fields.to_dict(self)


#: Version of the MergePlan / MergeTask serialisation.
PLAN_FORMAT_VERSION = 1


def _segments_decode(v: Any, what: str) -> tuple[IndexSegment, ...]:
    return tuple(IndexSegment.from_dict(s) for s in seq_field(required("segments")(v, what), what))


def _segments_kernel(v: Any) -> tuple[IndexSegment, ...]:
    return tuple(IndexSegment._from_kernel(s) for s in v or ())


_SEGMENTS = Codec(lambda segs: [s.to_dict() for s in segs], _segments_decode, _segments_kernel)


@dataclass(frozen=True)
class MergeTask(Tabular):
    """One worker's job: merge these segments into one new segment.

    Parameters
    ----------
    task_id : int
        Position of the task in its plan.
    segments : tuple of IndexSegment
        Input segments, in merge order.
    rows : int
        Rows of the inputs.
    bytes : int
        Bytes of the inputs' files.
    reason : str
        Why the plan's policy chose this task (``policy="tiered"``). A
        task of a single segment rewrites it to drop its deleted or stale
        rows; it has a reason starting with ``"reclaim"``.
    """

    task_id: int = spec(int_field(), decode=required("task_id"))
    segments: tuple[IndexSegment, ...] = spec(
        tuple_of(IndexSegment, "IndexSegment objects"), codec=_SEGMENTS
    )
    rows: int = spec(int_field(), default=0, decode=_or(0))
    bytes: int = spec(int_field(), default=0, decode=_or(0))
    format_version: int = spec(
        _format_version(PLAN_FORMAT_VERSION, "MergeTask"), default=PLAN_FORMAT_VERSION, missing=PLAN_FORMAT_VERSION
    )
    reason: str = spec(str_field, default="", decode=_or(""))

    def __post_init__(self) -> None:
        _int(self.task_id, "task_id")
        _fields.check_fields(self, f"task {self.task_id}:")
        if len(self.segments) < 2 and not (len(self.segments) == 1 and self.reason.startswith("reclaim")):
            raise InvalidInputError(
                f"task {self.task_id}: a merge task needs at least two segments (one only to reclaim stale rows)"
            )

    @property
    def segment_ids(self) -> tuple[str, ...]:
        """UUIDs of the input segments."""
        return tuple(s.uuid for s in self.segments)

    def __repr__(self) -> str:
        return f"MergeTask(task_id={self.task_id}, segments={len(self.segments)}, rows={self.rows:,}, bytes={human_bytes(self.bytes)})"

    def _table_spec(self) -> TableSpec:
        return segments_table(self.segments, f"task {self.task_id}: {plural(len(self.segments), 'segment')}")

    def to_dict(self) -> dict[str, Any]:
        return _fields.to_dict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MergeTask":
        """Inverse of :meth:`to_dict`; malformed input is an
        :class:`InvalidInputError`."""
        if isinstance(d, Mapping) and "segments" in d and isinstance(d.get("task_id"), int):
            return _fields.from_dict(cls, d, f"task {d['task_id']}")
        return _fields.from_dict(cls, d, "a MergeTask")

    @classmethod
    def _from_kernel(cls, d: Mapping[str, Any]) -> "MergeTask":
        return _fields.from_kernel(cls, d)

    def to_json(self) -> str:
        """Serialise to a JSON string (a task can travel on its own)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, s: str) -> "MergeTask":
        """Inverse of :meth:`to_json`; malformed input is an
        :class:`InvalidInputError`."""
        return cls.from_dict(_loads(s, "MergeTask JSON"))


@dataclass(frozen=True)
class MergePlan(Tabular):
    """A set of disjoint merge tasks over the segments of one index, pinned
    to the dataset version it was planned at.

    A plan holds no credentials and nothing native: it pickles and
    round-trips through JSON, so it can be shipped to any worker that sees
    the same storage.

    Parameters
    ----------
    plan_id : str
        Content hash: the same inputs give the same id.
    dataset_uri : str
        Dataset root.
    read_version : int
        Version the plan was made at; the commit checks everything
        committed since.
    index_name, column, index_type : str
        The index, its column, its type.
    tasks : tuple of MergeTask
        Disjoint tasks.
    untouched : tuple of str
        Segments of the index the plan leaves alone (beyond
        ``max_segments_to_merge``, or covering no live fragment).
    requantize_sq : bool
        The planned IVF_SQ segments have different bounds: the merges
        re-quantize them to the union of the bounds.
    policy : str
        The policy that chose the tasks: ``"all"`` or ``"tiered"``.
    summary : str
        The policy's decision as a whole (``"tiered"``): segments, allowed
        count, merges chosen.
    """

    plan_id: str = spec(str_field, decode=required("plan_id"))
    # Plans carry no credentials (they travel, and print): a URI's
    # userinfo is masked; workers get the Dataset, with its options.
    dataset_uri: str = spec(lambda v, w: redact_uri(_str(v, "dataset_uri")), decode=required("dataset_uri"))
    read_version: int = spec(int_field(), decode=required("read_version"))
    index_name: str = spec(str_field, decode=required("index_name"))
    column: str = spec(str_field, decode=_or(""))
    index_type: str = spec(str_field, decode=_or(""))
    tasks: tuple[MergeTask, ...] = spec(
        tuple_of(MergeTask, "MergeTask objects"),
        encode=lambda ts: [t.to_dict() for t in ts],
        decode=lambda v, w: tuple(MergeTask.from_dict(t) for t in seq_field(v, "tasks")),
        kernel=lambda v: tuple(MergeTask._from_kernel(t) for t in v or ()),
    )
    untouched: tuple[str, ...] = spec(strs_field, default=(), encode=list, decode=seq_field, kernel=_tuple)
    requantize_sq: bool = spec(bool_field, default=False, missing=False)
    format_version: int = spec(
        _format_version(PLAN_FORMAT_VERSION, "MergePlan"), default=PLAN_FORMAT_VERSION, missing=PLAN_FORMAT_VERSION
    )
    policy: str = spec(str_field, default="all", decode=_or("all"))
    summary: str = spec(str_field, default="", decode=_or(""))

    def __post_init__(self) -> None:
        _fields.check_fields(self, "")
        seen: set[str] = set()
        for t in self.tasks:
            for u in t.segment_ids:
                if u in seen:
                    raise InvalidInputError(f"segment {u} appears in two tasks")
                seen.add(u)

    @property
    def sources(self) -> tuple[str, ...]:
        """UUIDs of every segment the plan merges (what its commit replaces)."""
        return tuple(u for t in self.tasks for u in t.segment_ids)

    @property
    def num_segments(self) -> int:
        return len(self.sources)

    @property
    def num_rows(self) -> int:
        """Rows of every planned segment."""
        return sum(t.rows for t in self.tasks)

    @property
    def size_bytes(self) -> int:
        """Bytes of every planned segment."""
        return sum(t.bytes for t in self.tasks)

    def segments(self) -> SegmentList:
        """Every planned segment, in task order."""
        return SegmentList(s for t in self.tasks for s in t.segments)

    def __repr__(self) -> str:
        return (
            f"MergePlan(index={self.index_name!r}, type={self.index_type or '?'}, version={self.read_version}, "
            f"tasks={len(self.tasks)}, segments={self.num_segments}, rows={self.num_rows:,}, "
            f"untouched={len(self.untouched)}, plan_id={self.plan_id[:12]!r})"
        )

    def _table_spec(self) -> TableSpec:
        columns = (
            Column("task_id", "int", label="task"),
            Column("segments", "int", total=True),
            Column("rows", "int", total=True),
            Column("bytes", "bytes", label="size", total=True),
            Column("num_fragments", "int", label="fragments", total=True),
            Column("largest_segment_rows", "int", label="largest segment"),
            Column("segment_ids", "list", label="inputs"),
        )
        rows = tuple(
            (
                t.task_id, len(t.segments), t.rows, t.bytes, sum(len(s.fragment_ids) for s in t.segments),
                max((s.num_rows or 0 for s in t.segments), default=0), t.segment_ids,
            )
            for t in self.tasks
        )
        summary = (
            ("plan", self.plan_id[:12]),
            ("column", self.column),
            ("segments", f"{self.num_segments:,} planned, {len(self.untouched):,} untouched"),
            ("requantize_sq", "yes" if self.requantize_sq else "no"),
            ("dataset", self.dataset_uri),
        )
        title = f"MergePlan of {self.index_name} ({self.index_type or '?'}) at version {self.read_version}: {plural(len(self.tasks), 'task')}"
        return TableSpec(title, columns, rows, summary, "task")

    def to_dict(self) -> dict[str, Any]:
        return _fields.to_dict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MergePlan":
        """Inverse of :meth:`to_dict`, for a plan from outside; malformed
        input is an :class:`InvalidInputError`."""
        return _fields.from_dict(cls, d, "a MergePlan")

    @classmethod
    def _from_kernel(cls, d: Mapping[str, Any]) -> "MergePlan":
        """The plan the kernel just made in this process (unchecked)."""
        return _fields.from_kernel(cls, d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, s: str) -> "MergePlan":
        """Inverse of :meth:`to_json`; malformed input is an
        :class:`InvalidInputError`."""
        return cls.from_dict(_loads(s, "MergePlan JSON"))
