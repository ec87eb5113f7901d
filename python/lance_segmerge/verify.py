"""verify_index and repair_index: check a vector index against its data,
segment by segment, and rewrite the segments whose damage can be undone.

No Lance tool checks an index against the vectors it indexes. A segment
whose code layout was applied twice (the chained-merge bug: merged IVF_PQ
or IVF_RQ segments merged again) opens and answers queries with a
fraction of its recall, and nothing says so. :func:`verify_index` reads a
sample of each segment's rows back from the data files, encodes them with
the segment's own model and compares the codes it stores (under the
declared layout and under the known wrong ones), checks the segment's
files, structure and row ids, and estimates its recall with a Go search
that computes what a pylance query computes. :func:`repair_index` rewrites
every segment whose damage is an invertible layout error and commits the
rewrites as one version.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import uuid as _uuidlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, Union

from . import _ffi
from ._display import Tabular
from ._progress import ProgressArg, Reporter
from ._validate import _bool, _field, _int, _loads, _mapping, _name, _opt_pos_int, _progress, _seq, _show, _str, _uuid
from .api import DatasetLike, _segments_json, as_dataset, commit_existing_index_segments, remove_uncommitted
from .errors import CorruptError, InvalidInputError
from .types import IndexSegment

if TYPE_CHECKING:  # pragma: no cover
    import concurrent.futures as cf

    from .executors import Executor

logger = logging.getLogger(__name__)

__all__ = [
    "VerifyCheck",
    "SegmentVerdict",
    "VerifyReport",
    "RepairAction",
    "RepairReport",
    "verify_index",
    "repair_index",
    "search_segment",
    "VERIFY_FORMAT_VERSION",
]

#: Version of the VerifyReport serialisation.
VERIFY_FORMAT_VERSION = 1

#: Default sample of rows read back per segment, queries per segment, k.
DEFAULT_SAMPLE_ROWS = 1024
DEFAULT_QUERIES = 64
DEFAULT_K = 10
#: The sample of each merge output ``optimize(verify=True)`` checks.
DEFAULT_OUTPUT_SAMPLE_ROWS = 256


def _opt_float(v: Any, what: str) -> Optional[float]:
    """A report number: -1 (not measured) becomes None."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InvalidInputError(f"{what} must be a number, got {_show(v)}")
    return None if v < 0 else float(v)


def _number(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InvalidInputError(f"{what} must be a number, got {_show(v)}")
    return float(v)


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

    name: str
    verdict: str
    message: str
    damage: str = ""
    numbers: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "verdict": self.verdict, "message": self.message, "damage": self.damage,
                "numbers": dict(self.numbers)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "VerifyCheck":
        d = _mapping(d, "check")
        nums = _mapping(d.get("numbers") or {}, "check numbers")
        return cls(
            name=_str(_field(d, "name", "check"), "check name"),
            verdict=_str(_field(d, "verdict", "check"), "check verdict"),
            message=_str(d.get("message") or "", "check message"),
            damage=_str(d.get("damage") or "", "check damage"),
            numbers={_str(k, "check number name"): _number(v, f"check number {k}") for k, v in nums.items()},
        )


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

    uuid: str
    index_type: str
    num_rows: int
    fragment_ids: tuple[int, ...]
    verdict: str
    damage: tuple[str, ...] = ()
    rescuable: bool = False
    layout_depth: int = -1
    recall: Optional[float] = None
    fresh_recall: Optional[float] = None
    codes_mismatch: Optional[float] = None
    advice: str = ""
    checks: tuple[VerifyCheck, ...] = ()

    @property
    def clean(self) -> bool:
        return self.verdict == "clean"

    def check(self, name: str) -> Optional[VerifyCheck]:
        """The check called ``name``, if it ran."""
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid, "index_type": self.index_type, "num_rows": self.num_rows,
            "fragment_ids": list(self.fragment_ids), "verdict": self.verdict, "damage": list(self.damage),
            "rescuable": self.rescuable, "layout_depth": self.layout_depth,
            "recall": -1 if self.recall is None else self.recall,
            "fresh_recall": -1 if self.fresh_recall is None else self.fresh_recall,
            "codes_mismatch": -1 if self.codes_mismatch is None else self.codes_mismatch,
            "advice": self.advice, "checks": [c.to_dict() for c in self.checks],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SegmentVerdict":
        d = _mapping(d, "segment verdict")
        u = _uuid(_field(d, "uuid", "segment verdict"), "segment verdict uuid")
        return cls(
            uuid=u,
            index_type=_str(d.get("index_type") or "", f"segment {u}: index_type"),
            num_rows=_int(d.get("num_rows") or 0, f"segment {u}: num_rows"),
            fragment_ids=tuple(_int(x, f"segment {u}: fragment id", 0, 2**32 - 1) for x in _seq(d.get("fragment_ids"), "fragment_ids")),
            verdict=_str(_field(d, "verdict", f"segment {u}"), f"segment {u}: verdict"),
            damage=tuple(_str(x, f"segment {u}: damage") for x in _seq(d.get("damage"), "damage")),
            rescuable=_bool(bool(d.get("rescuable", False)), "rescuable"),
            layout_depth=_int(d.get("layout_depth", -1), f"segment {u}: layout_depth", -1, 64),
            recall=_opt_float(d.get("recall"), "recall"),
            fresh_recall=_opt_float(d.get("fresh_recall"), "fresh_recall"),
            codes_mismatch=_opt_float(d.get("codes_mismatch"), "codes_mismatch"),
            advice=_str(d.get("advice") or "", f"segment {u}: advice"),
            checks=tuple(VerifyCheck.from_dict(c) for c in _seq(d.get("checks"), "checks")),
        )


@dataclass(frozen=True)
class VerifyReport(Tabular):
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

    dataset_uri: str
    index_name: str
    column: str
    version: int
    index_type: str
    metric: str
    deep: bool
    sample_rows: int
    queries: int
    k: int
    nprobes: int
    clean: bool
    seconds: float
    segments: tuple[SegmentVerdict, ...] = ()
    format_version: int = VERIFY_FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.format_version != VERIFY_FORMAT_VERSION:
            raise InvalidInputError(f"VerifyReport format_version {self.format_version} is not supported")

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version, "dataset_uri": self.dataset_uri, "index_name": self.index_name,
            "column": self.column, "version": self.version, "index_type": self.index_type, "metric": self.metric,
            "deep": self.deep, "sample_rows": self.sample_rows, "queries": self.queries, "k": self.k,
            "nprobes": self.nprobes, "clean": self.clean, "seconds": self.seconds,
            "segments": [s.to_dict() for s in self.segments],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "VerifyReport":
        d = _mapping(d, "verify report")
        return cls(
            dataset_uri=_str(d.get("dataset_uri") or "", "dataset_uri"),
            index_name=_str(_field(d, "index_name", "verify report"), "index_name"),
            column=_str(d.get("column") or "", "column"),
            version=_int(_field(d, "version", "verify report"), "version"),
            index_type=_str(d.get("index_type") or "", "index_type"),
            metric=_str(d.get("metric") or "", "metric"),
            deep=_bool(bool(d.get("deep", False)), "deep"),
            sample_rows=_int(d.get("sample_rows") or 0, "sample_rows"),
            queries=_int(d.get("queries") or 0, "queries"),
            k=_int(d.get("k") or 0, "k"),
            nprobes=_int(d.get("nprobes") or 0, "nprobes"),
            clean=_bool(bool(d.get("clean", False)), "clean"),
            seconds=float(d.get("seconds") or 0.0),
            segments=tuple(SegmentVerdict.from_dict(s) for s in _seq(d.get("segments"), "segments")),
            format_version=_int(d.get("format_version", VERIFY_FORMAT_VERSION), "format_version"),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, s: str) -> "VerifyReport":
        return cls.from_dict(_loads(s, "verify report JSON"))

    def __repr__(self) -> str:
        return (f"VerifyReport({self.index_name!r} at version {self.version}: {len(self.segments)} segments, "
                f"{len(self.damaged)} damaged, {len(self.rescuable)} rescuable)")


def _from_kernel(out: str, dataset_uri: str, seconds: float) -> VerifyReport:
    d = json.loads(out)
    d["dataset_uri"] = dataset_uri
    d["seconds"] = seconds
    for s in d.get("segments") or ():
        s["checks"] = [{**c, "numbers": c.get("numbers") or {}} for c in s.get("checks") or ()]
    return VerifyReport.from_dict(d)


def _options(sample_rows: Any, queries: Any, k: Any, nprobes: Any, deep: Any, seed: Any) -> dict[str, Any]:
    return {
        "sample_rows": _int(sample_rows, "sample_rows", 1, 1 << 24),
        "queries": _int(queries, "queries", 0, 1 << 16),
        "k": _int(k, "k", 1, 1 << 14),
        "nprobes": _int(nprobes, "nprobes", 1, 1 << 20) if nprobes is not None else 0,
        "deep": _bool(deep, "deep"),
        "seed": _int(seed, "seed", 0, 2**64 - 1),
    }


def verify_index(
    dataset: DatasetLike,
    index_name: str,
    *,
    sample_rows: int = DEFAULT_SAMPLE_ROWS,
    queries: int = DEFAULT_QUERIES,
    k: int = DEFAULT_K,
    nprobes: Optional[int] = None,
    deep: bool = False,
    seed: int = 0,
    segments: Optional[Sequence[Union[str, IndexSegment]]] = None,
    progress: ProgressArg = None,
) -> VerifyReport:
    """Check every segment of a vector index against its data.

    Each segment gets, in order:

    - **files and structure**: every file the manifest lists exists with
      its recorded size; footers, schemas and index metadata parse; the
      partitions hold the file's rows; the columns have the widths the
      model implies; row ids are unique and belong to fragments the
      segment covers (with ``deep``, to rows those fragments have; deleted
      rows are counted as stale, which an optimize reclaims); the model
      (centroids, codebook, SQ bounds, RQ rotation) agrees with the
      index's other segments;
    - **layout and codes**: ``sample_rows`` rows are read back from the
      data files, assigned and encoded with the segment's own model, and
      compared with the stored partitions and codes, under the declared
      layout and under the known wrong ones, so that layout damage is
      named (``pq_transposed_twice``, ``rq_packed_twice``,
      ``layout_flag_lies``) with the share of rows affected;
    - **recall** (``queries > 0``): ``queries`` vectors sampled from the
      segment's rows are searched over the segment alone with a Go search
      computing what pylance computes (IVF probe of ``nprobes`` nearest
      centroids, then the quantizer's distance), against brute force over
      its live rows; next to it, what the same model reaches encoding the
      same rows afresh. A recall far below the fresh one is damage.

    ``IVF_HNSW_*`` segments get the structure checks only (their verdict
    is ``unverified`` when those pass).

    Parameters
    ----------
    dataset : Dataset, str, os.PathLike or lance.LanceDataset
        The dataset (a URI: its latest version).
    index_name : str
    sample_rows : int, default 1024
        Rows per segment the codes check reads back.
    queries : int, default 64
        Queries per segment of the recall check; 0 skips it (the check
        reads every row of the segment and of its data once).
    k : int, default 10
    nprobes : int, optional
        Partitions each query probes; default Lance's 20 (at most every
        partition).
    deep : bool, default False
        Check every row id against the rows its fragment has.
    seed : int, default 0
        Seeds the samples (deterministic per segment).
    segments : list of str or IndexSegment, optional
        Check only these segments.
    progress : bool or callable, optional
        ``True`` for a tqdm bar over the segments, or a callable receiving
        :class:`OperationProgress` snapshots.

    Returns
    -------
    VerifyReport

    Raises
    ------
    NotFoundError
        No such index, or a segment not in it.
    StorageError, CorruptError
        The data files cannot be read (damage to the index itself is
        reported, not raised).
    """
    ds = as_dataset(dataset)
    _name(index_name, "index_name")
    opts = _options(sample_rows, queries, k, nprobes, deep, seed)
    if segments is not None:
        opts["segments"] = [s.uuid if isinstance(s, IndexSegment) else _uuid(s, "segments") for s in _seq(segments, "segments")]
    _progress(progress)
    reporter = Reporter(progress, "verify")
    t0 = time.perf_counter()
    try:
        out = _ffi.run_operation(
            "VerifyIndex",
            (ds.uri, _ffi.options_json(ds.storage_options), ds.version, index_name, json.dumps(opts)),
            reporter if reporter.active else None,
        )
    finally:
        reporter.close()
    rep = _from_kernel(out, ds.display_uri, time.perf_counter() - t0)
    for s in rep.damaged:
        logger.info("index %s segment %s is damaged (%s): %s", index_name, s.uuid, ", ".join(s.damage), s.advice)
    logger.info("verified %s at version %d: %d segments, %d damaged in %.1fs", index_name, rep.version,
                len(rep.segments), len(rep.damaged), rep.seconds)
    return rep


def check_outputs(dataset: DatasetLike, segments: Sequence[IndexSegment], *, sample_rows: int = DEFAULT_OUTPUT_SAMPLE_ROWS,
                  seed: int = 0) -> VerifyReport:
    """The cheap check of uncommitted segments (merge outputs) before their
    commit: files, structure, and the layout and codes of a sample read
    from a bounded number of partitions (no full row id scan, no recall).
    ``optimize(..., verify=True)`` runs it and refuses to commit a segment
    that fails."""
    ds = as_dataset(dataset)
    opts = {"sample_rows": _int(sample_rows, "sample_rows", 1, 1 << 24), "seed": _int(seed, "seed", 0, 2**64 - 1), "cheap": True}
    t0 = time.perf_counter()
    out = _ffi.run_operation(
        "CheckSegments",
        (ds.uri, _ffi.options_json(ds.storage_options), ds.version, _segments_json(segments), json.dumps(opts)),
    )
    return _from_kernel(out, ds.display_uri, time.perf_counter() - t0)


def require_clean(report: VerifyReport) -> None:
    """Raise :class:`CorruptError` naming every damaged segment of a
    report."""
    bad = report.damaged
    if bad:
        what = "; ".join(f"{s.uuid} ({', '.join(s.damage)}): {_first_failure(s)}" for s in bad)
        raise CorruptError(f"{len(bad)} merge output(s) do not verify, nothing was committed: {what}")


def _first_failure(s: SegmentVerdict) -> str:
    return next((c.message for c in s.checks if c.verdict == "failed"), s.verdict)


# -- repair -------------------------------------------------------------------------


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

    uuid: str
    action: str
    damage: tuple[str, ...]
    layout_depth: int
    new_uuid: str = ""
    verdict_after: str = ""
    advice: str = ""


@dataclass(frozen=True)
class RepairReport(Tabular):
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

    dataset_uri: str
    index_name: str
    read_version: int
    version: int
    dry_run: bool
    committed: bool
    rewritten: int
    to_rebuild: int
    seconds: float
    actions: tuple[RepairAction, ...] = ()
    report: Optional[VerifyReport] = None

    def __repr__(self) -> str:
        what = "would rewrite" if self.dry_run else "rewrote"
        return (f"RepairReport({self.index_name!r}: {what} {self.rewritten} segments, {self.to_rebuild} to rebuild, "
                f"version {self.version})")


def _repair_task(job: dict[str, Any]) -> dict[str, Any]:
    """Rewrite one segment (run by :func:`lance_segmerge._worker.repair_task`
    on a worker)."""
    ds = job["dataset"]
    out = _ffi.run_operation(
        "RepairSegment",
        (ds.uri, _ffi.options_json(ds.storage_options), ds.version, job["index_name"], job["uuid"], int(job["depth"]),
         json.dumps({"output_uuid": job["output_uuid"], "sample_rows": job["sample_rows"], "seed": job["seed"]})),
    )
    return dict(json.loads(out))


def repair_index(
    dataset: DatasetLike,
    index_name: str,
    *,
    executor: Union[str, "cf.Executor", "Executor"] = "local",
    max_workers: Optional[int] = None,
    dry_run: bool = True,
    sample_rows: int = DEFAULT_SAMPLE_ROWS,
    queries: int = 0,
    seed: int = 0,
) -> RepairReport:
    """Rewrite every segment whose damage is an invertible layout error.

    The index is verified first (:func:`verify_index`). Each segment whose
    damage is only a layout error (codes transposed or packed twice, a
    layout flag that lies) is rewritten on the executor into a new segment
    (new uuid) with the layout applied once, and the rewrite is verified;
    the rewrites are then committed as one version with
    :func:`commit_existing_index_segments` (``replaces=`` the damaged
    segments). Segments that cannot be rescued are reported with the
    advice to rebuild them. A segment that verifies clean is never
    touched. With ``dry_run`` (the default) nothing is written.

    Parameters
    ----------
    dataset : Dataset, str, os.PathLike or lance.LanceDataset
    index_name : str
    executor : str or Executor, default "local"
        Where the rewrites run (``local``, ``processes``, ``ray``,
        ``dask``, or a ``concurrent.futures.Executor``).
    max_workers : int, optional
    dry_run : bool, default True
        Verify and report what would be done; write nothing.
    sample_rows, queries, seed
        Passed to :func:`verify_index` (and the rewrites' verification).

    Returns
    -------
    RepairReport
        ``version`` is the committed version; on a ``LanceDataset`` check
        it out with ``dataset.checkout_version(report.version)``.

    Raises
    ------
    CorruptError
        A rewrite does not verify (nothing is committed; its output is
        removed).
    """
    from . import _worker
    from .executors import resolve_executor

    ds = as_dataset(dataset)
    _name(index_name, "index_name")
    _bool(dry_run, "dry_run")
    _opt_pos_int(max_workers, "max_workers", 4096)
    t0 = time.perf_counter()
    rep = verify_index(ds, index_name, sample_rows=sample_rows, queries=queries, seed=seed)
    fixable = rep.rescuable
    actions: dict[str, RepairAction] = {}
    for s in rep.damaged:
        if not s.rescuable:
            actions[s.uuid] = RepairAction(s.uuid, "rebuild", s.damage, s.layout_depth, advice=s.advice)
    version, committed = ds.version, False
    if dry_run or not fixable:
        for s in fixable:
            actions[s.uuid] = RepairAction(s.uuid, "rewrite", s.damage, s.layout_depth, advice=s.advice)
    else:
        outputs = {s.uuid: str(_uuidlib.uuid4()) for s in fixable}
        jobs = [{"dataset": ds, "index_name": index_name, "uuid": s.uuid, "depth": s.layout_depth,
                 "output_uuid": outputs[s.uuid], "sample_rows": sample_rows, "seed": seed} for s in fixable]
        pool = resolve_executor(executor, max_workers)
        done: list[IndexSegment] = []
        try:
            results = pool.map(_worker.repair_task, jobs)
            for s, r in zip(fixable, results):
                seg = IndexSegment.from_dict(r["segment"])
                after = r["report"]["verdict"]
                done.append(seg)
                actions[s.uuid] = RepairAction(s.uuid, "rewrite", s.damage, s.layout_depth, seg.uuid, after, s.advice)
            version = commit_existing_index_segments(ds, index_name, rep.column, done, replaces=[s.uuid for s in fixable]).version
            committed = True
        except BaseException:
            pool.cancel()
            raise
        finally:
            pool.close()
            if not committed:
                try:
                    remove_uncommitted(ds, list(outputs.values()))
                except Exception as exc:  # the cleanup verb can finish the job
                    logger.warning("could not remove %d rewritten segments: %s", len(outputs), exc)
        logger.info("repaired %s: rewrote %d segments, committed version %d", index_name, len(done), version)
    ordered = tuple(actions[s.uuid] for s in rep.damaged)
    return RepairReport(
        dataset_uri=ds.display_uri, index_name=index_name, read_version=ds.version, version=int(version),
        dry_run=dry_run, committed=committed, rewritten=len(fixable),
        to_rebuild=sum(1 for a in ordered if a.action == "rebuild"), seconds=time.perf_counter() - t0,
        actions=ordered, report=rep,
    )


# -- search -------------------------------------------------------------------------


def search_segment(
    dataset: DatasetLike,
    index_name: str,
    segment: Union[str, IndexSegment],
    queries: Any,
    *,
    k: int = DEFAULT_K,
    nprobes: Optional[int] = None,
) -> tuple[list[list[int]], list[list[float]]]:
    """Search one segment alone, as Lance's IVF search does (the Go search
    the recall check uses): each query probes its ``nprobes`` nearest
    partitions and rows are scored with the segment's quantized distance.
    Rows the dataset no longer has are filtered out, as a pylance query
    filters them.

    Parameters
    ----------
    queries : array-like of float, shape (n, dim) or (dim,)
    k : int, default 10
    nprobes : int, optional
        Default Lance's 20.

    Returns
    -------
    (row_ids, distances)
        One list per query, nearest first: row ids (addresses), and the
        distances as pylance's ``_distance`` reports them.
    """
    import numpy as np

    ds = as_dataset(dataset)
    _name(index_name, "index_name")
    seg = segment.uuid if isinstance(segment, IndexSegment) else _uuid(segment, "segment")
    q = np.asarray(queries, dtype=np.float32)
    if q.ndim == 1:
        q = q[None, :]
    if q.ndim != 2:
        raise InvalidInputError(f"queries must be a vector or a 2-d array of vectors, got shape {q.shape}")
    req = {"vectors": base64.b64encode(np.ascontiguousarray(q).tobytes()).decode("ascii"),
           "k": _int(k, "k", 1, 1 << 14), "nprobes": _int(nprobes, "nprobes", 1, 1 << 20) if nprobes is not None else 0}
    out = _ffi.call_json("SearchSegment", ds.uri, _ffi.options_json(ds.storage_options), ds.version, index_name, seg, json.dumps(req))
    return [list(map(int, r)) for r in out["row_ids"]], [list(map(float, d)) for d in out["distances"]]


def _damage_segment(dataset: DatasetLike, index_name: str, segment: str, kind: str, **spec: Any) -> str:
    """Damage one segment the way real faults do (tests and drills only):
    ``layout_again``, ``flip_bits``, ``truncate``, ``foreign_row_id``,
    ``wrong_centroid``, ``flip_flag``. Publishes a version listing the
    damaged segment in place of the original (``truncate`` cuts the file in
    place) and returns its uuid. Never run it on data you care about."""
    ds = as_dataset(dataset)
    return str(_ffi.call("DamageSegment", ds.uri, _ffi.options_json(ds.storage_options), index_name, segment,
                         json.dumps({"kind": kind, **spec})))
