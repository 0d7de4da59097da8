"""Headless Chromium for the real-browser tests.

Where the browser comes from, in this order:
1. ``PGA_CHROMIUM=/path/to/chromium`` (any Chromium or Chrome build);
2. ``chromium`` / ``chromium-browser`` / ``google-chrome`` on PATH;
3. when running as root with ``apt-get`` (CI runs ``.ci/run`` as root, registries reachable):
   ``apt-get install -y chromium`` from the distribution's packages, once per session,
   bounded in time. ``PGA_BROWSER_INSTALL=0`` turns this off.
Otherwise the tests are skipped with the reason. Nothing ever downloads a browser build of
its own (Playwright is used only as a driver, with ``executable_path``).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Dict, Optional

import pytest

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
APT_TIMEOUT_S = 900
#: Flags that work in containers without a display, GPU, sandbox or network.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]


def _on_path() -> Optional[str]:
    env = os.environ.get("PGA_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _apt_install() -> str:
    """Install Debian's chromium package; returns '' on success, else the reason."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    steps = (["apt-get", "update"],
             ["apt-get", "install", "-y", "--no-install-recommends", "chromium", "fonts-liberation"])
    for cmd in steps:
        try:
            r = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=APT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"{' '.join(cmd)} ran past {APT_TIMEOUT_S} s"
        if r.returncode != 0:
            return f"{' '.join(cmd)} exited {r.returncode}: {(r.stderr or r.stdout)[-800:]}"
    return ""


@pytest.fixture(scope="session")
def chromium() -> Dict[str, Any]:
    """Keyword arguments for Playwright's ``launch`` / ``launch_persistent_context``."""
    return {"executable_path": _chromium_path(), "args": list(CHROMIUM_ARGS), "headless": True}


def _chromium_path() -> str:
    pytest.importorskip("playwright.sync_api", reason="the browser tests drive Chromium through Playwright "
                        "(in the dev extra: pip install -e '.[dev]')")
    path = _on_path()
    if path:
        return path
    if os.environ.get("PGA_CHROMIUM"):
        pytest.fail(f"PGA_CHROMIUM={os.environ['PGA_CHROMIUM']}: not an executable file")
    if os.environ.get("PGA_BROWSER_INSTALL", "1") == "0":
        pytest.skip("no Chromium on PATH and PGA_BROWSER_INSTALL=0: apt-get install chromium, or set PGA_CHROMIUM")
    if not shutil.which("apt-get") or os.geteuid() != 0:
        pytest.skip("no Chromium on PATH, and installing Debian's chromium package needs root and apt-get: "
                    "apt-get install chromium, or set PGA_CHROMIUM=/path/to/chromium")
    problem = _apt_install()
    if problem:
        pytest.fail(f"installing Chromium from the distribution's packages failed: {problem}")
    path = _on_path()
    if not path:
        pytest.fail("apt-get installed chromium but no chromium binary is on PATH")
    return path
