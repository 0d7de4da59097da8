"""The README's python blocks on a CUDA machine: the quickstart takes its live path
(capture, profile, export, SQL) and its trace has the lanes it marked.

Where no trace processor is usable (the GPU machine has no network for the download and
may have no Node), the quickstart runs without its final SQL lines and the written trace is
decoded instead (tests/support/pftrace_decode.py)."""
from __future__ import annotations

import collections
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support.pftrace_decode import decode  # noqa: E402  (tests/support/pftrace_decode.py)
from test_readme import BLOCKS, _env  # noqa: E402  (tests/test_readme.py)

pytestmark = pytest.mark.gpu


#: calls that need a trace processor (the blocks are cut before the first one where none runs)
SQL_CALLS = ("pga.metrics.", "pga.open_trace")


def _engine_reason():
    from support.engine_support import native_reason, portable_reason

    portable, native = portable_reason(), native_reason()
    return f"{portable}; {native}" if portable and native else None


@pytest.mark.parametrize("body,line", [(b[1], b[3]) for b in BLOCKS if b[0] == "python"],
                         ids=[f"line{b[3]}" for b in BLOCKS if b[0] == "python"])
def test_readme_python_block_live(body, line, tmp_path, results):
    quickstart = "pga.graph(g)" in body
    no_engine = _engine_reason()
    if no_engine:  # no trace processor here: run the block up to its first SQL call
        cuts = [body.find(m) for m in SQL_CALLS if m in body]
        if cuts:
            body = body[:body.rfind("\n", 0, min(cuts)) + 1]
    (tmp_path / "block.py").write_text(body, encoding="utf-8")
    r = subprocess.run([sys.executable, "block.py"], cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True,
                       timeout=600, stdin=subprocess.DEVNULL)
    entry = {"rc": r.returncode, "stdout": r.stdout[-2000:], "stderr": r.stderr[-2000:], "no_engine": no_engine}
    results[f"readme_line{line}"] = entry
    print(f"README line {line}", entry)
    assert r.returncode == 0
    assert "no CUDA" not in r.stdout
    if quickstart:
        kernels = [s for s in decode(tmp_path / "run.pftrace").slices if s.cat == "kernel"]
        lanes = collections.Counter(s.args.get("stream") for s in kernels)
        names = collections.Counter(s.args.get("name") for s in kernels)
        entry.update(lanes=dict(lanes), names=dict(names))
        assert lanes[62] > 0 and lanes[61] > 0 and names["attention"] == lanes[62] and names["mlp"] == lanes[61]
        if not no_engine:
            assert "attention" in r.stdout and "mlp" in r.stdout
