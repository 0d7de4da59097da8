"""The README's python blocks on a CUDA machine: the quickstart takes its live path
(capture, profile, export, SQL) and must print the annotated lanes it marked."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from test_readme import BLOCKS, _env  # noqa: E402  (tests/test_readme.py)

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("body,line", [(b[1], b[3]) for b in BLOCKS if b[0] == "python"],
                         ids=[f"line{b[3]}" for b in BLOCKS if b[0] == "python"])
def test_readme_python_block_live(body, line, tmp_path, results):
    (tmp_path / "block.py").write_text(body, encoding="utf-8")
    r = subprocess.run([sys.executable, "block.py"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                       timeout=600, stdin=subprocess.DEVNULL)
    results[f"readme_line{line}"] = {"rc": r.returncode, "stdout": r.stdout[-2000:], "stderr": r.stderr[-2000:]}
    print(f"README line {line}", r.stdout[-2000:], r.stderr[-2000:])
    assert r.returncode == 0
    assert "no CUDA" not in r.stdout
    if "pga.graph(g)" in body:
        assert "attention" in r.stdout and "mlp" in r.stdout
