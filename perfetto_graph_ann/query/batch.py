"""``query_many``: the same SQL over many traces (one per rank), as one DataFrame.

Native engine: the ``perfetto`` package's ``BatchTraceProcessor`` (one shell per trace,
loaded and queried in parallel). Portable engine: parallel portable sessions, at most
``max_workers`` at a time (each is one Node process with its own WebAssembly heap, so
memory, not cores, is usually the limit).
"""
from __future__ import annotations

import concurrent.futures as cf
import os
import threading
from pathlib import Path
from typing import List, Optional, Sequence, Union

import pandas as pd

from ..errors import EngineError, EngineNotFoundError
from .engine import EngineConfig, create_engine, prepare_engine
from .engine.resolve import choose_engine
from .session import exact_frame

PathArg = Union[str, "os.PathLike[str]"]


def query_many(
    traces: Sequence[PathArg],
    sql: str,
    engine: str = "auto",
    config: Optional[EngineConfig] = None,
    max_workers: Optional[int] = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Run ``sql`` on every trace; one DataFrame, a ``trace`` column (the path) first.

    Rows keep the order of ``traces``. The first failure (bad trace, SQL error, engine
    death) is raised, naming its trace, and every engine is stopped.
    """
    config = (config or EngineConfig()).with_engine(engine)
    paths = [Path(t) for t in traces]
    if not paths:
        return pd.DataFrame({"trace": pd.Series([], dtype=object)})
    try:
        choice = choose_engine(config)
    except EngineNotFoundError as e:
        raise EngineNotFoundError(f"{paths[0]}: {e}") from None
    workers = max_workers or min(len(paths), os.cpu_count() or 1)
    if choice.kind == "native":
        frames = _native_batch(paths, sql, config, choice.shell, workers)
    else:
        frames = _parallel_sessions(paths, sql, config, choice, workers, progress)
    out = []
    for path, df in zip(paths, frames):
        df = df.copy()
        df.insert(0, "trace", str(path))
        out.append(df)
    return pd.concat(out, ignore_index=True)


class _Engines:
    """The engines one batch started, so a failure or Ctrl-C stops exactly those."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: List = []
        self.cancelled = False

    def run(self, path: Path, sql: str, config: EngineConfig, choice) -> pd.DataFrame:
        if self.cancelled:
            raise cf.CancelledError()
        eng = create_engine(path, config, choice=choice)
        with self.lock:
            self.live.append(eng)
            cancelled = self.cancelled
        try:
            if cancelled:
                raise cf.CancelledError()
            prepare_engine(eng)
            return exact_frame(eng.query(sql).as_pandas_dataframe())
        finally:
            eng.close()

    def stop_all(self) -> None:
        with self.lock:
            self.cancelled = True
            live = list(self.live)
        for eng in live:
            eng.close()


def _parallel_sessions(paths: List[Path], sql: str, config: EngineConfig, choice, workers: int, progress: bool) -> List[pd.DataFrame]:
    results: List[Optional[pd.DataFrame]] = [None] * len(paths)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(paths), unit="trace", desc="query_many")
    engines = _Engines()
    futures = {}
    pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pga-query")
    try:
        futures = {pool.submit(engines.run, p, sql, config, choice): i for i, p in enumerate(paths)}
        for fut in cf.as_completed(futures):
            results[futures[fut]] = fut.result()  # re-raises the first failure
            if bar is not None:
                bar.update(1)
    except BaseException:
        for fut in futures:
            fut.cancel()
        # Stop this batch's engines still running in worker threads (their reads fail fast).
        engines.stop_all()
        raise
    finally:
        pool.shutdown(wait=True)
        if bar is not None:
            bar.close()
    return results  # type: ignore[return-value]


def _native_batch(paths: List[Path], sql: str, config: EngineConfig, shell: str, workers: int) -> List[pd.DataFrame]:
    from perfetto.batch_trace_processor.api import BatchTraceProcessor, BatchTraceProcessorConfig
    from perfetto.common.exceptions import PerfettoException

    from .engine.native import removing_status_downloads, tp_config

    btp_config = BatchTraceProcessorConfig(tp_config=tp_config(config, shell))
    try:
        with removing_status_downloads(), BatchTraceProcessor([str(p) for p in paths], btp_config) as btp:
            return [exact_frame(df) for df in btp.query(sql)]
    except PerfettoException as e:
        raise EngineError(f"{paths[0]} (and {len(paths) - 1} more): native batch query failed: {e}") from e
