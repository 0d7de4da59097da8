"""Where libcupti is: a leaf module, read by the backends and by :mod:`.activity` alike."""
from __future__ import annotations

import contextlib
import glob
import os
import sys
from typing import Optional

__all__ = ["find_libcupti"]


def find_libcupti() -> Optional[str]:
    """libcupti already loaded by this process (torch's Kineto), else one from the nvidia wheels."""
    with contextlib.suppress(OSError):
        with open("/proc/self/maps") as f:
            for line in f:
                if "libcupti.so" in line:
                    return line.split()[-1]
    for d in sys.path:
        for pattern in ("nvidia/*/lib/libcupti.so*", "nvidia/cu*/lib/libcupti.so*"):
            hits = sorted(glob.glob(os.path.join(d, pattern)))
            if hits:
                return hits[0]
    hits = sorted(glob.glob("/usr/local/cuda*/extras/CUPTI/lib64/libcupti.so*"))
    return hits[0] if hits else None
