"""Plain, picklable value types: index segments and their statistics.

Everything here is a frozen dataclass of plain fields (str, int, bytes,
tuples), so it pickles across process and machine boundaries (Ray, Dask,
multiprocessing) and round-trips through JSON. None of it holds a handle to
the native kernel or to an open dataset.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import contextvars
import dataclasses
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Optional, SupportsIndex, Union, cast, overload

from ._display import Column, TableSpec, Tabular, human_bytes, kv_html, options, plural
from ._validate import (
    _U32,
    _I32,
    _MAX_MS,
    _bool,
    _field,
    _int,
    _ints,
    _loads,
    _mapping,
    _opt_bool,
    _opt_int,
    _opt_str,
    _seq,
    _show,
    _str,
    _uuid,
    redact_uri,
)
from .errors import InvalidInputError

if TYPE_CHECKING:  # pragma: no cover
    from lance.dataset import Index as LanceIndex

    from .api import DatasetLike

__all__ = ["IndexFile", "IndexSegment", "SegmentList", "MergePlan", "MergeTask", "OperationProgress", "SEGMENT_FORMAT_VERSION", "PLAN_FORMAT_VERSION"]

#: Version of the IndexSegment serialisation; bumped on incompatible changes.
SEGMENT_FORMAT_VERSION = 1


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

    path: str
    size_bytes: int

    def __post_init__(self) -> None:
        _str(self.path, "IndexFile path", empty=False)
        _int(self.size_bytes, f"size_bytes of {self.path}")


# Set while decoding JSON the kernel itself just wrote (a listing, a plan, a
# merge result): IndexSegment.from_dict then skips its checks, which are for
# segments that arrive from outside (a plan from another machine, a file).
# A plan over a thousand deltas builds thousands of segments, and the checks
# were half of each one's Python cost.
_KERNEL_JSON: contextvars.ContextVar[bool] = contextvars.ContextVar("lance_segmerge_kernel_json", default=False)


@contextlib.contextmanager
def _from_kernel() -> Iterator[None]:
    """Decode the kernel's own JSON inside this block (see _KERNEL_JSON)."""
    token = _KERNEL_JSON.set(True)
    try:
        yield
    finally:
        _KERNEL_JSON.reset(token)


def _ms_to_datetime(ms: Any) -> Optional[datetime]:
    if ms is None:
        return None
    return datetime.fromtimestamp(_int(ms, "created_at_ms", 0, _MAX_MS) / 1000.0, tz=timezone.utc)


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


@dataclass(frozen=True)
class IndexSegment:
    """One physical segment of a vector index, as the manifest and its files
    describe it.

    The first fields mirror pylance's :class:`lance.dataset.Index`; the
    statistics (``index_type`` onward) are read from the segment's
    ``index.idx`` and ``auxiliary.idx`` and are ``None`` when the files were
    not read. ``metadata`` holds the IndexMetadata protobuf exactly as
    committed, so nothing is lost when a segment travels through a plan.

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
    format_version : int
        Serialisation version of this class.
    stale_rows : int, optional
        Rows a merge of this segment would drop: deleted (deletion files)
        or of fragments the dataset no longer has. Estimated from the
        manifest (the segment's rows minus the live rows of the fragments
        it covers; low by the count of null vectors, which are not
        indexed).
    """

    uuid: str
    name: str
    fields: tuple[int, ...]
    dataset_version: int
    fragment_ids: tuple[int, ...]
    index_version: int
    created_at: Optional[datetime] = None
    base_id: Optional[int] = None
    files: tuple[IndexFile, ...] = ()
    index_details_type_url: str = ""
    index_details: bytes = field(default=b"", repr=False)
    metadata: bytes = field(default=b"", repr=False)
    index_type: Optional[str] = None
    distance_type: Optional[str] = None
    num_partitions: Optional[int] = None
    partition_rows: tuple[int, ...] = field(default=(), repr=False)
    num_rows: Optional[int] = None
    pq_transposed: Optional[bool] = None
    rq_packed: Optional[bool] = None
    num_bits: Optional[int] = None
    num_sub_vectors: Optional[int] = None
    dimension: Optional[int] = None
    file_version: Optional[str] = None
    index_file_bytes: Optional[int] = None
    auxiliary_file_bytes: Optional[int] = None
    hnsw_m: Optional[int] = None
    hnsw_ef_construction: Optional[int] = None
    hnsw_max_level: Optional[int] = None
    hnsw_levels: Optional[int] = None
    partition_graph_rows: tuple[int, ...] = field(default=(), repr=False)
    format_version: int = SEGMENT_FORMAT_VERSION
    stale_rows: Optional[int] = None

    def __post_init__(self) -> None:
        u = _uuid(self.uuid, "IndexSegment uuid")
        if _int(self.format_version, f"segment {u}: format_version") != SEGMENT_FORMAT_VERSION:
            raise InvalidInputError(
                f"IndexSegment format_version {self.format_version} is not supported "
                f"(this lance_segmerge reads version {SEGMENT_FORMAT_VERSION})"
            )
        what = f"segment {u}:"
        set_ = object.__setattr__  # frozen: normalise sequences to tuples
        _str(self.name, f"{what} name")
        set_(self, "fields", _ints(self.fields, f"{what} fields", f"{what} field id", -(2**31), _I32))
        _int(self.dataset_version, f"{what} dataset_version")
        frags = _ints(self.fragment_ids, f"{what} fragment_ids", f"{what} fragment id", 0, _U32)
        if any(a >= b for a, b in zip(frags, frags[1:])):
            raise InvalidInputError(f"segment {u}: fragment_ids must be sorted and unique")
        set_(self, "fragment_ids", frags)
        _int(self.index_version, f"{what} index_version", -(2**31), _I32)
        if self.created_at is not None and not isinstance(self.created_at, datetime):
            raise InvalidInputError(f"{what} created_at must be a datetime or None, got {_show(self.created_at)}")
        _opt_int(self.base_id, f"{what} base_id", 0, _U32)
        files = _seq(self.files, f"{what} files")
        if not all(isinstance(f, IndexFile) for f in files):
            raise InvalidInputError(f"{what} files must be IndexFile objects")
        set_(self, "files", files)
        _str(self.index_details_type_url, f"{what} index_details_type_url")
        for name in ("index_details", "metadata"):
            if not isinstance(getattr(self, name), bytes):
                raise InvalidInputError(f"{what} {name} must be bytes, got {_show(getattr(self, name))}")
        for name in ("index_type", "distance_type", "file_version"):
            _opt_str(getattr(self, name), f"{what} {name}")
        for name in ("num_partitions", "num_rows", "num_bits", "num_sub_vectors", "dimension",
                     "index_file_bytes", "auxiliary_file_bytes", "stale_rows",
                     "hnsw_m", "hnsw_ef_construction", "hnsw_max_level", "hnsw_levels"):
            _opt_int(getattr(self, name), f"{what} {name}")
        set_(self, "partition_graph_rows", _ints(self.partition_graph_rows, f"{what} partition_graph_rows", f"{what} partition_graph_rows", 0, _U32))
        set_(self, "partition_rows", _ints(self.partition_rows, f"{what} partition_rows", f"{what} partition_rows", 0, _U32))
        _opt_bool(self.pq_transposed, f"{what} pq_transposed")
        _opt_bool(self.rq_packed, f"{what} rq_packed")

    # -- serialisation -----------------------------------------------------

    @property
    def size_bytes(self) -> int:
        """Total size of the segment's files, in bytes."""
        return sum(f.size_bytes for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (bytes as base64)."""
        d = self._entry_dict()
        d["stats"] = None if self.index_type is None else {
            "index_type": self.index_type,
            "distance_type": self.distance_type,
            "num_partitions": self.num_partitions,
            "partition_rows": list(self.partition_rows),
            "num_rows": self.num_rows,
            "pq_transposed": self.pq_transposed,
            "rq_packed": self.rq_packed,
            "num_bits": self.num_bits,
            "num_sub_vectors": self.num_sub_vectors,
            "dimension": self.dimension,
            "file_version": self.file_version,
            "index_file_bytes": self.index_file_bytes,
            "auxiliary_file_bytes": self.auxiliary_file_bytes,
            "stale_rows": self.stale_rows,
            "hnsw_m": self.hnsw_m,
            "hnsw_ef_construction": self.hnsw_ef_construction,
            "hnsw_max_level": self.hnsw_max_level,
            "hnsw_levels": self.hnsw_levels,
            "partition_graph_rows": list(self.partition_graph_rows),
        }
        return d

    def _entry_dict(self) -> dict[str, Any]:
        """to_dict without the statistics: the manifest entry, all the kernel
        reads of a segment it is given (it opens the files for the rest).
        At 2048 partitions the statistics are most of a segment's JSON."""
        return {
            "format_version": self.format_version,
            "uuid": self.uuid,
            "name": self.name,
            "fields": list(self.fields),
            "dataset_version": self.dataset_version,
            "fragment_ids": list(self.fragment_ids),
            "index_version": self.index_version,
            "created_at_ms": _datetime_to_ms(self.created_at),
            "base_id": self.base_id,
            "files": [{"path": f.path, "size_bytes": f.size_bytes} for f in self.files],
            "index_details_type_url": self.index_details_type_url,
            "index_details": _b64(self.index_details),
            "metadata": _b64(self.metadata),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "IndexSegment":
        """Inverse of :meth:`to_dict`; also reads the kernel's JSON.

        Raises
        ------
        InvalidInputError
            ``d`` is not a segment: a missing or mistyped field, an
            out-of-range number, invalid base64.
        """
        if _KERNEL_JSON.get():
            return cls._trusted(d)
        d = _mapping(d, "an IndexSegment")
        u = _uuid(_field(d, "uuid", "an IndexSegment"), "IndexSegment uuid")
        what = f"segment {u}"
        stats = _mapping(d.get("stats") or {}, f"{what}: stats")
        files = []
        for f in _seq(d.get("files"), f"{what}: files"):
            f = _mapping(f, f"{what}: file")
            files.append(IndexFile(_field(f, "path", f"{what}: a file"), _field(f, "size_bytes", f"{what}: a file")))

        def ints(v: Any, key: str) -> tuple[Any, ...]:
            return _seq(v, f"{what}: {key}")

        return cls(
            uuid=u,
            name=_field(d, "name", what),
            fields=ints(d.get("fields"), "fields"),
            dataset_version=_field(d, "dataset_version", what),
            fragment_ids=ints(d.get("fragment_ids"), "fragment_ids"),
            index_version=d.get("index_version") or 0,
            created_at=_ms_to_datetime(d.get("created_at_ms")),
            base_id=d.get("base_id"),
            files=tuple(files),
            index_details_type_url=d.get("index_details_type_url") or "",
            index_details=_unb64(d.get("index_details"), f"{what}: index_details"),
            metadata=_unb64(d.get("metadata"), f"{what}: metadata"),
            index_type=stats.get("index_type"),
            distance_type=stats.get("distance_type"),
            num_partitions=stats.get("num_partitions"),
            partition_rows=ints(stats.get("partition_rows"), "partition_rows"),
            num_rows=stats.get("num_rows"),
            pq_transposed=stats.get("pq_transposed"),
            rq_packed=stats.get("rq_packed"),
            num_bits=stats.get("num_bits") or None,
            num_sub_vectors=stats.get("num_sub_vectors") or None,
            dimension=stats.get("dimension") or None,
            file_version=stats.get("file_version"),
            index_file_bytes=stats.get("index_file_bytes"),
            auxiliary_file_bytes=stats.get("auxiliary_file_bytes"),
            hnsw_m=stats.get("hnsw_m") or None,
            hnsw_ef_construction=stats.get("hnsw_ef_construction") or None,
            hnsw_max_level=stats.get("hnsw_max_level") or None,
            hnsw_levels=stats.get("hnsw_levels") or None,
            partition_graph_rows=ints(stats.get("partition_graph_rows"), "partition_graph_rows"),
            format_version=d.get("format_version", SEGMENT_FORMAT_VERSION),
            stale_rows=stats.get("stale_rows"),
        )

    @classmethod
    def _trusted(cls, d: Mapping[str, Any]) -> "IndexSegment":
        """from_dict for JSON the kernel wrote: the same fields, built
        without the checks of ``__post_init__`` (test_types checks that both
        give equal segments)."""
        stats = d.get("stats") or {}
        get = stats.get
        created = d.get("created_at_ms")
        values = {
            "uuid": d["uuid"],
            "name": d["name"],
            "fields": tuple(d.get("fields") or ()),
            "dataset_version": d["dataset_version"],
            "fragment_ids": tuple(d.get("fragment_ids") or ()),
            "index_version": d.get("index_version") or 0,
            "created_at": None if created is None else datetime.fromtimestamp(created / 1000.0, tz=timezone.utc),
            "base_id": d.get("base_id"),
            "files": tuple(IndexFile(f["path"], f["size_bytes"]) for f in d.get("files") or ()),
            "index_details_type_url": d.get("index_details_type_url") or "",
            "index_details": base64.b64decode(d.get("index_details") or b""),
            "metadata": base64.b64decode(d.get("metadata") or b""),
            "index_type": get("index_type"),
            "distance_type": get("distance_type"),
            "num_partitions": get("num_partitions"),
            "partition_rows": tuple(get("partition_rows") or ()),
            "num_rows": get("num_rows"),
            "pq_transposed": get("pq_transposed"),
            "rq_packed": get("rq_packed"),
            "num_bits": get("num_bits") or None,
            "num_sub_vectors": get("num_sub_vectors") or None,
            "dimension": get("dimension") or None,
            "file_version": get("file_version"),
            "index_file_bytes": get("index_file_bytes"),
            "auxiliary_file_bytes": get("auxiliary_file_bytes"),
            "hnsw_m": get("hnsw_m") or None,
            "hnsw_ef_construction": get("hnsw_ef_construction") or None,
            "hnsw_max_level": get("hnsw_max_level") or None,
            "hnsw_levels": get("hnsw_levels") or None,
            "partition_graph_rows": tuple(get("partition_graph_rows") or ()),
            "format_version": d.get("format_version", SEGMENT_FORMAT_VERSION),
            "stale_rows": get("stale_rows"),
        }
        seg = cls.__new__(cls)
        for k, v in values.items():
            object.__setattr__(seg, k, v)
        return seg

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
            ("fragments", f"{len(self.fragment_ids)}: {_compact(self.fragment_ids)}"),
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
        return kv_html(f"IndexSegment {self.uuid[:8]}", items)

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
        from . import _ffi
        from .api import as_dataset

        if dataset is not None:
            dataset = as_dataset(dataset)

        try:
            created = getattr(index, "created_at", None)
            details = getattr(index, "index_details", None)
            files = getattr(index, "files", None) or []
            plain = {
                "uuid": str(index.uuid),
                "name": index.name,
                "fields": [_int(x, "field id", -(2**31), _I32) for x in index.fields],
                "dataset_version": _int(index.dataset_version, "dataset_version"),
                "fragment_ids": sorted(_int(x, "fragment id", 0, _U32) for x in index.fragment_ids),
                "index_version": _int(index.index_version, "index_version", -(2**31), _I32),
                "created_at_ms": _datetime_to_ms(created),
                "base_id": getattr(index, "base_id", None),
                "files": [{"path": _str(f.path, "file path"), "size_bytes": _int(f.size_bytes, "file size")} for f in files],
                "index_details_type_url": details[0] if details else "",
                "index_details": _b64(bytes(details[1])) if details else "",
            }
            _uuid(plain["uuid"], "segment uuid")
            _str(plain["name"], "segment name")
            _str(plain["index_details_type_url"], "index details type url")
        except InvalidInputError:
            raise
        except (AttributeError, TypeError, ValueError, OverflowError, IndexError) as exc:
            raise InvalidInputError(f"not a lance.dataset.Index: {_show(index)} ({type(exc).__name__}: {exc})") from None
        uri = dataset.uri if dataset is not None else ""
        opts = _ffi.options_json(dataset.storage_options) if dataset is not None else ""
        out = _ffi.call_json("DescribeSegment", uri, opts, json.dumps(plain), dataset is not None)
        return cls.from_dict(out)


def _imbalance(parts: tuple[int, ...]) -> Optional[float]:
    total = sum(parts)
    if not parts or total == 0:
        return None
    return max(parts) * len(parts) / total


def _compact(ids: tuple[int, ...]) -> str:
    from ._display import compact_ids

    return compact_ids(ids)


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


@dataclass(frozen=True)
class OperationProgress:
    """A snapshot of a long operation's counters (merge, commit).

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

    stage: str = ""
    partitions_done: int = 0
    partitions_total: int = 0
    rows_read: int = 0
    rows_written: int = 0
    bytes_written: int = 0
    graph_rows_inserted: int = 0
    graph_rows_reused: int = 0
    graph_distances: int = 0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "OperationProgress":
        return cls(
            stage=str(d.get("stage", "")),
            partitions_done=int(d.get("partitions_done", 0)),
            partitions_total=int(d.get("partitions_total", 0)),
            rows_read=int(d.get("rows_read", 0)),
            rows_written=int(d.get("rows_written", 0)),
            bytes_written=int(d.get("bytes_written", 0)),
            graph_rows_inserted=int(d.get("graph_rows_inserted", 0)),
            graph_rows_reused=int(d.get("graph_rows_reused", 0)),
            graph_distances=int(d.get("graph_distances", 0)),
        )


#: Version of the MergePlan / MergeTask serialisation.
PLAN_FORMAT_VERSION = 1


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

    task_id: int
    segments: tuple[IndexSegment, ...]
    rows: int = 0
    bytes: int = 0
    format_version: int = PLAN_FORMAT_VERSION
    reason: str = ""

    def __post_init__(self) -> None:
        if _int(self.format_version, "MergeTask format_version") != PLAN_FORMAT_VERSION:
            raise InvalidInputError(f"MergeTask format_version {self.format_version} is not supported")
        _int(self.task_id, "task_id")
        segs = _seq(self.segments, f"task {self.task_id}: segments")
        if not all(isinstance(x, IndexSegment) for x in segs):
            raise InvalidInputError(f"task {self.task_id}: segments must be IndexSegment objects")
        object.__setattr__(self, "segments", segs)
        _str(self.reason, f"task {self.task_id}: reason")
        if len(self.segments) < 2 and not (len(self.segments) == 1 and self.reason.startswith("reclaim")):
            raise InvalidInputError(
                f"task {self.task_id}: a merge task needs at least two segments (one only to reclaim stale rows)"
            )
        _int(self.rows, f"task {self.task_id}: rows")
        _int(self.bytes, f"task {self.task_id}: bytes")

    @property
    def segment_ids(self) -> tuple[str, ...]:
        """UUIDs of the input segments."""
        return tuple(s.uuid for s in self.segments)

    def __repr__(self) -> str:
        return f"MergeTask(task_id={self.task_id}, segments={len(self.segments)}, rows={self.rows:,}, bytes={human_bytes(self.bytes)})"

    def _table_spec(self) -> TableSpec:
        return segments_table(self.segments, f"task {self.task_id}: {plural(len(self.segments), 'segment')}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "task_id": self.task_id,
            "segments": [s.to_dict() for s in self.segments],
            "rows": self.rows,
            "bytes": self.bytes,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MergeTask":
        """Inverse of :meth:`to_dict`; malformed input is an
        :class:`InvalidInputError`."""
        d = _mapping(d, "a MergeTask")
        tid = _int(_field(d, "task_id", "a MergeTask"), "task_id")
        return cls(
            task_id=tid,
            segments=tuple(IndexSegment.from_dict(s) for s in _seq(_field(d, "segments", f"task {tid}"), f"task {tid}: segments")),
            rows=d.get("rows") or 0,
            bytes=d.get("bytes") or 0,
            format_version=d.get("format_version", PLAN_FORMAT_VERSION),
            reason=d.get("reason") or "",
        )

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

    plan_id: str
    dataset_uri: str
    read_version: int
    index_name: str
    column: str
    index_type: str
    tasks: tuple[MergeTask, ...]
    untouched: tuple[str, ...] = ()
    requantize_sq: bool = False
    format_version: int = PLAN_FORMAT_VERSION
    policy: str = "all"
    summary: str = ""

    def __post_init__(self) -> None:
        if _int(self.format_version, "MergePlan format_version") != PLAN_FORMAT_VERSION:
            raise InvalidInputError(
                f"MergePlan format_version {self.format_version} is not supported "
                f"(this lance_segmerge reads version {PLAN_FORMAT_VERSION})"
            )
        _str(self.plan_id, "plan_id")
        # Plans carry no credentials (they travel, and print): a URI's
        # userinfo is masked; workers get the Dataset, with its options.
        object.__setattr__(self, "dataset_uri", redact_uri(_str(self.dataset_uri, "dataset_uri")))
        _int(self.read_version, "read_version")
        _str(self.index_name, "index_name")
        _str(self.column, "column")
        _str(self.index_type, "index_type")
        _bool(self.requantize_sq, "requantize_sq")
        _str(self.policy, "policy")
        _str(self.summary, "summary")
        tasks = _seq(self.tasks, "tasks")
        if not all(isinstance(t, MergeTask) for t in tasks):
            raise InvalidInputError("a plan's tasks must be MergeTask objects")
        object.__setattr__(self, "tasks", tasks)
        object.__setattr__(self, "untouched", tuple(_str(u, "untouched segment") for u in _seq(self.untouched, "untouched")))
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
        return {
            "format_version": self.format_version,
            "plan_id": self.plan_id,
            "dataset_uri": self.dataset_uri,
            "read_version": self.read_version,
            "index_name": self.index_name,
            "column": self.column,
            "index_type": self.index_type,
            "tasks": [t.to_dict() for t in self.tasks],
            "untouched": list(self.untouched),
            "requantize_sq": self.requantize_sq,
            "policy": self.policy,
            "summary": self.summary,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MergePlan":
        """Inverse of :meth:`to_dict`; malformed input is an
        :class:`InvalidInputError`."""
        d = _mapping(d, "a MergePlan")
        return cls(
            plan_id=_field(d, "plan_id", "a MergePlan"),
            dataset_uri=_field(d, "dataset_uri", "a MergePlan"),
            read_version=_field(d, "read_version", "a MergePlan"),
            index_name=_field(d, "index_name", "a MergePlan"),
            column=d.get("column") or "",
            index_type=d.get("index_type") or "",
            tasks=tuple(MergeTask.from_dict(t) for t in _seq(d.get("tasks"), "tasks")),
            untouched=_seq(d.get("untouched"), "untouched"),
            requantize_sq=d.get("requantize_sq", False),
            format_version=d.get("format_version", PLAN_FORMAT_VERSION),
            policy=d.get("policy") or "all",
            summary=d.get("summary") or "",
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, s: str) -> "MergePlan":
        """Inverse of :meth:`to_json`; malformed input is an
        :class:`InvalidInputError`."""
        return cls.from_dict(_loads(s, "MergePlan JSON"))
