"""Job bodies: what a pool worker runs for one task of a run (merge one
task, build one segment, rewrite one damaged segment).

Module-level functions, importable by name, so they pickle to spawned
processes, Ray workers and Dask workers; each takes a plain dict (the
dataset handle, the task and the options the driver already checked) and
returns plain data. The native kernel is loaded lazily, in the worker.
"""

from __future__ import annotations

import os
from typing import Any

from . import _ffi
from ._verify import repair_segment
from .api import _merge, as_dataset
from .types import IndexSegment, MergeTask

__all__ = ["merge_task", "build_task", "sample_task", "repair_task", "warm_build", "ping"]


def merge_task(job: dict[str, Any]) -> dict[str, Any]:
    """Merge one task; ``job`` holds the dataset (a picklable Dataset), the
    task (a MergeTask or its dict), the output uuid and merge options.
    Returns the merged segment as a dict."""
    # The driver's own encoding of a task it planned (plain data crosses
    # process boundaries): decoded without the checks of outside input.
    task = job["task"] if isinstance(job["task"], MergeTask) else MergeTask._from_kernel(job["task"])
    _failpoint("before", job, task)
    seg = _merge(
        as_dataset(job["dataset"]),
        task.segments,
        index_uuid=job.get("index_uuid"),
        requantize_sq=bool(job.get("requantize_sq", True)),
        window_rows=job.get("window_rows"),
        parallelism=job.get("parallelism"),
        hnsw_graph=job.get("hnsw_graph", "reuse"),
        memory_bytes=job.get("memory_bytes"),
    )
    _failpoint("after", job, task)
    return seg.to_dict()


def _failpoint(where: str, job: dict[str, Any], task: Any) -> None:
    """A test hook (the fault suite's worker kill): with
    LANCE_SEGMERGE_FAILPOINT=kill-worker:<level>:<task_id>:<before|after>,
    the worker running that task SIGKILLs itself at that point, as the OOM
    killer would."""
    spec = os.environ.get("LANCE_SEGMERGE_FAILPOINT", "")
    if spec and spec == f"kill-worker:{job.get('level')}:{task.task_id}:{where}":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def ping(_: Any = None) -> str:
    """Load the native kernel in a worker and return its version (to warm a
    pool up before timing, or to check a worker's installation)."""
    return str(_ffi.call("Version"))


def warm_build(_: Any = None) -> str:
    """Import the build path (numpy, pyarrow, the model and the native
    kernel) in a worker, so that a pool started early is ready when the
    build tasks arrive (create_index does this while it trains)."""
    from . import _build  # noqa: F401 - numpy and pyarrow: only build jobs need them

    return ping()


def build_task(job: dict[str, Any]) -> dict[str, Any]:
    """Build one segment over a group of fragments; ``job`` holds the
    dataset, column, index type, fragments, the (picklable) IndexModel, the
    index name, the output uuid and the build options (no model: a scalar
    index's segment; ``hnsw``, the graph parameters: an IVF_HNSW_* segment,
    which pylance builds). Returns the segment as a dict."""
    from ._build import _build_segment, build_scalar_segment  # numpy and pyarrow: only build jobs need them

    if job.get("hnsw") is not None:
        return _lance_build(job)
    if job.get("model") is None:
        return build_scalar_segment(
            as_dataset(job["dataset"]), job["column"], job["index_type"], job["fragment_ids"], name=job["name"],
            index_uuid=job.get("index_uuid"), window_rows=job.get("window_rows"), memory_bytes=job.get("memory_bytes"),
            params=job.get("params"),
        ).to_dict()
    seg = _build_segment(
        as_dataset(job["dataset"]),
        job["column"],
        job["index_type"],
        job["fragment_ids"],
        job["model"],
        name=job["name"],
        index_uuid=job.get("index_uuid"),
        window_rows=job.get("window_rows"),
        memory_bytes=job.get("memory_bytes"),
    )
    return seg.to_dict()


def _lance_build(job: dict[str, Any]) -> dict[str, Any]:
    """Build one IVF_HNSW_* segment with pylance's create_index_uncommitted
    over the job's fragments, with the job's model's IVF centroids (and PQ
    codebook), so that every segment of the run shares them."""
    import lance
    import numpy as np

    ds = as_dataset(job["dataset"])
    model = job["model"]
    kw: dict[str, Any] = {"metric": model.metric, "num_partitions": model.num_partitions,
                          "ivf_centroids": model.centroids, **job["hnsw"]}
    if model.codebook is not None:
        # pylance takes the codebook as (sub-vectors, 2^bits, sub-vector
        # dimension), which is the order of our flat values.
        kw["num_sub_vectors"] = model.num_sub_vectors
        kw["num_bits"] = model.num_bits
        kw["pq_codebook"] = np.asarray(model.codebook).reshape(model.num_sub_vectors, 1 << model.num_bits, -1)
    lds = lance.dataset(ds.uri, version=ds.version, storage_options=ds.storage_options or None)
    # replace=True: the segment is not committed, and the index it joins
    # exists already.
    idx = lds.create_index_uncommitted(job["column"], job["index_type"], name=job["name"], replace=True,
                                       fragment_ids=[int(f) for f in job["fragment_ids"]],
                                       index_uuid=job.get("index_uuid"), **kw)
    return IndexSegment.from_lance_index(idx, ds).to_dict()


def sample_task(job: dict[str, Any]) -> Any:
    """Draw one group of fragments' share of a training sample; ``job``
    holds the dataset, column, fragments, training parameters, the table's
    live rows and the group's seed. Returns a FixedSizeList<float32>
    array."""
    from ._build import sample_vectors

    return sample_vectors(as_dataset(job["dataset"]), job)


def repair_task(job: dict[str, Any]) -> dict[str, Any]:
    """Rewrite one damaged segment with its layout applied once and verify
    the rewrite; ``job`` holds the dataset, index name, segment uuid, the
    layout depth found, the output uuid and the verification's sample.
    Returns {"segment": ..., "report": ...} as plain dicts."""
    return repair_segment(
        as_dataset(job["dataset"]), job["index_name"], job["uuid"], int(job["depth"]),
        output_uuid=job["output_uuid"], sample_rows=job["sample_rows"], seed=job["seed"],
    )
