"""Scope edges without driver calls: CUPTI's node-created callback counts each captured graph's nodes.

A scope edge needs the number of nodes its graph has at that moment (docs/design.md, "Scopes").
Asking the driver costs about as much as a captured launch (a count walks the graph; a marker
node is a node), which is what made a scope per module call expensive (BENCHMARKS.md, "module
scopes"). While a graph is captured, the compiled path subscribes a C callback to CUPTI's
resource callback ``GRAPHNODE_CREATED``, which the driver issues for every node it creates,
stream-captured launches included; the callback bumps the counter of the node's graph, and an
edge reads it (``_nodewatch.c``).

The subscription lasts only while annotated captures run: CUPTI allows one subscriber per
process on the drivers we run (13.0), and torch's profiler subscribes when it first starts and
keeps it; if it finds ours, CUPTI fails to initialise for it and the process's profiles have
no GPU activity, ever (seen on the H200: tests/gpu/RESULTS.md). So a profiler starting while
captures hold the subscription (``calibration.KINETO`` sees it prepare) first takes it back
(:meth:`NodeWatch.yield_to_profiler`): each capture in flight switches its edges to the driver,
which gives the same positions, and then the callback unsubscribes. Where CUPTI refuses (a
profiler ran already, another tool is attached), or with ``PERFETTO_GRAPH_ANN_NODE_WATCH=0``,
edges ask the driver as before. The session checks the count against the driver's at the
capture's end and refuses the scopes when they differ.

An initialised CUPTI stays in the process after the last unsubscription, and it makes every graph
launch cost several times more host time (2.6 -> 15 us a replay of a 64-kernel graph on the H200,
``benchmarks/gpu/probe_cupti_launch.py``). So CUPTI that this package initialised (the warm-up, a
subscription, the cupti backend's id calls, a calibration's activity session) is detached again with
``cuptiFinalize`` once nothing of ours has used it for ``PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS``
(:meth:`NodeWatch.idle`), from a driver API exit call site as CUPTI's documentation recommends
(``watch_detach`` in C); never once a profiler took CUPTI, while one is active, or while a capture
or calibration uses it. Unset, the delay is 1 s on CUDA drivers from 13.0, where it was checked on
the H200 (detach / re-initialise cycles with graphs alive; graph and node ids taken before a
detach still name the same nodes after it: tests/gpu/test_cupti_ids_gpu.py; torch.profiler
records after it), and off on older drivers: torch turns Kineto's own CUPTI teardown off under
CUDA graphs after crashes of the re-initialisation on CUDA 11 and 12.
"""
from __future__ import annotations

import atexit
import contextlib
import itertools
import threading
import time
from typing import Callable, Dict, Iterator, Optional, Tuple

from .. import settings
from . import fastpath

__all__ = ["DEFAULT_DETACH_S", "DETACH_FROM_DRIVER", "detach_delay_from_env", "DetachFunctions", "DRIVER_API_DOMAIN",
           "GRAPHNODE_CREATED", "NodeWatch", "RESOURCE_DOMAIN", "WATCH", "enabled_from_env"]

#: ``CUPTI_CB_DOMAIN_RESOURCE`` and ``CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED`` (cupti_callbacks.h)
RESOURCE_DOMAIN = 3
GRAPHNODE_CREATED = 13

#: ``CUPTI_CB_DOMAIN_DRIVER_API``: the detach runs at one of its exit call sites
DRIVER_API_DOMAIN = 1

#: (cuptiSubscribe, cuptiEnableCallback, cuptiUnsubscribe) addresses, from the backend
Functions = Tuple[int, int, int]
#: (cuptiSubscribe, cuptiEnableDomain, cuptiUnsubscribe, cuptiFinalize, cuCtxGetCurrent) addresses
DetachFunctions = Tuple[int, int, int, int, int]


def enabled_from_env() -> bool:
    """``PERFETTO_GRAPH_ANN_NODE_WATCH`` (a switch; default on)."""
    return settings.switch(settings.NODE_WATCH, fastpath.getenv)


#: The detach delay when ``PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS`` is unset, on drivers from
#: :data:`DETACH_FROM_DRIVER`: long enough that a runner capturing one graph per batch size
#: keeps CUPTI across its captures.
DEFAULT_DETACH_S = 1.0
#: ``cuDriverGetVersion`` from which the detach is on by default: 13.0 is where it was checked
#: (H200, driver 580: detach / re-initialise cycles with graphs alive, graph and node ids kept,
#: torch.profiler after it); torch reports crashes of CUPTI re-initialisation on CUDA 11 and 12.
DETACH_FROM_DRIVER = 13000


def detach_delay_from_env(driver: Optional[Callable[[], Optional[int]]] = None) -> Optional[float]:
    """``PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS`` in seconds; None: never detach. Unset: 1 s on CUDA
    drivers from 13.0 (``driver()``, default: the process's ``cuDriverGetVersion``), else never."""
    value = settings.raw(settings.DETACH_CUPTI_MS, fastpath.getenv)[1]
    if value is None or not value.strip():
        if driver is None:
            from .identity import cuda_driver_version as driver
        version = driver()
        return DEFAULT_DETACH_S if version is not None and version >= DETACH_FROM_DRIVER else None
    ms = settings.count_or_off(settings.DETACH_CUPTI_MS, fastpath.getenv)
    return None if ms is None else ms / 1000.0


class NodeWatch:
    """The process's one subscription, shared by the captures in flight (subscribed while any
    runs). ``refused``: CUPTI's result the last time it refused, for the report."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders: Dict[int, Callable[[], None]] = {}  # token -> what gives the watch up
        self._tokens = itertools.count(1)
        self._functions: Optional[Functions] = None
        self.refused: Optional[int] = None
        #: a profiler took CUPTI: no subscription from then on (CUPTI would refuse it anyway once
        #: torch's profiler subscribed; asking could still win a race against its start)
        self.yielded = False
        #: CUPTI initialised by :meth:`warm_up` (its first subscription done, off the capture)
        self.warmed = False
        #: CUPTI initialised by this package and not detached since
        self.attached = False
        self.detaches = 0  #: times :meth:`detach` detached CUPTI
        self.detach_refused: Optional[int] = None  #: the result of the last detach that failed
        #: True while a profiler may be using CUPTI (set by :mod:`.calibration`: it knows torch's)
        self.profiler_active: Callable[[], bool] = lambda: False
        self._busy = 0  # calibration activity sessions in progress (:meth:`using`)
        self._last_use = 0.0  # time.monotonic() of the last use by this package
        self._detach_fns: Optional[DetachFunctions] = None
        self._timer: Optional[threading.Timer] = None
        self._due = 0.0  # time.monotonic() when the pending timer fires
        self._delay = 0.0  # the detach's delay after the last use, as last configured
        self._closing = False  # the interpreter exits: no detach starts any more

    def acquire(self, functions: Functions, give_up: Callable[[], None]) -> Optional[int]:
        """Subscribe if no capture holds the subscription yet. A token for :meth:`release`, or
        None where CUPTI refuses. ``give_up()`` stops the holder's use of the count (then it
        releases), called when a profiler needs CUPTI."""
        fast = fastpath.module()
        if fast is None:
            return None
        with self._lock:
            if self.yielded:
                return None
            if not self._holders:
                rc = fast.watch_subscribe(functions[0], functions[1], RESOURCE_DOMAIN, GRAPHNODE_CREATED)
                if rc != 0:
                    fast.watch_unsubscribe(functions[2])  # a subscription whose enable failed
                    self.refused = rc
                    return None
                self._functions = functions
                self.attached = True
            self._last_use = time.monotonic()
            token = next(self._tokens)
            self._holders[token] = give_up
            return token

    def warm_up(self, functions: Functions) -> bool:
        """Subscribe and unsubscribe at once, outside any capture: CUPTI's first subscription in
        a process initialises it (~20 ms on the H200), which a capture's first scope edge would
        otherwise pay. Nothing is left subscribed; a profiler starting meanwhile waits for the
        lock (:meth:`yield_to_profiler`) and finds CUPTI free. True once CUPTI was initialised so."""
        fast = fastpath.module()
        if fast is None:
            return False
        with self._lock:
            if self.warmed or self.yielded or self._holders:
                return self.warmed
            rc = fast.watch_subscribe(functions[0], functions[1], RESOURCE_DOMAIN, GRAPHNODE_CREATED)
            fast.watch_unsubscribe(functions[2])
            if rc != 0:
                self.refused = rc
                return False
            self.warmed = self.attached = True
            self._last_use = time.monotonic()
            return True

    def release(self, token: int) -> None:
        """One capture done; unsubscribe after the last, so that a profiler can subscribe."""
        fast = fastpath.module()
        with self._lock:
            if self._holders.pop(token, None) is None:
                return
            self._last_use = time.monotonic()
            if not self._holders and fast is not None and self._functions is not None:
                fast.watch_unsubscribe(self._functions[2])
                self._functions = None

    def yield_to_profiler(self) -> None:
        """A profiler is about to subscribe: every holder gives the count up, which ends the
        subscription, and no capture subscribes again in this process."""
        with self._lock:
            self.yielded = True
            give_ups = list(self._holders.values())
            self._cancel_timer()
        for give_up in give_ups:
            give_up()

    @property
    def users(self) -> int:
        return len(self._holders)

    @contextlib.contextmanager
    def using(self) -> Iterator[None]:
        """Held around a calibration's CUPTI activity session: it initialises CUPTI where nothing
        did, and no detach may run while it is open."""
        with self._lock:
            self._busy += 1
            self.attached = True
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1
                self._last_use = time.monotonic()
            self.idle()

    def hold(self) -> None:
        """A capture of ours runs: no detach until :meth:`unhold`. A capture that opens no scope
        holds no subscription, yet its marker ids and the graph's ids at its end ask CUPTI; a
        detach under it would finalize CUPTI in the middle of the capture's driver calls."""
        with self._lock:
            self._busy += 1

    def unhold(self) -> None:
        """The capture :meth:`hold` was called for ended (annotated or not): the delay starts again."""
        with self._lock:
            self._busy = max(0, self._busy - 1)
            self._last_use = time.monotonic()
        self.idle()

    def idle(self, functions: Optional[DetachFunctions] = None) -> None:
        """A capture or calibration of ours is done with CUPTI: detach it (:meth:`detach`) once
        nothing used it for the configured delay. ``functions``: the backend's
        ``cupti_detach_functions()``, given at a capture's end by a backend that reads its ids
        from CUPTI, which initialises it (kept for later calls that give none)."""
        delay = detach_delay_from_env()
        with self._lock:
            if functions is not None:
                self._detach_fns = functions
                self.attached = True
                self._last_use = time.monotonic()
            if delay is None or self._detach_fns is None or not self.attached or self.yielded or self._closing:
                return
            self._start_timer(delay)

    def close(self) -> None:
        """At the interpreter's exit: no detach starts, and one in flight is waited for (under
        the lock), so that none runs while the process tears CUDA down."""
        with self._lock:
            self._closing = True
            self._cancel_timer()

    def _start_timer(self, delay: float) -> None:
        """Detach once nothing used CUPTI for ``delay`` seconds. A timer already pending that
        fires no later than that is kept: when it fires, it waits out what is left of the delay
        after the last use (:meth:`_on_timer`). A new timer's thread costs ~0.15 ms to start, and
        each capture's end asks twice (its table read, then its hold released): on the captures'
        path, that was a new thread each time."""
        self._delay = delay
        if self._timer is not None and self._due <= time.monotonic() + delay:
            return
        self._arm(delay)

    def _arm(self, seconds: float) -> None:
        self._cancel_timer()
        self._due = time.monotonic() + seconds
        self._timer = threading.Timer(seconds, self._on_timer)
        self._timer.daemon = True
        self._timer.name = "perfetto-graph-ann-detach-cupti"
        self._timer.start()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        with self._lock:
            if self._timer is not threading.current_thread():  # replaced or cancelled after it fired
                return
            self._timer = None
            left = self._last_use + self._delay - time.monotonic()
            if left > 0 and not self._holders and not self._busy:
                self._arm(left)
                return
        self.detach()

    def detach(self) -> bool:
        """Detach CUPTI now where this package initialised it and nothing uses it: no capture
        holds the watch, no calibration runs, no profiler took CUPTI or is active. True when
        detached (a later subscription initialises it again, ~11 ms on the H200)."""
        fast = fastpath.module()
        with self._lock:
            fns = self._detach_fns
            if fast is None or fns is None or not self.attached or self.yielded or self._holders \
                    or self._busy or self._closing or self.profiler_active():
                return False
            rc = fast.watch_detach(*fns, DRIVER_API_DOMAIN)
            if rc != 0:
                self.detach_refused = rc
                self.attached = False  # not ours to retry: someone else holds CUPTI, or no exit site came
                return False
            self.attached = self.warmed = False
            self.detaches += 1
            return True


WATCH = NodeWatch()
atexit.register(WATCH.close)
