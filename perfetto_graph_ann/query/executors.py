"""Running :class:`~.tasks.TraceTask` s: in local threads, on any ``concurrent.futures``
executor, or as Ray tasks on a cluster.

Every path gives the outcomes in task order, stops at the first failure (raised naming its
trace) and shows one tqdm bar over the traces on stderr when asked (``progress=None``: only
when stderr is a terminal). The number of engines running at once is bounded: local
threads by ``max_workers``; a ``concurrent.futures`` executor by its own workers and
``max_workers`` tasks in flight; Ray by the resources each task asks for (one CPU, plus
``memory_per_engine`` bytes of Ray's ``memory`` resource, which is how a node's memory,
not its cores, bounds the portable engines on it) and ``max_workers`` tasks in flight.
"""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import os
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence

from .. import settings
from ..errors import EngineError
from .tasks import FileInput, NotVisible, TaskFailure, TaskResult, TraceTask, raise_failure, run_trace_task

__all__ = ["DEFAULT_RAY_RETRIES", "import_ray", "progress_bar", "RAY_INSTALL", "RayOptions", "run_tasks"]

#: Ray task retries after a worker process dies (or is killed for memory) mid-task.
DEFAULT_RAY_RETRIES = 3
RAY_INSTALL = "pip install 'perfetto-graph-ann[cluster]'"


@dataclasses.dataclass
class RayOptions:
    """How ``executor="ray"`` reaches and uses a cluster.

    ``address``: ``ray.init(address=...)`` (``"auto"``, ``"ray://head:10001"``, ...);
    ``None``: the ``RAY_ADDRESS`` environment variable, else a new local Ray instance.
    Ray already initialised in this process is used as it is (and left running).
    ``ship``: ``"auto"`` sends a trace's bytes through the object store only when the
    worker that got it cannot see its path (same size); ``"path"`` never does;
    ``"store"`` always does. ``max_retries``: retries of a task whose worker died.
    ``memory_per_engine``: bytes of Ray's ``memory`` resource each task reserves (bounds
    the engines per node by memory). ``init_kwargs``: more ``ray.init`` arguments (e.g.
    ``runtime_env``) when this call starts or joins the cluster.
    """

    address: Optional[str] = None
    ship: str = "auto"
    max_retries: int = DEFAULT_RAY_RETRIES
    memory_per_engine: Optional[int] = None
    init_kwargs: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.ship not in ("auto", "path", "store"):
            raise ValueError(f"ship must be 'auto', 'path' or 'store', not {self.ship!r}")
        if self.max_retries < 0:
            raise ValueError("max_retries must be 0 or more")


def progress_bar(total: int, progress: Optional[bool], desc: str):
    """A tqdm bar on stderr over ``total`` traces; ``progress=None``: only on a terminal."""
    from tqdm import tqdm

    disable = (not progress) if progress is not None else not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty())
    return tqdm(total=total, unit="trace", desc=desc, file=sys.stderr, disable=disable)


def run_tasks(tasks: Sequence[TraceTask], executor: Any = "local", max_workers: Optional[int] = None,
              progress: Optional[bool] = None, ray: Optional[RayOptions] = None, desc: str = "traces") -> List[TaskResult]:
    """Run ``tasks``; their results in task order. The first failure is raised (naming its
    trace) after the tasks still running are stopped or cancelled."""
    if not tasks:
        return []
    bar = progress_bar(len(tasks), progress, desc)
    try:
        if isinstance(executor, str) and executor == "local":
            workers = max_workers or min(len(tasks), os.cpu_count() or 1)
            return _run_local(tasks, workers, bar.update)
        if isinstance(executor, str) and executor == "ray":
            return _run_ray(tasks, ray or RayOptions(), max_workers, bar.update)
        if isinstance(executor, cf.Executor):
            return _run_executor(tasks, executor, max_workers, bar.update)
        raise ValueError(f"executor must be 'local', 'ray' or a concurrent.futures.Executor, not {executor!r}")
    finally:
        bar.close()


def _unwrap(outcome: Any) -> TaskResult:
    if isinstance(outcome, TaskFailure):
        raise_failure(outcome)
    if isinstance(outcome, NotVisible):
        raise EngineError(f"{outcome.paths[0]}: not readable at this path on the machine that ran it "
                          "(use shared storage, or executor='ray' with ship='auto' or 'store')")
    return outcome


# ---- local threads -------------------------------------------------------------------------------
class _Tracker:
    """The engines one local batch started, so a failure or Ctrl-C stops exactly those."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: set = set()
        self.cancelled = False

    def add(self, engine) -> None:
        with self.lock:
            if self.cancelled:
                raise cf.CancelledError()
            self.live.add(engine)

    def discard(self, engine) -> None:
        with self.lock:
            self.live.discard(engine)

    def stop_all(self) -> None:
        with self.lock:
            self.cancelled = True
            live = list(self.live)
        for engine in live:
            engine.close()


def _run_local(tasks: Sequence[TraceTask], workers: int, tick: Callable[[int], Any]) -> List[TaskResult]:
    results: List[Optional[TaskResult]] = [None] * len(tasks)
    tracker = _Tracker()
    futures: Dict[cf.Future, int] = {}
    pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pga-query")
    try:
        futures = {pool.submit(run_trace_task, t, tracker): i for i, t in enumerate(tasks)}
        for fut in cf.as_completed(futures):
            results[futures[fut]] = _unwrap(fut.result())
            tick(1)
    except BaseException:
        for fut in futures:
            fut.cancel()
        tracker.stop_all()  # engines still running in worker threads: their reads fail fast
        raise
    finally:
        pool.shutdown(wait=True)
    return results  # type: ignore[return-value]


# ---- any concurrent.futures executor ---------------------------------------------------------------
def _run_executor(tasks: Sequence[TraceTask], pool: cf.Executor, max_in_flight: Optional[int],
                  tick: Callable[[int], Any]) -> List[TaskResult]:
    """Submit at most ``max_in_flight`` tasks at a time (all when None) to ``pool``; the
    caller owns the executor (it is not shut down here)."""
    results: List[Optional[TaskResult]] = [None] * len(tasks)
    pending = list(enumerate(tasks))[::-1]
    running: Dict[cf.Future, int] = {}
    limit = max_in_flight or len(tasks)
    try:
        while pending or running:
            while pending and len(running) < limit:
                i, t = pending.pop()
                running[pool.submit(run_trace_task, t)] = i
            done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                i = running.pop(fut)
                try:
                    outcome = fut.result()
                except cf.process.BrokenProcessPool as e:
                    raise EngineError(f"{tasks[i].trace.path}: the executor's worker process died ({e})") from e
                results[i] = _unwrap(outcome)
                tick(1)
    except BaseException:
        for fut in running:
            fut.cancel()
        raise
    return results  # type: ignore[return-value]


# ---- Ray ----------------------------------------------------------------------------------------
def import_ray():
    """The ``ray`` module, or an error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise EngineError(f"executor='ray' needs Ray: {RAY_INSTALL}") from None
    return ray


def _ship(ray, f: FileInput) -> FileInput:
    """``f`` with its bytes put in Ray's object store (a reference nested in the task, so
    Ray does not copy the bytes into every retry's arguments)."""
    try:
        with open(f.path, "rb") as src:
            data = src.read()
    except OSError as e:
        from ..errors import InputError

        raise InputError(f.path, f"cannot be read to send to the cluster: {e.strerror or e}") from None
    return dataclasses.replace(f, data=ray.put(data))


def _run_ray(tasks: Sequence[TraceTask], opts: RayOptions, max_in_flight: Optional[int],
             tick: Callable[[int], Any]) -> List[TaskResult]:
    ray = import_ray()
    started = False
    if not ray.is_initialized():
        address = opts.address or settings.text(settings.RAY_ADDRESS)
        # a new local instance (loopback only) without the dashboard and worker logs; joining a cluster
        # (where Ray refuses most start-up options) passes only what the caller gave
        kwargs = dict(opts.init_kwargs) if address else {"include_dashboard": False, "log_to_driver": False,
                                                         "_node_ip_address": "127.0.0.1", **opts.init_kwargs}
        try:
            ray.init(address=address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise EngineError(f"cannot start or reach the Ray cluster at {address or '(a new local instance)'}: {e}") from e
        started = True
    try:
        return _ray_loop(ray, tasks, opts, max_in_flight, tick)
    finally:
        if started:
            ray.shutdown()


def _ray_loop(ray, tasks: Sequence[TraceTask], opts: RayOptions, max_in_flight: Optional[int],
              tick: Callable[[int], Any]) -> List[TaskResult]:
    options: Dict[str, Any] = {"max_retries": opts.max_retries, "num_cpus": 1}
    if opts.memory_per_engine:
        options["memory"] = int(opts.memory_per_engine)
    remote = ray.remote(run_trace_task).options(**options)
    if max_in_flight is None:
        max_in_flight = max(1, 2 * int(ray.cluster_resources().get("CPU", 1)))
    results: List[Optional[TaskResult]] = [None] * len(tasks)
    pending = list(enumerate(tasks))[::-1]
    running: Dict[Any, int] = {}

    def submit(i: int, task: TraceTask, ship: bool) -> None:
        if ship:
            task = dataclasses.replace(task, trace=_ship(ray, task.trace),
                                       annotations=tuple(_ship(ray, f) for f in task.annotations))
        running[remote.remote(task)] = i

    try:
        while pending or running:
            while pending and len(running) < max_in_flight:
                i, t = pending.pop()
                submit(i, t, opts.ship == "store")
            done, _ = ray.wait(list(running), num_returns=1)
            for ref in done:
                i = running.pop(ref)
                try:
                    outcome = ray.get(ref)
                except ray.exceptions.RayError as e:
                    raise EngineError(f"{tasks[i].trace.path}: the Ray task failed after {opts.max_retries} "
                                      f"retries: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}") from e
                if isinstance(outcome, NotVisible) and opts.ship == "auto":
                    submit(i, tasks[i], True)
                    continue
                results[i] = _unwrap(outcome)
                tick(1)
    except BaseException:
        for ref in running:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - best effort: the task may have finished meanwhile
                pass
        raise
    return results  # type: ignore[return-value]
