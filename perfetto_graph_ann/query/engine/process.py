"""Engine process lifetime: own process group, registry of live engines, atexit teardown.

Every engine process we start leads its own process group (so Ctrl-C in a terminal reaches
only Python, which then tears the group down) and is listed here until it is reaped, so an
interpreter exit -- normal, by exception or by Ctrl-C -- kills whatever is still running.
The portable host also exits on its own when its stdin closes, which covers the parent
being killed with SIGKILL.
"""
from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
from typing import Dict, Optional

__all__ = ["describe_exit", "kill", "kill_all", "live_pids", "popen_kwargs", "track"]

_lock = threading.Lock()
_live: Dict[int, subprocess.Popen] = {}


def track(proc: subprocess.Popen) -> None:
    """Remember ``proc`` so :func:`kill_all` reaches it at interpreter exit."""
    with _lock:
        _live[proc.pid] = proc


def kill(proc: Optional[subprocess.Popen]) -> Optional[int]:
    """Kill ``proc`` and its whole process group, reap it, and return its exit status."""
    if proc is None:
        return None
    with _lock:
        _live.pop(proc.pid, None)
    if proc.poll() is None:
        # imported here: the perfetto.trace_processor package imports pandas (~0.4 s), which an
        # engine's start overlaps with Node's (portable.py)
        from perfetto.trace_processor.process_tree import terminate_process_tree

        terminate_process_tree(proc)  # SIGKILL to the group, then wait()
    else:
        # The leader is gone; make sure nothing it started survives it.
        _kill_group(proc.pid)
    return proc.returncode


def _kill_group(pgid: int) -> None:
    if sys.platform == "win32":
        return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def live_pids() -> list:
    """Pids of the engine processes still running (for tests and diagnostics)."""
    with _lock:
        return [pid for pid, p in _live.items() if p.poll() is None]


@atexit.register
def kill_all() -> None:
    """Kill every engine process still listed (runs at interpreter exit)."""
    with _lock:
        procs = list(_live.values())
    for proc in procs:
        kill(proc)


def popen_kwargs() -> dict:
    """``subprocess.Popen`` arguments that put the child in its own process group."""
    if sys.platform == "win32":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def describe_exit(returncode: Optional[int]) -> str:
    """'exit status 70' / 'killed by SIGKILL' / 'still running'."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"
