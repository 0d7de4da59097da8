"""The package's shape: CLI entry point, bundled resources, lazy imports."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import perfetto_graph_ann
from perfetto_graph_ann._resources import demo_data_dir, protos_dir, sql_package_dir

REPO = Path(__file__).resolve().parents[1]
#: sha256 of the recordings as made on the GPU machine (tests read nothing outside the checkout)
RECORDINGS = REPO / "tests" / "data" / "h200_recordings.sha256.json"


def test_version_and_help():
    out = subprocess.run([sys.executable, "-m", "perfetto_graph_ann", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and perfetto_graph_ann.__version__ in out.stdout
    out = subprocess.run([sys.executable, "-m", "perfetto_graph_ann", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for cmd in ("convert", "sql", "lanes", "report", "merge", "demo", "open"):
        assert cmd in out.stdout


def test_cli_engine_choices_are_the_engines():
    """The CLI repeats the engine names so --help need not import the engine package."""
    from perfetto_graph_ann.cli.options import ENGINES as CLI_ENGINES
    from perfetto_graph_ann.query.engine.config import ENGINES

    assert CLI_ENGINES == ENGINES


def test_import_does_not_import_torch():
    from support.torch_guard import assert_torch_free

    assert_torch_free("import perfetto_graph_ann; perfetto_graph_ann.AnnotationSet")


def test_torch_guard_sees_a_guarded_import():
    """The check above can fail without torch installed: an optional import is seen too."""
    from support.torch_guard import torch_import_attempts

    code = ("import importlib.util\n"
            "for probe in (lambda: __import__('torch.cuda'), lambda: importlib.util.find_spec('torch')):\n"
            "    try:\n        probe()\n    except ImportError:\n        pass\n")
    assert torch_import_attempts(code) == (["torch", "torch"], False)


def test_ci_has_torch_for_the_cpu_torch_tests():
    """CI runs the README's test command, whose ``test-torch`` extra installs torch: there the
    CPU tests that need real torch must run, not skip (issue 37)."""
    import importlib.util

    import pytest

    if os.environ.get("CI") != "true":
        pytest.skip("not CI (CI=true): the torch tests skip where torch is not installed")
    assert importlib.util.find_spec("torch") is not None, "CI without torch: install the test-torch extra"


def test_bundled_folders_exist():
    assert sql_package_dir().name == "graph_ann" and sql_package_dir().is_dir()
    assert protos_dir().is_dir()
    assert (demo_data_dir() / "seed_block_annotated.trace.json.gz").is_file()


def test_demo_data_is_the_shared_recording():
    """The packaged H200 recordings are byte for byte the ones recorded on the GPU machine:
    checked against their sha256, kept in the checkout (it read a shared folder beside the
    checkout, and skipped where there was none)."""
    import json

    expected = json.loads(RECORDINGS.read_text())["files"]
    packaged = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                for p in demo_data_dir().iterdir() if p.is_file()}
    assert packaged == expected


def test_every_public_name_resolves_to_what_it_says():
    import inspect

    import perfetto_graph_ann.join  # noqa: F401  (the subpackage must not shadow the function)

    for name in perfetto_graph_ann.__all__:
        value = getattr(perfetto_graph_ann, name)
        if name not in ("__version__", "metrics"):  # metrics: the namespace of the metric tables
            assert not inspect.ismodule(value), name
    assert inspect.ismodule(perfetto_graph_ann.metrics)
    assert perfetto_graph_ann.read_and_join.__name__ == "read_and_join"


def test_wheel_ships_sql_protos_demo_data_and_engine_host(tmp_path):
    """sql/ and protos/ live at the repository root but must be inside the installed package."""
    import zipfile

    import pytest

    root = Path(__file__).resolve().parents[1]
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path), str(root)], capture_output=True, text=True)
    if build.returncode != 0 and "hatchling" in build.stderr:
        pytest.skip(f"hatchling not importable without build isolation: {build.stderr[-200:]}")
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    sql = {p.name for p in (root / "sql" / "graph_ann").glob("*.sql")}
    assert sql and {f"perfetto_graph_ann/sql/graph_ann/{n}" for n in sql} <= names
    protos = {p.name for p in (root / "protos" / "perfetto_graph_ann").glob("*.proto")}
    assert protos and {f"perfetto_graph_ann/protos/perfetto_graph_ann/{n}" for n in protos} <= names
    assert "perfetto_graph_ann/demo/data/h200/seed_block_annotated.trace.json.gz" in names
    assert "perfetto_graph_ann/query/engine/portable_host.js" in names
    # the capture fast path: compiled into the wheel where this machine can compile it
    ext = f"perfetto_graph_ann/capture/_fastpath{sysconfig.get_config_var('EXT_SUFFIX')}"
    encode = f"perfetto_graph_ann/write/perfetto/_encode{sysconfig.get_config_var('EXT_SUFFIX')}"  # the writer's
    scan = f"perfetto_graph_ann/read/_scan{sysconfig.get_config_var('EXT_SUFFIX')}"  # the reader's
    plan = f"perfetto_graph_ann/write/perfetto/_plan{sysconfig.get_config_var('EXT_SUFFIX')}"  # the writer's plan loop
    rows = f"perfetto_graph_ann/join/_rows{sysconfig.get_config_var('EXT_SUFFIX')}"  # the join's per-replay loops
    if _can_compile():
        assert ext in names and encode in names and scan in names and plan in names and rows in names and \
            not wheel.name.endswith("-none-any.whl"), (wheel.name, sorted(names))
    sources = {f"perfetto_graph_ann/capture/{n}" for n in ("_fastpath.c", "_recorder.c", "_marks.c", "_replays.c", "_errors.c",
                                                             "_fastpath.h")}
    sources |= {"perfetto_graph_ann/write/perfetto/_encode.c", "perfetto_graph_ann/write/perfetto/_plan.c",
                "perfetto_graph_ann/read/_scan.c", "perfetto_graph_ann/read/_slots.h", "perfetto_graph_ann/join/_rows.c"}
    assert sources <= names  # every translation unit and the header ship with the source


def _can_compile() -> bool:
    import shutil

    return os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) and shutil.which("cc") is not None


def test_wheel_without_the_extension_is_pure_python(tmp_path):
    """PERFETTO_GRAPH_ANN_NO_EXTENSION=1 (or no compiler) gives a py3-none-any wheel."""
    import zipfile

    import pytest

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PERFETTO_GRAPH_ANN_NO_EXTENSION="1")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path), str(root)], capture_output=True, text=True, env=env)
    if build.returncode != 0 and "hatchling" in build.stderr:
        pytest.skip(f"hatchling not importable without build isolation: {build.stderr[-200:]}")
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".so")]
