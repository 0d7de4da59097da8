"""``mark_kernels`` where the compiled capture path was never built (no C compiler at install).

The class is chosen when ``capture.marks`` is imported: with the extension, a subclass of the
compiled ``Mark`` (whose Python half the other tests run with ``fastpath.ENABLED`` off);
without it, a pure-Python class. These run the scope and backward tests in a fresh
interpreter where the extension cannot be imported, so that class is the one tested.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


#: what a fresh interpreter runs first: the extension cannot be imported, as if never built
BLOCK = "import sys; sys.modules['perfetto_graph_ann.capture._fastpath'] = None; "


def test_without_the_extension_mark_kernels_is_pure_python_and_the_capture_tests_pass(tmp_path):
    pytest.importorskip("torch")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    probe = ("import inspect, perfetto_graph_ann.capture.fastpath as f, perfetto_graph_ann.capture.marks as m;"
             "print(f.module_built(), [c.__name__ for c in m.mark_kernels.__mro__],"
             " [(p.name, p.kind.name, p.default) for p in inspect.signature(m.mark_kernels).parameters.values()])")
    out = subprocess.run([sys.executable, "-c", BLOCK + probe], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == ("False ['mark_kernels', '_MarkMethods', 'object'] "
                                         "[('annotation', 'POSITIONAL_OR_KEYWORD', <class 'inspect._empty'>), "
                                         "('backward', 'KEYWORD_ONLY', True)]")
    args = ["-q", "-p", "no:cacheprovider", "-x", "tests/test_capture_api.py", "tests/test_capture_autograd_walk.py"]
    run = subprocess.run([sys.executable, "-c", BLOCK + f"import pytest; sys.exit(pytest.main({args!r}))"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    passed = int(run.stdout.strip().split("\n")[-1].split(" passed")[0].split()[-1])
    assert passed >= 20  # the compiled-path variants are skipped there; the Python ones all ran


def test_describe_says_not_built_where_only_the_c_sources_are(tmp_path):
    """A source tree (C files and header, no compiled module): the capture path is Python and
    ``describe`` says the module was not built, not that a built one failed to import."""
    import shutil

    shutil.copytree(ROOT / "perfetto_graph_ann", tmp_path / "perfetto_graph_ann",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    assert (tmp_path / "perfetto_graph_ann" / "capture" / "_fastpath.h").exists()
    env = dict(os.environ, PYTHONPATH=str(tmp_path), PYTHONDONTWRITEBYTECODE="1")
    out = subprocess.run([sys.executable, "-c", "from perfetto_graph_ann.capture import fastpath as f;"
                          "print(f.module_built(), f.describe())"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("False python (the compiled path: not built at install time"), out.stdout
