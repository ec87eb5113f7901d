"""Plain, picklable value types: index segments and their statistics.

Everything here is a frozen dataclass of plain fields (str, int, bytes,
tuples), so it pickles across process and machine boundaries (Ray, Dask,
multiprocessing) and round-trips through JSON. None of it holds a handle to
the native kernel or to an open dataset.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Mapping, Optional, cast

from ._validate import (
    _U32,
    _I32,
    _MAX_MS,
    _bool,
    _field,
    _int,
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

    from .api import Dataset

__all__ = ["IndexFile", "IndexSegment", "MergePlan", "MergeTask", "OperationProgress", "SEGMENT_FORMAT_VERSION", "PLAN_FORMAT_VERSION"]

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
    format_version : int
        Serialisation version of this class.
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
    format_version: int = SEGMENT_FORMAT_VERSION

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
        set_(self, "fields", tuple(_int(x, f"{what} field id", -(2**31), _I32) for x in _seq(self.fields, f"{what} fields")))
        _int(self.dataset_version, f"{what} dataset_version")
        frags = tuple(_int(x, f"{what} fragment id", 0, _U32) for x in _seq(self.fragment_ids, f"{what} fragment_ids"))
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
                     "index_file_bytes", "auxiliary_file_bytes"):
            _opt_int(getattr(self, name), f"{what} {name}")
        set_(self, "partition_rows", tuple(_int(x, f"{what} partition_rows", 0, _U32) for x in _seq(self.partition_rows, f"{what} partition_rows")))
        _opt_bool(self.pq_transposed, f"{what} pq_transposed")
        _opt_bool(self.rq_packed, f"{what} rq_packed")

    # -- serialisation -----------------------------------------------------

    @property
    def size_bytes(self) -> int:
        """Total size of the segment's files, in bytes."""
        return sum(f.size_bytes for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (bytes as base64)."""
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
            "stats": None
            if self.index_type is None
            else {
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
            },
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
            format_version=d.get("format_version", SEGMENT_FORMAT_VERSION),
        )

    def to_json(self) -> str:
        """Serialise to a JSON string."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, s: str) -> "IndexSegment":
        """Inverse of :meth:`to_json`; malformed input is an
        :class:`InvalidInputError`."""
        return cls.from_dict(_loads(s, "IndexSegment JSON"))

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
        cls, index: "LanceIndex", dataset: Optional["Dataset"] = None
    ) -> "IndexSegment":
        """Build an IndexSegment from pylance's :class:`lance.dataset.Index`.

        Parameters
        ----------
        index : lance.dataset.Index
            A segment as pylance returns it (``create_index_uncommitted``,
            ``merge_existing_index_segments``, ``describe_indices``…).
        dataset : Dataset, optional
            When given, the statistics are read from the segment's files in
            this dataset.
        """
        from . import _ffi

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


@dataclass(frozen=True)
class OperationProgress:
    """A snapshot of a long operation's counters (merge, commit).

    Parameters
    ----------
    stage : str
        ``"validate"``, ``"merge"``, ``"write_index"``, ``"commit"`` or
        ``"done"``.
    partitions_done, partitions_total : int
        IVF partitions merged so far, and in all.
    rows_read, rows_written : int
        Input rows read, output rows written.
    bytes_written : int
        Bytes of output files written.
    """

    stage: str = ""
    partitions_done: int = 0
    partitions_total: int = 0
    rows_read: int = 0
    rows_written: int = 0
    bytes_written: int = 0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "OperationProgress":
        return cls(
            stage=str(d.get("stage", "")),
            partitions_done=int(d.get("partitions_done", 0)),
            partitions_total=int(d.get("partitions_total", 0)),
            rows_read=int(d.get("rows_read", 0)),
            rows_written=int(d.get("rows_written", 0)),
            bytes_written=int(d.get("bytes_written", 0)),
        )


#: Version of the MergePlan / MergeTask serialisation.
PLAN_FORMAT_VERSION = 1


@dataclass(frozen=True)
class MergeTask:
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
    """

    task_id: int
    segments: tuple[IndexSegment, ...]
    rows: int = 0
    bytes: int = 0
    format_version: int = PLAN_FORMAT_VERSION

    def __post_init__(self) -> None:
        if _int(self.format_version, "MergeTask format_version") != PLAN_FORMAT_VERSION:
            raise InvalidInputError(f"MergeTask format_version {self.format_version} is not supported")
        _int(self.task_id, "task_id")
        segs = _seq(self.segments, f"task {self.task_id}: segments")
        if not all(isinstance(x, IndexSegment) for x in segs):
            raise InvalidInputError(f"task {self.task_id}: segments must be IndexSegment objects")
        object.__setattr__(self, "segments", segs)
        if len(self.segments) < 2:
            raise InvalidInputError(f"task {self.task_id}: a merge task needs at least two segments")
        _int(self.rows, f"task {self.task_id}: rows")
        _int(self.bytes, f"task {self.task_id}: bytes")

    @property
    def segment_ids(self) -> tuple[str, ...]:
        """UUIDs of the input segments."""
        return tuple(s.uuid for s in self.segments)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "task_id": self.task_id,
            "segments": [s.to_dict() for s in self.segments],
            "rows": self.rows,
            "bytes": self.bytes,
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
class MergePlan:
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
        Workers merge IVF_SQ inputs with different bounds by re-quantizing.
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
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, s: str) -> "MergePlan":
        """Inverse of :meth:`to_json`; malformed input is an
        :class:`InvalidInputError`."""
        return cls.from_dict(_loads(s, "MergePlan JSON"))
