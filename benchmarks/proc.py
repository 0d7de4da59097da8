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


#: Prepended to a benchmark's child program: ``hwm()``, the process's peak RSS in bytes.
HWM_PRELUDE = r"""
def hwm():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM'):
            return int(line.split()[1]) * 1024
"""


def size_arg(text: str) -> int:
    """A byte count from the command line: ``100M``, ``1G``, ``64K`` or plain digits."""
    units = {"K": 10**3, "M": 10**6, "G": 10**9}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def available_memory() -> int:
    """MemAvailable in bytes (0 where /proc/meminfo has none)."""
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable"):
            return int(line.split()[1]) * 1024
    return 0


def run_child(program: str, args: list, root: str) -> dict:
    """Run ``program`` (Python source printing one JSON line last) in a fresh interpreter with
    ``root`` first on its path; its JSON, or ``{"error": <its last stderr line>}``."""
    import json
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cp = subprocess.run([sys.executable, "-c", program, *map(str, args)], capture_output=True, text=True, env=env)
    if cp.returncode != 0:
        return {"error": (cp.stderr.strip().splitlines() or [f"exit {cp.returncode}"])[-1]}
    return json.loads(cp.stdout.strip().splitlines()[-1])


def same_bytes(a: str, b: str) -> bool:
    """Whether two files hold the same bytes (read a block at a time)."""
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True


def cell(r: dict, key: str, scale: float, fmt: str) -> str:
    """A measured value scaled and formatted, else the run's error (or skip) text."""
    return format(r[key] / scale, fmt) if key in r else r.get("error", "-")


def plain_copy(trace: str, folder: str, name: str = "profile.json") -> str:
    """``trace`` (a ``.gz`` decompressed) written as ``folder/name``, as torch writes a profile:
    plain JSON. Returns the copy's path."""
    import gzip

    out = os.path.join(folder, name)
    with (gzip.open if trace.endswith(".gz") else open)(trace, "rb") as f, open(out, "wb") as g:
        g.write(f.read())
    return out
