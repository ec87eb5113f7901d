"""Every report the package returns: what an optimize, a verification, a
repair and a maintenance pass did, and the progress snapshots of a run.

Each is a frozen dataclass of plain fields declared once with its check
and its JSON form (:mod:`lance_segmerge._fields`): reports pickle,
round-trip through JSON (``to_json`` / ``from_json``), and render as
tables (``to_arrow()``, ``to_pandas()``, HTML in notebooks, text), empty
ones included.

The public paths these classes had before keep working:
``lance_segmerge.tree.OptimizeReport``, ``lance_segmerge.verify.VerifyReport``,
``lance_segmerge.maintain.MaintainReport`` and so on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Optional

from . import _fields
from ._display import Column, TableSpec, Tabular, human_bytes, plural
from ._fields import Codec, spec
from ._validate import (
    _loads,
    _mapping,
    _str,
    bool_field,
    float_field,
    int_field,
    ints_field,
    opt_float_field,
    required,
    seq_field,
    str_field,
    strs_field,
    tuple_of,
)
from .errors import InvalidInputError
from .types import IndexSegment, MergePlan, SegmentList

__all__ = [
    "OptimizeProgress",
    "TreeTask",
    "MergeTree",
    "OptimizeReport",
    "VerifyCheck",
    "SegmentVerdict",
    "VerifyReport",
    "RepairAction",
    "RepairReport",
    "MaintainReport",
    "SegmentHealth",
    "HealthReport",
    "REPORT_FORMAT_VERSION",
    "VERIFY_FORMAT_VERSION",
]

#: Version of the MergeTree / OptimizeReport serialisation.
REPORT_FORMAT_VERSION = 1
#: Version of the VerifyReport serialisation.
VERIFY_FORMAT_VERSION = 1


def _version_check(expected: int, what_type: str) -> Any:
    def check(value: Any, what: str) -> int:
        if value != expected or isinstance(value, bool):
            raise InvalidInputError(f"{what_type} format_version {value} is not supported")
        return int(value)

    return check


def _or(default: Any) -> Any:
    return lambda v, what: default if v is None else v


def _tuple(v: Any) -> tuple[Any, ...]:
    return tuple(v or ())


_INT = int_field()
_SECONDS = float_field


class _Report(Tabular):
    """JSON of a report: to_dict / from_dict / to_json / from_json from the
    field table."""

    _what: ClassVar[str] = "a report"

    def to_dict(self) -> dict[str, Any]:
        return _fields.to_dict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Any:
        """Inverse of :meth:`to_dict`; malformed input is an
        :class:`InvalidInputError`."""
        return _fields.from_dict(cls, d, cls._what)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, s: str) -> Any:
        return cls.from_dict(_loads(s, f"{cls.__name__} JSON"))


# -- optimize -------------------------------------------------------------------------


@dataclass(frozen=True)
class OptimizeProgress:
    """Progress of a run (:func:`lance_segmerge.optimize`,
    :func:`lance_segmerge.create_index`...), reported on the driver.

    Parameters
    ----------
    level : int
        Tree level being merged (1 = the planned segments; 0 = the build
        tasks of ``create_index``).
    tasks_done, tasks_total : int
        Tasks finished and planned at this level.
    segments : int
        Segments this level reduces.
    """

    level: int = spec(_INT)
    tasks_done: int = spec(_INT)
    tasks_total: int = spec(_INT)
    segments: int = spec(_INT)


@dataclass(frozen=True)
class TreeTask:
    """One merge of a tree.

    Parameters
    ----------
    level : int
        Tree level (1 merges planned segments; level ``n`` merges outputs
        of earlier levels, and large segments that skipped levels).
    task_id : int
        Position of the task in its level.
    inputs : tuple of str
        UUIDs of the merged segments (planned segments or earlier outputs).
    output : str
        UUID of the merged segment (predicted trees name outputs with
        stable placeholder UUIDs).
    rows, bytes : int
        Rows and bytes of the output (predicted: the inputs' sums).
    seconds : float, optional
        Executed trees: when the task finished, in seconds after its level
        started (driver clock).
    """

    level: int = spec(_INT)
    task_id: int = spec(_INT)
    inputs: tuple[str, ...] = spec(strs_field, encode=list, decode=seq_field, kernel=_tuple)
    output: str = spec(str_field)
    rows: int = spec(_INT)
    bytes: int = spec(_INT)
    seconds: Optional[float] = spec(opt_float_field, default=None)

    def __post_init__(self) -> None:
        _fields.check_fields(self, "tree task")


def _records(cls: type) -> Codec:
    """The JSON form of a tuple of records of ``cls``."""
    return Codec(
        lambda rs: [_fields.to_dict(r) for r in rs],
        lambda v, what: tuple(_fields.from_dict(cls, r, what) for r in seq_field(v, what)),
        lambda v: tuple(_fields.from_kernel(cls, r) for r in v or ()),
    )


@dataclass(frozen=True)
class MergeTree(_Report):
    """The tree of merges an optimize runs: level by level, each task
    merging planned segments or earlier outputs, until at most
    ``target_segments`` are left.

    Parameters
    ----------
    index_name : str
    read_version : int
        Version the plan was made at.
    fan_in, target_segments : int
        The tree's shape parameters.
    sources : tuple of str
        The planned segments, in plan order.
    source_rows, source_bytes : tuple of int
        Their rows and bytes.
    tasks : tuple of TreeTask
        Every merge, level by level.
    outputs : tuple of str
        What the commit puts in place of the sources.
    estimated : bool
        True for a tree predicted from sizes (:func:`merge_tree`), False
        for the tree an optimize ran.
    level_seconds : tuple of float
        Executed trees: the wall time of each level.
    """

    _what = "a MergeTree"

    index_name: str = spec(str_field, decode=required("index_name"))
    read_version: int = spec(_INT, decode=required("read_version"))
    fan_in: int = spec(_INT, decode=required("fan_in"))
    target_segments: int = spec(_INT, decode=required("target_segments"))
    sources: tuple[str, ...] = spec(strs_field, encode=list, decode=seq_field, kernel=_tuple)
    source_rows: tuple[int, ...] = spec(ints_field(), encode=list, decode=seq_field, kernel=_tuple)
    source_bytes: tuple[int, ...] = spec(ints_field(), encode=list, decode=seq_field, kernel=_tuple)
    tasks: tuple[TreeTask, ...] = spec(tuple_of(TreeTask, "TreeTask records"), codec=_records(TreeTask))
    outputs: tuple[str, ...] = spec(strs_field, encode=list, decode=seq_field, kernel=_tuple)
    estimated: bool = spec(bool_field, default=True, missing=True)
    level_seconds: tuple[float, ...] = spec(
        lambda v, w: tuple(float_field(x, w) for x in seq_field(v, w)), default=(), encode=list,
        decode=seq_field, kernel=_tuple,
    )
    format_version: int = spec(
        _version_check(REPORT_FORMAT_VERSION, "MergeTree"), default=REPORT_FORMAT_VERSION, missing=REPORT_FORMAT_VERSION
    )

    def __post_init__(self) -> None:
        _fields.check_fields(self, "MergeTree")
        if not (len(self.sources) == len(self.source_rows) == len(self.source_bytes)):
            raise InvalidInputError("MergeTree: sources, source_rows and source_bytes differ in length")

    @property
    def num_levels(self) -> int:
        """Levels of merges (0 when there is nothing to merge)."""
        return max((t.level for t in self.tasks), default=0)

    def level_tasks(self, level: int) -> tuple[TreeTask, ...]:
        """The tasks of one level."""
        return tuple(t for t in self.tasks if t.level == level)

    def levels(self) -> list[dict[str, int]]:
        """Per level: its tasks, the segments it merges, the segments
        waiting for a later level, and the segments left after it."""
        out = []
        alive = len(self.sources)
        for lv in range(1, self.num_levels + 1):
            tasks = self.level_tasks(lv)
            merged = sum(len(t.inputs) for t in tasks)
            after = alive - merged + len(tasks)
            out.append({"level": lv, "tasks": len(tasks), "segments_in": merged, "waiting": alive - merged, "segments_out": after})
            alive = after
        return out

    def _shape(self) -> str:
        return " -> ".join([str(len(self.sources))] + [str(lv["segments_out"]) for lv in self.levels()])

    def __repr__(self) -> str:
        kind = "estimated" if self.estimated else "executed"
        return (
            f"MergeTree(index={self.index_name!r}, version={self.read_version}, fan_in={self.fan_in}, "
            f"levels={self.num_levels}, tasks={len(self.tasks)}, segments={self._shape()}, {kind})"
        )

    def _table_spec(self) -> TableSpec:
        executed = not self.estimated
        columns = (
            Column("level", "int"),
            Column("task_id", "int", label="task"),
            Column("segments", "int", label="inputs", total=True),
            Column("rows", "int", label="rows out", total=True),
            Column("bytes", "bytes", label="size out", total=True),
            Column("output", "uuid"),
            Column("seconds", "seconds", label="done after", show=executed),
            Column("inputs", "list", label="input segments"),
        )
        rows = tuple((t.level, t.task_id, len(t.inputs), t.rows, t.bytes, t.output, t.seconds, t.inputs) for t in self.tasks)
        summary = (
            ("segments", self._shape()),
            ("levels", str(self.num_levels)),
            ("fan_in", str(self.fan_in)),
            ("target_segments", str(self.target_segments)),
            ("", "executed" if executed else "estimated from segment sizes"),
        )
        title = f"merge tree of {self.index_name} at version {self.read_version}: {plural(len(self.tasks), 'task')} in {plural(self.num_levels, 'level')}"
        return TableSpec(title, columns, rows, summary, "task")


def _one(cls: Any, noun: str) -> Any:
    def check(value: Any, what: str) -> Any:
        if not isinstance(value, cls):
            raise InvalidInputError(f"{what} must be {noun}")
        return value

    return check


@dataclass(frozen=True)
class OptimizeReport(_Report):
    """What an optimize did: from how many segments to how many, the tree
    it ran (one table row per task), sizes and times.

    :func:`lance_segmerge.optimize_with_report` returns one;
    ``optimize(..., on_report=callback)`` hands one to a callback whatever
    optimize returns.

    Parameters
    ----------
    dataset_uri, index_name : str
    read_version : int
        Version the plan was made at.
    version : int
        The version committed (``read_version`` when nothing was merged).
    executor : str
        Where the merges ran.
    segments_before, segments_after : int
        Segments of the index before and after (untouched ones included).
    rows : int
        Rows of the merged (planned) segments.
    bytes_before, bytes_after : int
        Bytes of the planned segments, and of what replaced them.
    seconds : float
        Wall time of the merges and the commit.
    commit_seconds : float
        Of which the commit.
    tree : MergeTree
        The tree as executed.
    plan : MergePlan
        The plan it ran.
    outputs : tuple of IndexSegment
        The committed segments that replaced the planned ones.
    """

    _what = "an OptimizeReport"

    dataset_uri: str = spec(str_field, decode=required("dataset_uri"))
    index_name: str = spec(str_field, decode=required("index_name"))
    read_version: int = spec(_INT, decode=required("read_version"))
    version: int = spec(_INT, decode=required("version"))
    executor: str = spec(str_field, decode=_or(""))
    segments_before: int = spec(_INT, decode=required("segments_before"))
    segments_after: int = spec(_INT, decode=required("segments_after"))
    rows: int = spec(_INT, decode=required("rows"))
    bytes_before: int = spec(_INT, decode=required("bytes_before"))
    bytes_after: int = spec(_INT, decode=required("bytes_after"))
    seconds: float = spec(_SECONDS, decode=required("seconds"))
    commit_seconds: float = spec(_SECONDS, missing=0.0)
    tree: MergeTree = spec(
        _one(MergeTree, "a MergeTree"), encode=lambda t: t.to_dict(),
        decode=lambda v, w: MergeTree.from_dict(required("tree")(v, w)), kernel=lambda v: MergeTree.from_dict(v),
    )
    plan: MergePlan = spec(
        _one(MergePlan, "a MergePlan"), encode=lambda p: p.to_dict(),
        decode=lambda v, w: MergePlan.from_dict(required("plan")(v, w)), kernel=lambda v: MergePlan.from_dict(v),
    )
    outputs: tuple[IndexSegment, ...] = spec(
        tuple_of(IndexSegment, "IndexSegment objects"), default=(), encode=lambda ss: [s.to_dict() for s in ss],
        decode=lambda v, w: tuple(IndexSegment.from_dict(s) for s in seq_field(v, w)),
        kernel=lambda v: tuple(IndexSegment._from_kernel(s) for s in v or ()),
    )
    format_version: int = spec(
        _version_check(REPORT_FORMAT_VERSION, "OptimizeReport"), default=REPORT_FORMAT_VERSION,
        missing=REPORT_FORMAT_VERSION,
    )

    def __post_init__(self) -> None:
        _fields.check_fields(self, "OptimizeReport")

    def before(self) -> SegmentList:
        """The planned segments (what the commit replaced)."""
        return self.plan.segments()

    def after(self) -> SegmentList:
        """The segments that replaced them."""
        return SegmentList(self.outputs)

    def __repr__(self) -> str:
        return (
            f"OptimizeReport(index={self.index_name!r}, version={self.read_version} -> {self.version}, "
            f"segments={self.segments_before} -> {self.segments_after}, levels={self.tree.num_levels}, "
            f"tasks={len(self.tree.tasks)}, rows={self.rows:,}, seconds={self.seconds:.2f})"
        )

    def _table_spec(self) -> TableSpec:
        tree = self.tree._table_spec()
        summary = (
            ("segments", f"{self.segments_before:,} -> {self.segments_after:,}"),
            ("version", f"{self.read_version} -> {self.version}"),
            ("rows", f"{self.rows:,}"),
            ("size", f"{human_bytes(self.bytes_before)} -> {human_bytes(self.bytes_after)}"),
            ("levels", f"{self.tree.num_levels} (fan_in {self.tree.fan_in})"),
            ("executor", self.executor),
            ("time", f"{self.seconds:.2f}s (commit {self.commit_seconds:.2f}s)"),
        )
        title = f"optimize of {self.index_name} in {self.dataset_uri}"
        return TableSpec(title, tree.columns, tree.rows, summary, "task")


# -- verify and repair ------------------------------------------------------------------


def _unmeasured(v: Any, what: str) -> Optional[float]:
    """A report number: -1 (the kernel's "not measured") becomes None."""
    if v is None:
        return None
    n = float_field(v, what)
    return None if n < 0 else n


def _measured(v: Optional[float]) -> float:
    return -1 if v is None else v


_NUMBER = Codec(_measured, _unmeasured, lambda v: None if v is None or v < 0 else float(v))


def _numbers(v: Any, what: str) -> dict[str, float]:
    nums = _mapping(v, what)
    return {_str(k, f"{what} name"): float_field(x, f"{what} {k}") for k, x in nums.items()}


@dataclass(frozen=True)
class VerifyCheck:
    """One check of one segment.

    Parameters
    ----------
    name : str
        ``files``, ``structure``, ``row_ids``, ``model``, ``partitions``,
        ``layout``, ``codes`` or ``recall``.
    verdict : str
        ``ok``, ``failed``, ``warning`` or ``skipped``.
    message : str
        What was found, with its numbers.
    damage : str
        For a failed check, the name of the damage (for example
        ``pq_transposed_twice``, ``rq_packed_twice``, ``layout_flag_lies``,
        ``codes_mismatch``, ``wrong_partition``, ``truncated_file``,
        ``foreign_row_ids``); ``""`` otherwise.
    numbers : dict of str to float
        The check's measurements (sampled rows, match fractions, recall).
    """

    name: str = spec(str_field, decode=required("name"))
    verdict: str = spec(str_field, decode=required("verdict"))
    message: str = spec(str_field, default="", decode=_or(""))
    damage: str = spec(str_field, default="", decode=_or(""))
    numbers: Mapping[str, float] = spec(
        _numbers, default_factory=dict, encode=dict, decode=lambda v, w: _numbers(v or {}, w), missing={}
    )

    def __post_init__(self) -> None:
        _fields.check_fields(self, "check")

    def to_dict(self) -> dict[str, Any]:
        return _fields.to_dict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "VerifyCheck":
        return _fields.from_dict(cls, d, "check")


@dataclass(frozen=True)
class SegmentVerdict:
    """The verification of one segment: a table row of :class:`VerifyReport`.

    Parameters
    ----------
    uuid, index_type : str
    num_rows : int
    fragment_ids : tuple of int
    verdict : str
        ``clean``, ``damaged``, or ``unverified`` (a check could not run,
        for example the codes of an ``IVF_HNSW_*`` segment, and none
        failed).
    damage : tuple of str
        The damage found (see :class:`VerifyCheck`).
    rescuable : bool
        Every damage found is an invertible layout error:
        :func:`repair_index` rewrites the segment.
    layout_depth : int
        How many times the code layout was found applied to the stored
        codes (2 for the chained-merge damage); -1 when not established.
    recall, fresh_recall : float, optional
        The recall check's estimate of recall@k over the segment alone, and
        what the same model reaches encoding the same rows afresh.
    codes_mismatch : float, optional
        Share of sampled rows whose codes disagree with their data under
        the layout the metadata declares.
    advice : str
        What to do about a damaged segment.
    checks : tuple of VerifyCheck
    """

    uuid: str = spec(str_field, decode=required("uuid"))
    index_type: str = spec(str_field, decode=_or(""))
    num_rows: int = spec(_INT, decode=_or(0))
    fragment_ids: tuple[int, ...] = spec(ints_field(0, 2**32 - 1), encode=list, decode=seq_field, kernel=_tuple)
    verdict: str = spec(str_field, decode=required("verdict"))
    damage: tuple[str, ...] = spec(strs_field, default=(), encode=list, decode=seq_field, kernel=_tuple)
    rescuable: bool = spec(bool_field, default=False, missing=False)
    layout_depth: int = spec(int_field(-1, 64), default=-1, missing=-1)
    recall: Optional[float] = spec(opt_float_field, default=None, codec=_NUMBER)
    fresh_recall: Optional[float] = spec(opt_float_field, default=None, codec=_NUMBER)
    codes_mismatch: Optional[float] = spec(opt_float_field, default=None, codec=_NUMBER)
    advice: str = spec(str_field, default="", decode=_or(""))
    checks: tuple[VerifyCheck, ...] = spec(tuple_of(VerifyCheck, "VerifyCheck records"), default=(), codec=_records(VerifyCheck))

    def __post_init__(self) -> None:
        _fields.check_fields(self, f"segment {self.uuid}:")

    @property
    def clean(self) -> bool:
        return self.verdict == "clean"

    def check(self, name: str) -> Optional[VerifyCheck]:
        """The check called ``name``, if it ran."""
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return _fields.to_dict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SegmentVerdict":
        return _fields.from_dict(cls, d, "segment verdict")


@dataclass(frozen=True)
class VerifyReport(_Report):
    """What :func:`verify_index` found: one :class:`SegmentVerdict` per
    segment (a table row each: ``to_pandas()``, ``to_arrow()``, HTML in a
    notebook), frozen, picklable, and JSON (``to_json`` / ``from_json``).

    Parameters
    ----------
    dataset_uri, index_name, column : str
    version : int
        The dataset version verified.
    index_type, metric : str
    deep : bool
    sample_rows, queries, k, nprobes : int
        The checks' parameters.
    clean : bool
        No segment is damaged.
    seconds : float
        Wall time.
    segments : tuple of SegmentVerdict
    """

    _row_name = "segment"
    _what = "verify report"

    dataset_uri: str = spec(str_field, decode=_or(""))
    index_name: str = spec(str_field, decode=required("index_name"))
    column: str = spec(str_field, decode=_or(""))
    version: int = spec(_INT, decode=required("version"))
    index_type: str = spec(str_field, decode=_or(""))
    metric: str = spec(str_field, decode=_or(""))
    deep: bool = spec(bool_field, missing=False)
    sample_rows: int = spec(_INT, decode=_or(0))
    queries: int = spec(_INT, decode=_or(0))
    k: int = spec(_INT, decode=_or(0))
    nprobes: int = spec(_INT, decode=_or(0))
    clean: bool = spec(bool_field, missing=False)
    seconds: float = spec(_SECONDS, missing=0.0)
    segments: tuple[SegmentVerdict, ...] = spec(
        tuple_of(SegmentVerdict, "SegmentVerdict records"), default=(), codec=_records(SegmentVerdict)
    )
    format_version: int = spec(
        _version_check(VERIFY_FORMAT_VERSION, "VerifyReport"), default=VERIFY_FORMAT_VERSION,
        missing=VERIFY_FORMAT_VERSION,
    )

    def __post_init__(self) -> None:
        _fields.check_fields(self, "verify report")

    @property
    def damaged(self) -> tuple[SegmentVerdict, ...]:
        """The damaged segments."""
        return tuple(s for s in self.segments if s.verdict == "damaged")

    @property
    def rescuable(self) -> tuple[SegmentVerdict, ...]:
        """The damaged segments :func:`repair_index` rewrites."""
        return tuple(s for s in self.damaged if s.rescuable)

    def segment(self, uuid: str) -> SegmentVerdict:
        """The verdict of one segment."""
        for s in self.segments:
            if s.uuid == uuid:
                return s
        raise KeyError(uuid)

    def __repr__(self) -> str:
        return (f"VerifyReport({self.index_name!r} at version {self.version}: {len(self.segments)} segments, "
                f"{len(self.damaged)} damaged, {len(self.rescuable)} rescuable)")


@dataclass(frozen=True)
class RepairAction:
    """What :func:`repair_index` did (or, in a dry run, would do) about one
    damaged segment: a table row of :class:`RepairReport`.

    Parameters
    ----------
    uuid : str
        The damaged segment.
    action : str
        ``rewrite`` (an invertible layout error: rewritten with the layout
        applied once), or ``rebuild`` (cannot be rescued: rebuild it).
    damage : tuple of str
    layout_depth : int
        How many times the layout was found applied (-1: not a layout
        error).
    new_uuid : str
        The rewritten segment (``""`` in a dry run or for ``rebuild``).
    verdict_after : str
        The rewrite's own verification (``clean``), or ``""``.
    advice : str
    """

    uuid: str = spec(str_field)
    action: str = spec(str_field)
    damage: tuple[str, ...] = spec(strs_field, encode=list, decode=seq_field, kernel=_tuple)
    layout_depth: int = spec(int_field(-1, 64))
    new_uuid: str = spec(str_field, default="", decode=_or(""))
    verdict_after: str = spec(str_field, default="", decode=_or(""))
    advice: str = spec(str_field, default="", decode=_or(""))

    def __post_init__(self) -> None:
        _fields.check_fields(self, "repair action")


def _opt_report(v: Any, what: str) -> Optional[VerifyReport]:
    return None if v is None else VerifyReport.from_dict(v)


@dataclass(frozen=True)
class RepairReport(_Report):
    """What :func:`repair_index` did. ``actions`` holds one row per damaged
    segment; ``report`` is the verification it acted on.

    Parameters
    ----------
    dataset_uri, index_name : str
    read_version : int
        The version verified.
    version : int
        The committed version (``read_version`` for a dry run or when
        nothing was rewritten).
    dry_run, committed : bool
    rewritten, to_rebuild : int
        Segments rewritten (or, dry, to rewrite) and segments that need a
        rebuild.
    seconds : float
    actions : tuple of RepairAction
    report : VerifyReport
    """

    _row_name = "segment"
    _what = "repair report"

    dataset_uri: str = spec(str_field)
    index_name: str = spec(str_field)
    read_version: int = spec(_INT)
    version: int = spec(_INT)
    dry_run: bool = spec(bool_field)
    committed: bool = spec(bool_field)
    rewritten: int = spec(_INT)
    to_rebuild: int = spec(_INT)
    seconds: float = spec(_SECONDS)
    actions: tuple[RepairAction, ...] = spec(tuple_of(RepairAction, "RepairAction records"), default=(), codec=_records(RepairAction))
    report: Optional[VerifyReport] = spec(
        lambda v, w: v if v is None or isinstance(v, VerifyReport) else _one(VerifyReport, "a VerifyReport")(v, w),
        default=None, encode=lambda r: None if r is None else r.to_dict(), decode=_opt_report,
        kernel=lambda v: None if v is None else VerifyReport.from_dict(v),
    )

    def __post_init__(self) -> None:
        _fields.check_fields(self, "repair report")

    def __repr__(self) -> str:
        what = "would rewrite" if self.dry_run else "rewrote"
        return (f"RepairReport({self.index_name!r}: {what} {self.rewritten} segments, {self.to_rebuild} to rebuild, "
                f"version {self.version})")


# -- maintain --------------------------------------------------------------------------


@dataclass(frozen=True)
class MaintainReport(_Report):
    """What one :func:`maintain` pass did: a table with one row per merge
    task of the pass (its reason), and the pass's totals.

    Parameters
    ----------
    dataset_uri, index_name : str
        What was maintained.
    read_version : int
        The version the pass planned at.
    version : int
        The version after the pass: the new one when it committed, else
        ``read_version``.
    committed : bool
        Whether the pass committed a new version.
    policy : str
        The merge policy.
    segments_before, segments_after : int
        Segments of the index at ``read_version`` and at ``version``.
    tasks, tasks_reused : int
        Merge tasks of the pass, every level of its tree; of those, the
        ones whose outputs were reused from a run journal (an earlier,
        interrupted pass).
    segments_merged : int
        Segments the plan replaced.
    rows_read, bytes_read : int
        Rows and bytes of the inputs of the merges that ran.
    rows_written, bytes_written : int
        Rows and bytes of the outputs written by this pass.
    seconds : float
        Wall time of the pass, planning and commit included.
    executor : str
        Where the merges ran (``"auto"`` resolved).
    conflicts : int
        Commits that lost to a concurrent writer and were re-planned.
    reasons : tuple of str
        Why each planned task was chosen; ``summary`` the policy's decision.
    summary : str
    health_verdict : str
        With ``retrain="auto"``: the verdict of :func:`health` before the
        pass (``""`` when not measured), and its ``health_reasons``.
    reindexed : bool
        Whether the pass rebuilt the index (:func:`reindex`) before merging;
        ``reindex_version`` the version that left, ``reindex_seconds`` its
        time.
    partitions_added : int
        With ``retrain="auto"``: centroids the pass added to the model where
        new rows went (0 when the model still fitted them; see
        :func:`maintain`), and ``residual_ratio``, the new rows' mean squared
        distance to their centroid over the indexed rows' (0.0 when not
        measured).
    indexed_rows : int
        With ``index_new=True``: rows of fragments no segment covered that
        the pass indexed (one delta segment, committed before the merges).
    """

    _what = "a MaintainReport"

    dataset_uri: str = spec(str_field)
    index_name: str = spec(str_field)
    read_version: int = spec(_INT)
    version: int = spec(_INT)
    committed: bool = spec(bool_field)
    policy: str = spec(str_field)
    segments_before: int = spec(_INT)
    segments_after: int = spec(_INT)
    tasks: int = spec(_INT)
    tasks_reused: int = spec(_INT)
    segments_merged: int = spec(_INT)
    rows_read: int = spec(_INT)
    bytes_read: int = spec(_INT)
    rows_written: int = spec(_INT)
    bytes_written: int = spec(_INT)
    seconds: float = spec(_SECONDS)
    executor: str = spec(str_field)
    conflicts: int = spec(_INT)
    reasons: tuple[str, ...] = spec(strs_field, default=(), encode=list, decode=seq_field, kernel=_tuple)
    summary: str = spec(str_field, default="", decode=_or(""))
    health_verdict: str = spec(str_field, default="", decode=_or(""))
    health_reasons: tuple[str, ...] = spec(strs_field, default=(), encode=list, decode=seq_field, kernel=_tuple)
    reindexed: bool = spec(bool_field, default=False, decode=_or(False))
    reindex_version: int = spec(_INT, default=0, decode=_or(0))
    reindex_seconds: float = spec(_SECONDS, default=0.0, decode=_or(0.0))
    partitions_added: int = spec(_INT, default=0, decode=_or(0))
    residual_ratio: float = spec(float_field, default=0.0, decode=_or(0.0))
    indexed_rows: int = spec(_INT, default=0, decode=_or(0))

    def __post_init__(self) -> None:
        _fields.check_fields(self, "MaintainReport")

    def _table_spec(self) -> TableSpec:
        what = f"version {self.read_version} -> {self.version}" if self.committed else f"version {self.version}, nothing merged"
        summary = (
            ("segments", f"{self.segments_before:,} -> {self.segments_after:,}"),
            ("version", what),
            ("policy", self.policy),
            ("written", f"{self.rows_written:,} rows, {human_bytes(self.bytes_written)}"),
            ("read", f"{self.rows_read:,} rows, {human_bytes(self.bytes_read)}"),
            ("tasks", f"{self.tasks} ({self.tasks_reused} reused from a journal)"),
            ("executor", self.executor),
            ("conflicts", str(self.conflicts)),
            ("new rows indexed", f"{self.indexed_rows:,}"),
            ("health", (self.health_verdict + (": " + "; ".join(self.health_reasons) if self.health_reasons else ""))
             if self.health_verdict else "not measured"),
            ("reindexed", f"version {self.reindex_version} in {self.reindex_seconds:.2f}s" if self.reindexed else "no"),
            ("model", (f"new rows' residual {self.residual_ratio:.2f}x the indexed rows'"
                       + (f"; {self.partitions_added} centroids added where they went" if self.partitions_added else ""))
             if self.residual_ratio else "not measured"),
            ("time", f"{self.seconds:.2f}s"),
            ("", self.summary),
        )
        columns = (Column("task", "int"), Column("reason", "text"))
        rows = tuple((i, r) for i, r in enumerate(self.reasons))
        return TableSpec(f"maintain pass of {self.index_name} in {self.dataset_uri}", columns, rows, summary, "task")


# -- health ----------------------------------------------------------------------------

_MEASURE = float_field  # -1 where a number could not be measured


@dataclass(frozen=True)
class SegmentHealth:
    """One segment's partition statistics: a table row of
    :class:`HealthReport`.

    Parameters
    ----------
    uuid : str
    dataset_version : int
        The version the segment was built at.
    num_rows, num_partitions : int
    partition_cv : float
        Coefficient of variation of the partition sizes (0: all equal).
    partition_max_over_mean : float
        Largest partition over the mean.
    """

    uuid: str = spec(str_field)
    dataset_version: int = spec(_INT)
    num_rows: int = spec(_INT)
    num_partitions: int = spec(_INT)
    partition_cv: float = spec(_MEASURE)
    partition_max_over_mean: float = spec(_MEASURE)

    def __post_init__(self) -> None:
        _fields.check_fields(self, "segment health")


def _thresholds(v: Any, what: str) -> tuple[tuple[str, float], ...]:
    if isinstance(v, Mapping):
        v = sorted(v.items())
    out = tuple((str(k), float(x)) for k, x in seq_field(v, what))
    return out


@dataclass(frozen=True)
class HealthReport(_Report):
    """How well an index's model (trained once) fits today's data:
    :func:`lance_segmerge.health`. One table row per segment (its
    partition skew); the index's measures and the verdict in the summary.

    Parameters
    ----------
    dataset_uri, index_name, index_type, metric, column : str
    version : int
        The version measured.
    training_version : int
        The version the model was trained at (the oldest segment's).
    num_rows, rows_since_training, unindexed_rows : int
        Live rows; of those, rows in fragments added after training; rows
        no segment covers.
    share_since_training : float
    num_partitions : int
    partition_cv, partition_max_over_mean : float
        Partition sizes over every segment (coefficient of variation,
        largest over mean).
    residual_trained, residual_recent, residual_ratio : float
        Mean distance to the nearest centroid of training-era rows and of
        recent rows (a sample of each), and recent over trained.
    recall_trained, recall_recent, recall_drop : float
        Estimated recall@k at ``nprobes`` of queries drawn from training-era
        rows and from recent rows (Go search against brute force over a
        sample of ``sample_rows``), and the first minus the second. A sample
        is sparser than the table, so both read lower than a real query
        gets; their difference is the drift.
    sample_rows, queries, k, nprobes : int
    verdict : str
        ``ok``, ``degrading`` or ``retrain``.
    reasons : tuple of str
        Which measures crossed which threshold.
    thresholds : tuple of (str, float)
        The thresholds the verdict used.
    seconds : float
    segments : tuple of SegmentHealth

    Measures that could not be taken (no recent rows, too few rows) are
    -1.
    """

    _row_name = "segment"
    _what = "a HealthReport"

    dataset_uri: str = spec(str_field)
    index_name: str = spec(str_field)
    index_type: str = spec(str_field)
    metric: str = spec(str_field)
    column: str = spec(str_field)
    version: int = spec(_INT)
    training_version: int = spec(_INT)
    num_rows: int = spec(_INT)
    rows_since_training: int = spec(_INT)
    share_since_training: float = spec(_MEASURE)
    unindexed_rows: int = spec(_INT)
    num_partitions: int = spec(_INT)
    partition_cv: float = spec(_MEASURE)
    partition_max_over_mean: float = spec(_MEASURE)
    residual_trained: float = spec(_MEASURE)
    residual_recent: float = spec(_MEASURE)
    residual_ratio: float = spec(_MEASURE)
    recall_trained: float = spec(_MEASURE)
    recall_recent: float = spec(_MEASURE)
    recall_drop: float = spec(_MEASURE)
    sample_rows: int = spec(_INT)
    queries: int = spec(_INT)
    k: int = spec(_INT)
    nprobes: int = spec(_INT)
    verdict: str = spec(str_field)
    reasons: tuple[str, ...] = spec(strs_field, default=(), encode=list, decode=seq_field, kernel=_tuple)
    thresholds: tuple[tuple[str, float], ...] = spec(
        _thresholds, default=(), encode=lambda v: dict(v), decode=_thresholds, kernel=lambda v: _thresholds(v, "thresholds"),
    )
    seconds: float = spec(_SECONDS, default=0.0)
    segments: tuple[SegmentHealth, ...] = spec(
        tuple_of(SegmentHealth, "SegmentHealth records"), default=(), codec=_records(SegmentHealth)
    )

    def __post_init__(self) -> None:
        _fields.check_fields(self, "HealthReport")
        if self.verdict not in ("ok", "degrading", "retrain"):
            raise InvalidInputError(f"HealthReport verdict must be ok, degrading or retrain, got {self.verdict!r}")

    @property
    def needs_retrain(self) -> bool:
        """The verdict is ``retrain``."""
        return self.verdict == "retrain"

    def __repr__(self) -> str:
        return (f"HealthReport({self.index_name!r} at version {self.version}: {self.verdict}; "
                f"recall drop {self.recall_drop:.3f}, residual ratio {self.residual_ratio:.2f}, "
                f"{self.share_since_training:.0%} of rows since training)")

    def _table_spec(self) -> TableSpec:
        def num(x: float, fmt: str = ".3f") -> str:
            return "n/a" if x < 0 else format(x, fmt)

        summary = (
            ("verdict", self.verdict + (": " + "; ".join(self.reasons) if self.reasons else "")),
            ("index", f"{self.index_type} ({self.metric}) on {self.column!r}, {self.num_partitions} partitions"),
            ("rows", f"{self.num_rows:,} ({self.rows_since_training:,} since training at version "
                     f"{self.training_version}: {num(self.share_since_training, '.0%')}; {self.unindexed_rows:,} unindexed)"),
            ("partition skew", f"cv {num(self.partition_cv, '.2f')}, largest/mean {num(self.partition_max_over_mean, '.2f')}"),
            ("residual", f"trained {num(self.residual_trained, '.4g')}, recent {num(self.residual_recent, '.4g')}, "
                         f"ratio {num(self.residual_ratio, '.2f')}"),
            (f"recall@{self.k} (nprobes={self.nprobes})", f"trained {num(self.recall_trained)}, recent "
                                                          f"{num(self.recall_recent)}, drop {num(self.recall_drop)}"),
            ("sample", f"{self.sample_rows:,} rows, {self.queries} queries per era"),
            ("thresholds", ", ".join(f"{k}={v:g}" for k, v in self.thresholds)),
            ("time", f"{self.seconds:.2f}s"),
        )
        columns = (Column("uuid", "uuid"), Column("dataset_version", "int"), Column("num_rows", "int"),
                   Column("num_partitions", "int"), Column("partition_cv", "float"), Column("partition_max_over_mean", "float"))
        rows = tuple((s.uuid, s.dataset_version, s.num_rows, s.num_partitions, s.partition_cv, s.partition_max_over_mean)
                     for s in self.segments)
        return TableSpec(f"health of {self.index_name} in {self.dataset_uri} at version {self.version}", columns, rows,
                         summary, "segment")
