"""Plain, picklable value types: index segments and their statistics.

Everything here is a frozen dataclass of plain fields (str, int, bytes,
tuples), so it pickles across process and machine boundaries (Ray, Dask,
multiprocessing) and round-trips through JSON. None of it holds a handle to
the native kernel or to an open dataset.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Mapping, Optional, cast

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


def _ms_to_datetime(ms: Optional[int]) -> Optional[datetime]:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc)


def _datetime_to_ms(dt: Optional[datetime]) -> Optional[int]:
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(round(dt.timestamp() * 1000))


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _unb64(s: Optional[str]) -> bytes:
    return base64.b64decode(s) if s else b""


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

    def __post_init__(self) -> None:
        if not self.uuid:
            raise InvalidInputError("IndexSegment needs a uuid")
        if self.format_version != SEGMENT_FORMAT_VERSION:
            raise InvalidInputError(
                f"IndexSegment format_version {self.format_version} is not supported "
                f"(this lance_segmerge reads version {SEGMENT_FORMAT_VERSION})"
            )
        if list(self.fragment_ids) != sorted(set(self.fragment_ids)):
            raise InvalidInputError(
                f"segment {self.uuid}: fragment_ids must be sorted and unique"
            )

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
                "hnsw_m": self.hnsw_m,
                "hnsw_ef_construction": self.hnsw_ef_construction,
                "hnsw_max_level": self.hnsw_max_level,
                "hnsw_levels": self.hnsw_levels,
                "partition_graph_rows": list(self.partition_graph_rows),
            },
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "IndexSegment":
        """Inverse of :meth:`to_dict`; also reads the kernel's JSON."""
        stats = d.get("stats") or {}
        files = tuple(IndexFile(f["path"], int(f["size_bytes"])) for f in (d.get("files") or ()))

        def opt_int(key: str) -> Optional[int]:
            v = stats.get(key)
            return None if v is None else int(v)

        return cls(
            uuid=d["uuid"],
            name=d["name"],
            fields=tuple(int(x) for x in (d.get("fields") or ())),
            dataset_version=int(d["dataset_version"]),
            fragment_ids=tuple(int(x) for x in (d.get("fragment_ids") or ())),
            index_version=int(d.get("index_version") or 0),
            created_at=_ms_to_datetime(d.get("created_at_ms")),
            base_id=d.get("base_id"),
            files=files,
            index_details_type_url=d.get("index_details_type_url") or "",
            index_details=_unb64(d.get("index_details")),
            metadata=_unb64(d.get("metadata")),
            index_type=stats.get("index_type"),
            distance_type=stats.get("distance_type"),
            num_partitions=opt_int("num_partitions"),
            partition_rows=tuple(int(x) for x in (stats.get("partition_rows") or ())),
            num_rows=opt_int("num_rows"),
            pq_transposed=stats.get("pq_transposed"),
            rq_packed=stats.get("rq_packed"),
            num_bits=opt_int("num_bits") or None,
            num_sub_vectors=opt_int("num_sub_vectors") or None,
            dimension=opt_int("dimension") or None,
            file_version=stats.get("file_version"),
            index_file_bytes=opt_int("index_file_bytes"),
            auxiliary_file_bytes=opt_int("auxiliary_file_bytes"),
            hnsw_m=opt_int("hnsw_m") or None,
            hnsw_ef_construction=opt_int("hnsw_ef_construction") or None,
            hnsw_max_level=opt_int("hnsw_max_level") or None,
            hnsw_levels=opt_int("hnsw_levels") or None,
            partition_graph_rows=tuple(int(x) for x in (stats.get("partition_graph_rows") or ())),
            format_version=int(d.get("format_version", SEGMENT_FORMAT_VERSION)),
        )

    def to_json(self) -> str:
        """Serialise to a JSON string."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, s: str) -> "IndexSegment":
        """Inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(s))

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

        created = getattr(index, "created_at", None)
        details = getattr(index, "index_details", None)
        files = getattr(index, "files", None) or []
        plain = {
            "uuid": str(index.uuid),
            "name": index.name,
            "fields": [int(x) for x in index.fields],
            "dataset_version": int(index.dataset_version),
            "fragment_ids": sorted(int(x) for x in index.fragment_ids),
            "index_version": int(index.index_version),
            "created_at_ms": _datetime_to_ms(created),
            "base_id": getattr(index, "base_id", None),
            "files": [{"path": f.path, "size_bytes": int(f.size_bytes)} for f in files],
            "index_details_type_url": details[0] if details else "",
            "index_details": _b64(bytes(details[1])) if details else "",
        }
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
        if self.format_version != PLAN_FORMAT_VERSION:
            raise InvalidInputError(f"MergeTask format_version {self.format_version} is not supported")
        if len(self.segments) < 2:
            raise InvalidInputError(f"task {self.task_id}: a merge task needs at least two segments")

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
        return cls(
            task_id=int(d["task_id"]),
            segments=tuple(IndexSegment.from_dict(s) for s in d["segments"]),
            rows=int(d.get("rows") or 0),
            bytes=int(d.get("bytes") or 0),
            format_version=int(d.get("format_version", PLAN_FORMAT_VERSION)),
        )


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
        if self.format_version != PLAN_FORMAT_VERSION:
            raise InvalidInputError(
                f"MergePlan format_version {self.format_version} is not supported "
                f"(this lance_segmerge reads version {PLAN_FORMAT_VERSION})"
            )
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
        return cls(
            plan_id=str(d["plan_id"]),
            dataset_uri=str(d["dataset_uri"]),
            read_version=int(d["read_version"]),
            index_name=str(d["index_name"]),
            column=str(d.get("column") or ""),
            index_type=str(d.get("index_type") or ""),
            tasks=tuple(MergeTask.from_dict(t) for t in (d.get("tasks") or ())),
            untouched=tuple(d.get("untouched") or ()),
            requantize_sq=bool(d.get("requantize_sq", False)),
            format_version=int(d.get("format_version", PLAN_FORMAT_VERSION)),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, s: str) -> "MergePlan":
        return cls.from_dict(json.loads(s))
