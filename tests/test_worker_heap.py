"""The conversion worker's heap (``util.heap``; ``PERFETTO_GRAPH_ANN_WORKER_HEAP``): once set, memory the
process frees stays mapped (seen from outside glibc: the resident size after a free), nothing
changes where the C library is not glibc, and a bad value is refused before a worker starts.
The malloc settings are tried in child processes: this one keeps glibc's defaults."""
from __future__ import annotations

import json
import platform
import subprocess
import sys
import textwrap

import pytest

from perfetto_graph_ann.capture import background
from perfetto_graph_ann.errors import SettingError
from perfetto_graph_ann.util.heap import keep_freed_memory

_PROBE = textwrap.dedent("""
    import json, os, sys
    from perfetto_graph_ann.util.heap import keep_freed_memory
    page = os.sysconf("SC_PAGE_SIZE")
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page
    kept = keep_freed_memory() if sys.argv[1] == "keep" else None
    base = rss()
    blocks = [bytearray(1 << 20) for _ in range(64)]  # zero-filled: every page touched
    held = rss()
    del blocks
    print(json.dumps({"kept": kept, "held": held - base, "after": rss() - base}))
""")


def _probe(arm: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE, arm], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_freed_memory_stays_mapped_once_kept():
    """64 MiB of 1 MiB blocks, freed: glibc's defaults unmap them (each above its 128 kB mmap
    threshold), the kept heap still holds them."""
    default, kept = _probe("default"), _probe("keep")
    mib = 1 << 20
    assert default["held"] >= 60 * mib and kept["held"] >= 60 * mib
    assert default["after"] < 16 * mib, default
    assert kept["kept"] is True and kept["after"] >= 60 * mib, kept


class _Libc:
    def __init__(self, glibc: bool, result: int) -> None:
        self.calls = []
        if glibc:
            self.gnu_get_libc_version = lambda: b"2.36"
        self.mallopt = _Mallopt(self.calls, result)


class _Mallopt:
    def __init__(self, calls: list, result: int) -> None:
        self.calls, self.result = calls, result

    def __call__(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return self.result


def test_a_c_library_other_than_glibc_is_left_alone():
    libc = _Libc(glibc=False, result=1)
    assert keep_freed_memory(libc) is False and libc.calls == []


def test_the_two_settings_asked_for_and_a_refusal_reported():
    ok, refused = _Libc(glibc=True, result=1), _Libc(glibc=True, result=0)
    assert keep_freed_memory(ok) is True
    assert ok.calls == [(-3, 32 << 20), (-1, (1 << 31) - 1)]  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
    assert keep_freed_memory(refused) is False


def test_a_bad_value_is_refused_before_a_worker_starts(monkeypatch):
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_EXPORT_SPARE", "60")
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_WORKER_HEAP", "sometimes")
    before = background._spare
    with pytest.raises(SettingError, match="PERFETTO_GRAPH_ANN_WORKER_HEAP='sometimes'"):
        background.prepare_spare()
    assert background._spare is before  # no worker started
