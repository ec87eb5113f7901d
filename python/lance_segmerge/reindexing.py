"""reindex: retrain an index's model on today's data, rebuild every segment
with it on workers, and swap the index for the rebuilt one in one commit,
while writers go on (:func:`reindex`).

The run is the build path of :func:`lance_segmerge.create_index` on the run
engine, with three differences: the index exists (its kind and parameters
are read from it, and the commit replaces every segment it had at the
version the rebuild read); the run keeps a journal, so that a rerun after a
crash reuses the segments that were built (with the model they were built
with, read back from them); and rows appended while it ran are indexed
afterwards by a catch-up delta built with the new model.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

from . import _ffi, _jobs
from ._args import checked
from ._cdata import CStructs
from ._build import _build_segment, _train, fragment_rows, group_fragments, read_index_model, read_segment_model
from ._engine import Run
from ._handles import at_version
from ._journal import RunJournal, read_journal
from ._progress import OptimizeProgressArg
from .api import Dataset, DatasetLike, _commit, _list, _plan, _plan_options, as_dataset, remove_uncommitted
from .errors import InvalidInputError, NotFoundError, SegmergeError, UnsupportedError
from .executors import Executor, resolve_executor
from .model import IndexModel
from .reports import OptimizeProgress
from ._version import transaction_properties
from .types import IndexSegment

logger = logging.getLogger(__name__)

__all__ = ["reindex", "REBUILDABLE", "EXTENSIBLE"]

#: The index kinds a reindex rebuilds: the kinds the Go build writes, and
#: IVF_HNSW_*, whose segments pylance's ``create_index_uncommitted`` builds
#: on the workers with the model trained here (the Go build writes no
#: graphs).
REBUILDABLE = ("IVF_FLAT", "IVF_SQ", "IVF_PQ", "IVF_RQ", "IVF_HNSW_FLAT", "IVF_HNSW_SQ", "IVF_HNSW_PQ")

#: What an IVF_HNSW_* model is trained as: its IVF centroids (and PQ
#: codebook) are shared by every segment; pylance trains each segment's SQ
#: bounds itself, and the merge re-quantizes to their union.
_HNSW_TRAINED_AS = {"IVF_HNSW_FLAT": "IVF_FLAT", "IVF_HNSW_SQ": "IVF_FLAT", "IVF_HNSW_PQ": "IVF_PQ"}


@dataclass(frozen=True)
class ReindexRun:
    """What names a reindex run in its journal, as a MergePlan names a merge
    run: the version it read, the segments it replaces, the id of its
    parameters."""

    dataset_uri: str
    index_name: str
    plan_id: str
    read_version: int
    sources: tuple[str, ...]


@dataclass(frozen=True)
class ReindexStats:
    """What one reindex did (maintain reports it)."""

    read_version: int
    version: int
    segments_replaced: int
    build_tasks: int
    builds_reused: int
    training_rows: int
    sample_tasks: int
    catch_up_rows: int
    model_hash: str
    seconds: float


@checked(converts=("dataset",))
def reindex(
    dataset: DatasetLike,
    index_name: str,
    *,
    num_partitions: Optional[int] = None,
    sample_rate: int = 256,
    max_iters: int = 50,
    seed: Optional[int] = None,
    executor: Union[str, cf.Executor, Executor] = "auto",
    max_workers: Optional[int] = None,
    fragments_per_task: Optional[int] = None,
    fan_in: int = 32,
    target_segments: int = 1,
    catch_up: bool = True,
    resume: bool = True,
    progress: OptimizeProgressArg = True,
    window_rows: Optional[int] = None,
    memory_bytes: Optional[int] = None,
    properties: Optional[dict[str, str]] = None,
    storage_options: Optional[Mapping[str, str]] = None,
) -> Any:
    """Retrain a vector index on today's data and swap it in one commit.

    Reads the index's kind and parameters (metric, partitions, PQ
    sub-vectors and bits, SQ and RQ bits), trains a new model on a sample of
    the dataset at its latest version (the workers draw it, each its build
    group's share by live rows; the driver trains on the whole), builds
    fragment-scoped segments with
    it on ``executor``'s workers, merges them with the tree merge, checks
    them, and commits them as the replacement of every segment the index had
    at that version: one new version, same index name. Queries that ran
    before the commit used the old index; after it, the new one.

    Writers may go on: rows appended while the rebuild runs are rebased over
    by the commit and then, with ``catch_up`` (default), indexed by one more
    segment built with the new model (rows appended after that stay
    unindexed until the next maintenance, and pylance searches them
    exhaustively meanwhile: none is lost). A writer that replaced or merged
    the old segments, or compacted the fragments they cover, makes the
    commit a :class:`ConflictError`; the old index stays as it was.

    On failure, interrupt or crash the old index is untouched. With
    ``resume`` (default) the run keeps a journal: the next ``reindex`` of
    the same index with the same parameters reuses every segment it built
    that still verifies (files complete, row ids exactly its fragments'),
    with the model those were built with, and builds the rest.

    Parameters
    ----------
    dataset : Dataset, str, os.PathLike or lance.LanceDataset
        The dataset; a handle's version is the version rebuilt.
    index_name : str
        An IVF_FLAT, IVF_SQ, IVF_PQ, IVF_RQ or IVF_HNSW_{FLAT,SQ,PQ} index
        (other kinds: :class:`UnsupportedError`). IVF_HNSW_* segments are
        built on the workers by pylance's ``create_index_uncommitted``, with
        the IVF centroids (and PQ codebook) trained here and the old index's
        graph parameters; their catch-up delta is pylance's
        ``optimize_indices(num_indices_to_merge=0)``, and a rerun rebuilds
        every group.
    num_partitions : int, optional
        Partitions of the new model; when omitted, the index's count (of
        its widest segment, after extensions by maintain(retrain="auto")).
    sample_rate, max_iters, seed
        Training (:func:`lance_segmerge.train_index_model`).
    executor, max_workers, fragments_per_task, fan_in, target_segments
        The build and merge (see :func:`lance_segmerge.create_index`).
        ``"auto"`` builds in process.
    catch_up : bool, default True
        Index the rows appended during the rebuild with one more segment.
    resume : bool, default True
        Keep a run journal and reuse a crashed run's built segments.
    progress : bool or callable, default True
        Build tasks are level 0 of :class:`OptimizeProgress`.
    window_rows, memory_bytes : int, optional
        Build memory bounds (see :func:`lance_segmerge.build_index_segment`).
    properties : dict of str to str, optional
        Key-values for the commit's transaction, next to the package's
        (``lance_segmerge.verb`` = ``reindex``, ``.run``, ``.model`` (the
        new model's hash), ``.previous_model``, ``.training_rows``, ``.sample_tasks``,
        ``.read_version``).
    storage_options : dict of str to str, optional
        For a URI.

    Returns
    -------
    Dataset or lance.LanceDataset
        The dataset at the last version this call committed, of the kind
        given.
    """
    ds = as_dataset(dataset, storage_options)
    out, _ = _reindex(ds, index_name, num_partitions=num_partitions, sample_rate=sample_rate, max_iters=max_iters,
                      seed=seed, executor=executor, max_workers=max_workers, fragments_per_task=fragments_per_task,
                      fan_in=fan_in, target_segments=target_segments, catch_up=catch_up, resume=resume,
                      progress=progress, window_rows=window_rows, memory_bytes=memory_bytes, properties=properties)
    return at_version(dataset, ds, out.version, out)


def _run_key(ds: Dataset, index_name: str, sources: tuple[str, ...], params: Mapping[str, Any]) -> ReindexRun:
    h = hashlib.sha256(json.dumps([ds.uri, index_name, ds.version, list(sources), dict(params)], sort_keys=True).encode())
    return ReindexRun(ds.uri, index_name, "reindex-" + h.hexdigest()[:24], ds.version, sources)


def _resume_version(ds: Dataset, index_name: str) -> Dataset:
    """The version a crashed reindex read, when its journal is there and
    every segment it was replacing is still committed; else ``ds``."""
    old, _ = read_journal(ds, index_name)
    if old is None or not str(old.get("plan_id", "")).startswith("reindex-"):
        return ds
    v = int(old.get("read_version") or 0)
    if not 0 < v <= ds.version or v == ds.version:
        return ds
    live = {s.uuid for s in _list(ds, index_name, False)}
    if not set(old.get("sources") or ()) <= live:
        return ds
    try:
        pinned = ds.checkout(v)
    except NotFoundError:  # the version was cleaned up since
        return ds
    logger.info("resuming the reindex of %s that read version %d (latest is %d)", index_name, v, ds.version)
    return pinned


def _reindex(
    latest: Dataset,
    index_name: str,
    *,
    num_partitions: Optional[int],
    sample_rate: int,
    max_iters: int,
    seed: Optional[int],
    executor: Any,
    max_workers: Optional[int],
    fragments_per_task: Optional[int],
    fan_in: int,
    target_segments: int,
    catch_up: bool,
    resume: bool,
    progress: OptimizeProgressArg,
    window_rows: Optional[int],
    memory_bytes: Optional[int],
    properties: Optional[dict[str, str]],
) -> tuple[Dataset, ReindexStats]:
    ds = _resume_version(latest, index_name) if resume else latest
    segs = _list(ds, index_name, True)
    kinds = {s.index_type for s in segs}
    if len(kinds) != 1 or not kinds <= set(REBUILDABLE):
        raise UnsupportedError(
            f"reindex rebuilds {', '.join(REBUILDABLE)} indices; {index_name!r} has {', '.join(sorted(map(str, kinds)))} segments"
        )
    index_type = str(next(iter(kinds)))
    column = _plan(ds, index_name, _plan_options(index_name, fan_in, None, None, True)).column
    # An extended model's segments differ in partitions; the widest is the
    # model the index answers with now.
    widest = max(segs, key=lambda s: (s.num_partitions or 0, s.num_rows or 0))
    hnsw: Optional[dict[str, int]] = None
    if index_type in _HNSW_TRAINED_AS:
        trained_as, metric = _HNSW_TRAINED_AS[index_type], str(widest.distance_type)
        if index_type == "IVF_HNSW_PQ" and metric == "dot":
            # Measured: recall@10 0.13 after such a rebuild, 0.47 for
            # pylance's fresh build of the same table.
            raise UnsupportedError(
                f"reindex of {index_name!r}, a dot-product IVF_HNSW_PQ index: pylance's create_index_uncommitted "
                "encodes with a given PQ codebook by inner product, which loses most of the recall; rebuild it "
                "with pylance's create_index(..., replace=True) instead"
            )
        nsub, bits, previous = int(widest.num_sub_vectors or 0), int(widest.num_bits or 0), ""
        hnsw = {k: int(v) for k, v in (("m", widest.hnsw_m), ("ef_construction", widest.hnsw_ef_construction),
                                        ("max_level", widest.hnsw_max_level)) if v}
    else:
        current = read_index_model(ds, index_name)
        trained_as, metric = index_type, current.metric
        nsub, bits, previous = current.num_sub_vectors, current.num_bits, current.content_hash[:16]
    frags = fragment_rows(ds)
    if not frags:
        raise InvalidInputError("the dataset has no fragments to index")
    if executor == "auto":
        executor = "local"  # no cost model for builds yet
    pool = resolve_executor(executor, max_workers)
    workers = int(max_workers or getattr(getattr(pool, "_pool", None), "_max_workers", None) or 2)
    groups = group_fragments(frags, fragments_per_task, workers)
    partitions = int(num_partitions or widest.num_partitions or 0)
    params: dict[str, Any] = {
        "verb": "reindex", "index_type": index_type, "metric": metric,
        "num_partitions": partitions, "num_sub_vectors": nsub,
        "num_bits": bits, "sample_rate": sample_rate, "max_iters": max_iters, "seed": seed,
        "groups": groups, "fan_in": fan_in, "target_segments": target_segments,
    }
    key = _run_key(ds, index_name, tuple(s.uuid for s in segs), params)
    journal = RunJournal.start(ds, key, params) if resume else None
    run = Run(ds, index_name, pool, executor=executor if isinstance(executor, str) else type(executor).__name__,
              progress=progress, merge_options={"requantize_sq": hnsw is not None, **({"window_rows": window_rows} if window_rows else {})},
              journal=journal, verb="reindex", run_id=key.plan_id, properties=properties)
    with run:
        reused: dict[int, IndexSegment] = {}
        model: Optional[IndexModel] = None
        if journal is not None and hnsw is not None:
            # A rerun reuses Go-built segments, whose model it reads back;
            # an IVF_HNSW_* segment's model is not read back, so a crashed
            # run's builds are removed and done again.
            for g in groups:
                journal.drop_build(g, "an IVF_HNSW_* build is not reused")
        elif journal is not None:
            for i, g in enumerate(groups):
                seg = journal.reuse_build(column, g)
                if seg is not None:
                    reused[i] = seg
                    run.created.append(seg.uuid)  # merged away, or kept by the commit
            model = _model_of(ds, list(reused.values()))
            if model is None:
                for i in list(reused):  # built with different models: start afresh
                    journal.discard_build(groups[i], "the run's outputs hold different models")
                    del reused[i]
        if model is None:
            # The sample is drawn on the workers, a share per build group,
            # and trained on here.
            model = _train(
                ds, column, trained_as, metric=metric, num_partitions=partitions,
                num_sub_vectors=nsub or None, num_bits=bits or None,
                sample_rate=sample_rate, max_iters=max_iters, fragment_ids=None, seed=seed, groups=groups,
                live_rows=dict(frags), sample_on=lambda jobs: run.batch(_jobs.sample_task, jobs,
                                                 describe=lambda k: f"training sample of fragments {jobs[k]['fragment_ids']}"),
            )
        else:
            logger.info("reindex of %s: %d of %d builds reused from the journal, with their model %s",
                        index_name, len(reused), len(groups), model.content_hash[:12])
        jobs = []
        todo = []
        for i, g in enumerate(groups):
            if i in reused:
                continue
            output = run.new_output()
            if journal is not None:
                journal.planned_build(g, output)
            jobs.append({"dataset": ds, "column": column, "index_type": index_type, "fragment_ids": g, "model": model,
                         "name": index_name, "index_uuid": output, "window_rows": window_rows, "memory_bytes": memory_bytes,
                         "hnsw": hnsw})
            todo.append(i)
        if journal is not None:
            journal.flush()
        done = [len(reused)]
        run.report(OptimizeProgress(0, done[0], len(groups), len(groups)))

        def on_done(_: int) -> None:
            done[0] += 1
            run.report(OptimizeProgress(0, done[0], len(groups), len(groups)))

        built = dict(reused)
        results = run.batch(_jobs.build_task, jobs, on_done=on_done,
                            describe=lambda k: f"build of fragments {jobs[k]['fragment_ids']} (output {jobs[k]['index_uuid']})")
        for k, r in enumerate(results):
            seg = IndexSegment._from_kernel(r)
            built[todo[k]] = seg
            if journal is not None:
                journal.done_build(groups[todo[k]], seg)
        final = run.reduce([built[i] for i in range(len(groups))], fan_in, target_segments)
        trained = dict(model.params)
        training_rows = int(trained.get("sample_rows", 0) or 0)
        sample_tasks = int(trained.get("sample_tasks", 0) or 0)
        facts = {"model": model.content_hash[:16], "previous_model": previous or None,
                 "training_rows": training_rows or None, "sample_tasks": sample_tasks or None, "read_version": ds.version}
        out = run.commit(index_name, column, final, replaces=[s.uuid for s in segs], verify=True, facts=facts)
    logger.info("reindex of %s: %d segments replaced by %d at version %d (%d builds, %d reused)",
                index_name, len(segs), len(final), out.version, len(groups), len(reused))
    caught = 0
    if catch_up:
        out, caught = _catch_up(out, index_name, key.plan_id, properties,
                                {"column": column, "index_type": index_type, "model": model, "name": index_name,
                                 "window_rows": window_rows, "memory_bytes": memory_bytes, "hnsw": hnsw})
    stats = ReindexStats(read_version=ds.version, version=out.version, segments_replaced=len(segs), build_tasks=len(groups),
                         builds_reused=len(reused), training_rows=training_rows, sample_tasks=sample_tasks,
                         catch_up_rows=caught,
                         model_hash=model.content_hash, seconds=run.stats.seconds)
    return out, stats


def _model_of(ds: Dataset, segments: list[IndexSegment]) -> Optional[IndexModel]:
    """The one model the segments were built with, or None (none given, or
    they disagree)."""
    if not segments:
        return None
    models = {m.content_hash: m for m in (read_segment_model(ds, s) for s in segments)}
    return next(iter(models.values())) if len(models) == 1 else None


def _catch_up(
    out: Dataset,
    index_name: str,
    run_id: str,
    properties: Optional[dict[str, str]],
    job: dict[str, Any],
    verb: str = "reindex",
) -> tuple[Dataset, int]:
    """Index the fragments no segment covers (at the latest version: for a
    rebuild, those appended while it ran) with one segment built as
    ``job`` says (a build job without its dataset and fragments); commits
    it as a delta. Returns the dataset after it and the rows it indexed."""
    latest = out.checkout()
    todo = _uncovered(latest, index_name)
    if not todo:
        return out, 0
    rows = sum(n for _, n in todo)
    if job.get("hnsw") is not None:
        # pylance's own delta: it encodes with the index's SQ bounds, where a
        # segment built by create_index_uncommitted would train its own, and
        # a commit refuses a delta whose bounds differ from the index's. The
        # commit is pylance's (it records none of our provenance).
        import lance

        lds = lance.dataset(latest.uri, version=latest.version, storage_options=latest.storage_options or None)
        lds.optimize.optimize_indices(num_indices_to_merge=0, index_names=[index_name])
        done = latest.checkout()
        logger.info("%s of %s: pylance's optimize_indices indexed %d rows of %d fragments no segment covered "
                    "(version %d)", verb, index_name, rows, len(todo), done.version)
        return done, rows
    model = job["model"]
    seg = IndexSegment.from_dict(_jobs.build_task({**job, "dataset": latest, "fragment_ids": [f for f, _ in todo]}))
    props = transaction_properties(verb, run_id, properties, catch_up="true",
                                   model=model.content_hash[:16] if model is not None else None)
    try:
        done = _commit(latest, index_name, job["column"], [seg], None, properties=props)
    except BaseException:
        try:
            remove_uncommitted(latest, [seg.uuid])
        except SegmergeError as exc:  # e.g. the commit landed before an interrupt
            logger.warning("could not remove the catch-up segment %s: %s", seg.uuid, exc)
        raise
    logger.info("%s of %s: indexed %d rows of %d fragments no segment covered (version %d)",
                verb, index_name, rows, len(todo), done.version)
    return done, rows


def _uncovered(ds: Dataset, index_name: str) -> list[tuple[int, int]]:
    """The fragments (id, rows) with rows that no segment of the index
    covers (the fragments a compaction with ``defer_index_remap`` wrote
    count as covered by the segments of those it replaced, whose rows the
    merges move there)."""
    covered = set(_ffi.call_json("CoveredFragments", ds.uri, ds.options_json, ds.version, index_name))
    return [(f, n) for f, n in fragment_rows(ds) if f not in covered and n > 0]


def _index_new(
    latest: Dataset,
    index_name: str,
    run_id: str,
    properties: Optional[dict[str, str]],
    window_rows: Optional[int],
    memory_bytes: Optional[int],
) -> tuple[Dataset, int]:
    """maintain's ``index_new``: what pylance's
    ``optimize_indices(num_indices_to_merge=0)`` does for one index. The
    rows of the fragments no segment covers get one delta segment, built
    as the index's own are built: with the index's model (IVF_*), by
    pylance (IVF_HNSW_*, as :func:`_catch_up` says why), or with the
    index's parameters (scalar and full-text indices: a build given the
    name of an index takes its parameters). Returns the dataset after its
    commit and the rows indexed."""
    if not _uncovered(latest, index_name):
        return latest, 0  # most passes: nothing to plan or read
    kinds = {str(s.index_type) for s in _list(latest, index_name, True)}  # every segment's: one build must fit them all
    if len(kinds) != 1:
        raise UnsupportedError(f"{index_name!r} has segments of types {sorted(kinds)}: no one build for its new rows")
    index_type = next(iter(kinds))
    column = _plan(latest, index_name, _plan_options(index_name, 32, None, None, True)).column
    job: dict[str, Any] = {"column": column, "index_type": index_type, "model": None, "name": index_name,
                           "window_rows": window_rows, "memory_bytes": memory_bytes, "hnsw": None}
    if index_type in _HNSW_TRAINED_AS:
        job["hnsw"] = {}
    elif index_type.startswith("IVF_"):
        job["model"] = read_index_model(latest, index_name)
    return _catch_up(latest, index_name, run_id, properties, job, verb="maintain")


#: The index kinds whose model an extension grows (IVF without a graph).
EXTENSIBLE = ("IVF_FLAT", "IVF_SQ", "IVF_PQ", "IVF_RQ")

#: Rows sampled from the indexed rows (their mean residual is all that is
#: needed of them: 4,096 rows put its standard error under 1%) and from
#: the new rows (the misfit ones train the new centroids).
EXTEND_REF_ROWS = 4096
EXTEND_SAMPLE_ROWS = 16384

#: An extension never leaves fewer rows than this per partition on
#: average: past it, the model has moved too far to patch, and the pass
#: asks health whether to retrain.
MIN_ROWS_PER_PARTITION = 64


@dataclass(frozen=True)
class ExtendStats:
    """What one model extension measured and did (maintain reports it)."""

    residual_ratio: float
    added: int
    capped: bool
    rebuilt_rows: int
    version: int


def _extend(ds: Dataset, index_name: str, properties: Optional[dict[str, str]] = None,
            threshold: Optional[float] = None) -> Optional[ExtendStats]:
    """Keep an IVF model fitting rows appended since its segments were
    merged, at the cost of those rows only.

    The segment holding the widest model (the most centroids; then the
    most rows) stands for the rows the model fits; segments over newer
    fragments only are the new rows. The kernel compares their residuals
    on bounded samples (``train.Extend``): when the new rows lie farther
    from their centroids than the indexed rows do (by ``threshold``,
    default 1.1), it trains centroids where they went. Those are appended
    to the model (every existing centroid, the PQ codebook, SQ bounds and
    RQ rotation kept), the new fragments are re-encoded with it into one
    segment, and that segment replaces the new segments in one commit. The
    other segments stay valid: their partitions are the first of the
    extended model, which merges them as they are.

    Returns None when there is nothing to measure (one segment, no newer
    segments, or a kind that is not extended), else what was measured.
    """
    segs = _list(ds, index_name, True)
    if len(segs) < 2 or not {s.index_type for s in segs} <= set(EXTENSIBLE) or len({s.index_type for s in segs}) != 1:
        return None
    base = max(segs, key=lambda s: (s.num_partitions or 0, s.num_rows or 0))
    newest = max(base.fragment_ids, default=-1)
    new = [s for s in segs if s is not base and s.fragment_ids and min(s.fragment_ids) > newest]
    if not new or not base.fragment_ids:
        return None
    new_frags = sorted({f for s in new for f in s.fragment_ids})
    rows = sum(int(s.num_rows or 0) for s in segs)
    req = {
        "index": index_name, "segment": base.uuid, "fitted_fragments": list(base.fragment_ids),
        "new_fragments": new_frags, "ref_rows": EXTEND_REF_ROWS, "new_rows": EXTEND_SAMPLE_ROWS,
        "options": {"threshold": threshold or 0, "seed": ds.version},
        "max_partitions": max(1, rows // MIN_ROWS_PER_PARTITION),
    }
    structs = {n: CStructs() for n in ("centroids", "codebook", "rotation")}
    out = json.loads(_ffi.run_operation(
        "ExtendIndexModel",
        (ds.uri, ds.options_json, ds.version, json.dumps(req), json.dumps({n: s.pair() for n, s in structs.items()})),
    ))
    arrays = {n: structs[n].import_array() for n in out.get("arrays") or {}}
    ext = out["extend"]
    ratio = float(ext["new_residual"]) / float(ext["ref_residual"]) if ext["ref_residual"] else 0.0
    added, capped = int(ext["added"]), bool(out.get("capped"))
    if added == 0 or capped:
        if capped:
            logger.warning("%s: new rows lie %.2fx farther from their centroids than indexed rows, but %d more centroids "
                           "would leave fewer than %d rows per partition: not extended", index_name, ratio, added,
                           MIN_ROWS_PER_PARTITION)
        return ExtendStats(ratio, 0, capped, 0, ds.version)
    model = IndexModel.from_spec(out, arrays, params=(("extended_from", base.uuid), ("added", added)))
    column = str(out["column"])
    seg = _build_segment(ds, column, str(base.index_type), new_frags, model, name=index_name)
    props = transaction_properties("maintain", "extend-" + model.content_hash[:16], properties,
                                   model=model.content_hash[:16], previous_partitions=base.num_partitions,
                                   partitions_added=added, residual_ratio=f"{ratio:.3f}")
    try:
        done = _commit(ds, index_name, column, [seg], [s.uuid for s in new], properties=props)
    except BaseException:
        try:
            remove_uncommitted(ds, [seg.uuid])
        except SegmergeError as exc:
            logger.warning("could not remove the extension segment %s: %s", seg.uuid, exc)
        raise
    logger.info("%s: new rows lay %.2fx farther from their centroids than indexed rows; %d centroids added "
                "(%d -> %d partitions), %d rows of %d segments re-encoded (version %d)", index_name, ratio, added,
                base.num_partitions or 0, model.num_partitions, seg.num_rows or 0, len(new), done.version)
    return ExtendStats(ratio, added, False, int(seg.num_rows or 0), done.version)
