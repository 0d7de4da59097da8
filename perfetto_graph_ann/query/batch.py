"""``query_many``: the same SQL over many traces (one per rank), as one DataFrame.

Local native engine: the ``perfetto`` package's ``BatchTraceProcessor`` (one shell per
trace, loaded and queried in parallel). Everything else runs one task per trace
(:mod:`.tasks`) in local threads, a ``concurrent.futures`` executor or Ray
(:mod:`.executors`): at most ``max_workers`` engines at a time locally (each portable
engine is one Node process with its own WebAssembly heap, so memory, not cores, is
usually the limit).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import pandas as pd

from ..errors import EngineError, EngineNotFoundError
from .engine import EngineConfig
from .engine.resolve import choose_engine
from .executors import RayOptions, run_tasks
from .session import exact_frame
from .tasks import Converter, FileInput, TraceTask, to_frame

__all__ = ["annotation_inputs", "PathArg", "query_many"]

PathArg = Union[str, "os.PathLike[str]"]


def query_many(
    traces: Sequence[PathArg],
    sql: Union[str, Mapping[str, str]],
    engine: str = "auto",
    config: Optional[EngineConfig] = None,
    max_workers: Optional[int] = None,
    progress: Optional[bool] = None,
    executor: Any = "local",
    annotations: Optional[Sequence[Any]] = None,
    ray_address: Optional[str] = None,
    ray_options: Optional[RayOptions] = None,
    *,
    converter: Optional[Converter] = None,
) -> Union[pd.DataFrame, Dict[str, pd.DataFrame]]:
    """Run ``sql`` on every trace; one DataFrame, a ``trace`` column (the path) first.

    Args:
        traces: Perfetto traces, or torch.profiler JSON traces (converted on the worker).
        sql: one query, or a mapping name -> SQL (each trace is loaded once and every query
            runs on it).
        engine, config: as for :func:`~perfetto_graph_ann.query.session.open_trace`.
        max_workers: the most engines (``"local"``) or tasks in flight at once.
        progress: a tqdm bar over the traces on stderr (``None``: only on a terminal).
        executor: ``"local"`` (threads on this machine), ``"ray"`` (one Ray task per trace:
            ``ray.init(address=ray_address)``, else ``$RAY_ADDRESS``, else a new local
            instance; see :class:`RayOptions`), or any ``concurrent.futures.Executor``.
        annotations: per trace, a sidecar path, a list of them, or None; a trace with
            annotations (a torch.profiler JSON) is joined and converted to ``.pftrace`` on
            the worker (by ``converter``, see :class:`~.tasks.TraceTask`;
            ``perfetto_graph_ann.query_many`` gives the pipeline's) before it is loaded.
        ray_address, ray_options: for ``executor="ray"``.
        converter: the worker's conversion (internal: the package's own gives it).

    Returns:
        One DataFrame (rows in the order of ``traces``), or for a mapping ``sql`` a dict
        name -> DataFrame.

    Raises:
        GraphAnnError: the first failure (bad trace, SQL error, engine death, a Ray task
            whose worker died more than ``max_retries`` times), naming its trace; the other
            tasks are stopped.
    """
    config = (config or EngineConfig()).with_engine(engine)
    paths = [Path(t) for t in traces]
    queries = {"": sql} if isinstance(sql, str) else dict(sql)
    if not paths:
        empty = pd.DataFrame({"trace": pd.Series([], dtype=object)})
        return empty if isinstance(sql, str) else {name: empty.copy() for name in queries}
    sidecars = annotation_inputs(annotations, len(paths))
    if executor == "local" and isinstance(sql, str) and not any(sidecars):
        try:
            choice = choose_engine(config)
        except EngineNotFoundError as e:
            raise EngineNotFoundError(f"{paths[0]}: {e}") from None
        if choice.kind == "native":
            workers = max_workers or min(len(paths), os.cpu_count() or 1)
            return _with_trace_column(paths, _native_batch(paths, sql, config, choice.shell, workers))
    tasks = [TraceTask(i, FileInput.of(p), queries, config, annotations=sidecars[i], arrow=executor != "local",
                       converter=converter)
             for i, p in enumerate(paths)]
    ray_opts = ray_options or RayOptions()
    if ray_address is not None:
        ray_opts = dataclasses.replace(ray_opts, address=ray_address)
    results = run_tasks(tasks, executor, max_workers, progress, ray_opts, desc="query_many")
    frames = {name: _with_trace_column(paths, [to_frame(r.tables[name]) for r in results]) for name in queries}
    return frames[""] if isinstance(sql, str) else frames


def annotation_inputs(annotations: Optional[Sequence[Any]], n: int) -> List[Tuple[FileInput, ...]]:
    """Per trace, the sidecars to join it with: ``annotations`` is None, or one entry per
    trace (None, a path, or a list of paths)."""
    if annotations is None:
        return [()] * n
    if isinstance(annotations, (str, os.PathLike)):
        raise ValueError("annotations must be one entry per trace (a path, a list of paths or None), not one path")
    if len(annotations) != n:
        raise ValueError(f"{len(annotations)} annotation entries for {n} traces")
    out = []
    for entry in annotations:
        if entry is None:
            out.append(())
        elif isinstance(entry, (str, os.PathLike)):
            out.append((FileInput.of(entry),))
        else:
            out.append(tuple(FileInput.of(p) for p in entry))
    return out


def _with_trace_column(paths: List[Path], frames: List[pd.DataFrame]) -> pd.DataFrame:
    out = []
    for path, df in zip(paths, frames):
        df = df.copy()
        df.insert(0, "trace", str(path))
        out.append(df)
    return pd.concat(out, ignore_index=True)


def _native_batch(paths: List[Path], sql: str, config: EngineConfig, shell: str, workers: int) -> List[pd.DataFrame]:
    from perfetto.batch_trace_processor.api import BatchTraceProcessor, BatchTraceProcessorConfig
    from perfetto.common.exceptions import PerfettoException

    from .engine.native import removing_status_downloads, tp_config

    btp_config = BatchTraceProcessorConfig(tp_config=tp_config(config, shell))
    promised = None
    if config.check_complete:  # what Engine.load checks, for the traces the batch loads itself
        from .engine.complete import check_scan, scan_file

        promised = [check_scan(p, scan_file(p)) for p in paths]
    try:
        with removing_status_downloads(), BatchTraceProcessor([str(p) for p in paths], btp_config) as btp:
            if promised is not None:
                _check_batch(paths, promised, btp)
            return [exact_frame(df) for df in btp.query(sql)]
    except PerfettoException as e:
        raise EngineError(f"{paths[0]} (and {len(paths) - 1} more): native batch query failed: {e}") from e


def _check_batch(paths: List[Path], promised, btp) -> None:
    """:func:`.engine.complete.check_counts` for every trace of a batch processor."""
    from .engine.complete import LOSS_STATS_SQL, check_counts

    counts = btp.query("SELECT COUNT(*) AS n FROM slice")
    losses = btp.query(LOSS_STATS_SQL)
    for path, slices, count, loss in zip(paths, promised, counts, losses):
        rows = [tuple(r) for r in loss[["name", "idx", "severity", "value"]].itertuples(index=False)]
        rows = [tuple(None if v is None or (isinstance(v, float) and v != v) else v for v in r)
                for r in rows]  # pandas NaN -> None (idx)
        check_counts(path, slices, int(count["n"].iloc[0]), rows)
