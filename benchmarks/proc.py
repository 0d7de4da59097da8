"""Process measurements shared by the benchmarks (Linux /proc)."""
from __future__ import annotations

import os


def cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of process ``pid`` (all its threads), from /proc; NaN elsewhere.

    The engines run in child processes; their own CPU time is steadier than wall time on a
    shared machine.
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return float("nan")
