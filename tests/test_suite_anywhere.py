"""The test suite gives the same answer wherever it is cloned and whatever the machine has
(issue 32, item 5): ``-m gpu`` on a CPU machine skips, with the reason, instead of failing.
(Also: tests/test_package.py reads no fixture outside the checkout; tests/test_cli_tables.py's
width check does not depend on the checkout's path; the long fuzz run's two failures are
targeted cases in tests/test_fuzz_convert.py and tests/test_fuzz_sidecar.py.)
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_gpu_tests_skip_on_a_machine_without_cuda(tmp_path):
    from perfetto_graph_ann.demo.scenarios import cuda_device_count

    if cuda_device_count():
        pytest.skip("this machine has CUDA: -m gpu runs the GPU tests here")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rs",
                        "tests/test_demo.py::test_live_demo", "tests/test_readme.py"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "failed" not in r.stdout and "skipped" in r.stdout, r.stdout[-3000:]
    assert "needs 1 CUDA device(s), this machine has 0" in r.stdout, r.stdout[-3000:]


def test_tests_read_nothing_outside_the_checkout():
    """No test module reaches above the checkout with ``Path(__file__).parents[n]``: a clone
    anywhere runs the same tests (test_package looked for ../shared beside the checkout)."""
    import re

    found = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        depth = len(path.relative_to(REPO).parts) - 1  # parents[depth] is the checkout
        for m in re.finditer(r"parents\[(\d+)\]", path.read_text(encoding="utf-8")):
            if int(m.group(1)) > depth:
                found.append(f"{path.relative_to(REPO)}: parents[{m.group(1)}]")
    assert found == []
