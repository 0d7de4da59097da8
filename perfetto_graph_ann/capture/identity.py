"""The identity of the capturing process (:class:`CaptureIdentity`), for sidecar version 2.

:func:`process_identity` is torch-free (host, pid, process start time). :func:`capture_identity`
adds what torch and the driver know (device UUIDs and names, torch and driver versions),
without side effects on the program: it never imports torch, never initialises CUDA (only a
process that already did is asked about devices) and never fails: anything it cannot read
stays None.
"""
from __future__ import annotations

import ctypes
import os
import socket
import sys
import threading
import types
from typing import Dict, Optional, Tuple

from ..annotations.model import CaptureIdentity

__all__ = ["capture_identity", "cuda_driver_version", "process_identity"]


def _process_start_ns(pid: int) -> Optional[int]:
    """Unix time (ns) when ``pid`` started, from ``/proc``; None where there is no ``/proc``.

    ``/proc/<pid>/stat`` field 22 is the start in clock ticks after boot; ``/proc/stat``
    ``btime`` is the boot time in whole seconds, so the result is about 1 s accurate.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        with open("/proc/stat", "rb") as f:
            btime = next(int(line.split()[1]) for line in f.read().decode("ascii", "replace").splitlines()
                         if line.startswith("btime "))
        ticks = int(stat[stat.rindex(")") + 2:].split()[19])  # fields after "(comm)": state is field 3
        hz = os.sysconf("SC_CLK_TCK")
        return btime * 1_000_000_000 + ticks * 1_000_000_000 // hz
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def process_identity() -> CaptureIdentity:
    """Host name, pid and start time of this process; no torch, no CUDA."""
    pid = os.getpid()
    try:
        host: Optional[str] = socket.gethostname() or None
    except OSError:
        host = None
    return CaptureIdentity(host=host, pid=pid, process_start_ns=_process_start_ns(pid))


def _cuda_driver_version() -> Optional[int]:
    """``cuDriverGetVersion`` (e.g. 13000) through the driver library; None without it."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int(0)
        return v.value if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value > 0 else None
    except (OSError, AttributeError):
        return None


def _nvml_driver_version() -> Optional[str]:
    """The driver release string (e.g. "580.65.06") from NVML; None without it."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    try:
        if lib.nvmlInit_v2() != 0:
            return None
        try:
            buf = ctypes.create_string_buffer(96)
            if lib.nvmlSystemGetDriverVersion(buf, 96) != 0:
                return None
            return buf.value.decode() or None
        finally:
            lib.nvmlShutdown()
    except (AttributeError, UnicodeDecodeError):
        return None


def _torch_devices(torch) -> Tuple[Dict[int, str], Dict[int, str]]:
    """(index -> UUID, index -> name) of the visible devices, only when CUDA is already initialised."""
    uuids: Dict[int, str] = {}
    names: Dict[int, str] = {}
    try:
        if not torch.cuda.is_initialized():
            return uuids, names
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            names[i] = str(props.name)
            uuid = getattr(props, "uuid", None)
            if uuid is not None:
                text = str(uuid)
                uuids[i] = text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"
    except Exception:  # any torch/driver problem only costs the device fields
        return {}, {}
    return uuids, names


_lock = threading.Lock()
_cached: Dict[int, CaptureIdentity] = {}  # pid -> identity with devices (a forked child gets its own)
_driver: Dict[str, Tuple[Optional[str], Optional[int]]] = {}  # "v" -> (release, CUDA driver API version)
_api: Dict[str, Optional[int]] = {}  # "api" -> CUDA driver API version, read alone (cuda_driver_version)


def _driver_versions() -> Tuple[Optional[str], Optional[int]]:
    with _lock:
        if "v" not in _driver:
            api = _api["api"] if "api" in _api else _cuda_driver_version()
            _driver["v"] = (_nvml_driver_version(), api)
        return _driver["v"]


def cuda_driver_version() -> Optional[int]:
    """``cuDriverGetVersion`` (e.g. 13000), read once a process; None without a CUDA driver.
    Asked at a capture's end (the CUPTI detach's default): only the driver library, no NVML,
    whose initialisation :func:`capture_identity` pays later, off the capture."""
    with _lock:
        if "v" in _driver:
            return _driver["v"][1]
        if "api" not in _api:
            _api["api"] = _cuda_driver_version()
        return _api["api"]


def capture_identity() -> CaptureIdentity:
    """:func:`process_identity` completed from torch and the driver, where available.

    Cached per process once the devices are known (they and the versions do not change
    while a process runs); before CUDA is initialised only the torch-free fields and the
    versions are filled.
    """
    pid = os.getpid()
    with _lock:
        hit = _cached.get(pid)
    if hit is not None:
        return hit
    ident = process_identity()
    torch = sys.modules.get("torch")
    uuids: Dict[int, str] = {}
    names: Dict[int, str] = {}
    torch_version = None
    if torch is not None:
        torch_version = str(getattr(torch, "__version__", "")) or None
        uuids, names = _torch_devices(torch)
    release, api = _driver_versions()
    full = CaptureIdentity(host=ident.host, pid=ident.pid, process_start_ns=ident.process_start_ns,
                           devices=types.MappingProxyType(uuids), device_names=types.MappingProxyType(names),
                           torch_version=torch_version, driver_version=release, cuda_driver_version=api)
    if names:
        with _lock:
            _cached[pid] = full
    return full
