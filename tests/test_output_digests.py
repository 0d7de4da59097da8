"""Byte-for-byte guard on what the CLI writes for every shipped fixture.

The stored digests (``tests/data/output_digests.json``) were made before the package's
structure moved (annotations as the ground floor, one pipeline). Any change of a written
byte fails here: a deliberate format change regenerates them with
``PGA_UPDATE_DIGESTS=1 pytest tests/test_output_digests.py`` and says why in its commit.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Dict, List

from perfetto_graph_ann.cli.main import main

from conftest import FIXTURES as H200

T215 = Path(__file__).parent / "data" / "torch215"
STORE = Path(__file__).parent / "data" / "output_digests.json"


def _cases() -> Dict[str, List[str]]:
    """name -> CLI argv; ``{out}`` is the output path, ``{h}`` the H200 fixtures folder."""
    c: Dict[str, List[str]] = {}
    for t in ("allreduce_eager_rank0", "allreduce_graph_rank0", "seed_block_annotated",
              "seed_block_eager", "seed_block_graph", "two_branch"):
        c[f"convert/{t}.pftrace"] = ["convert", f"{{h}}/{t}.trace.json.gz", "-o", "{out}"]
    c["convert/seed_block_graph.typed.pftrace"] = [
        "convert", "{h}/seed_block_graph.trace.json.gz", "--typed-args", "-o", "{out}"]
    c["convert/seed_block_eager.typed.pftrace"] = [
        "convert", "{h}/seed_block_eager.trace.json.gz", "--typed-args", "-o", "{out}"]
    for t in ("seed_block_annotated", "two_branch"):
        base = ["convert", f"{{h}}/{t}.trace.json.gz", "-a", f"{{h}}/{t}.capture.json"]
        c[f"annotated/{t}.pftrace"] = base + ["-o", "{out}"]
        c[f"annotated/{t}.none.pftrace"] = base + ["--graph-lanes", "none", "-o", "{out}"]
        c[f"annotated/{t}.json"] = base + ["-o", "{out}"]
        c[f"annotated/{t}.all.json"] = base + ["--graph-lanes", "all", "-o", "{out}"]
        c[f"annotated/{t}.typed.pftrace"] = base + ["--typed-args", "-o", "{out}"]
    for t in ("seed_block_annotated.torch.all", "two_branch.torch.all"):
        c[f"torch215/{t}.pftrace"] = ["convert", f"{{t}}/{t}.trace.json.gz", "-o", "{out}"]
    # merge names each input as given in the rank group's description: relative to the
    # fixtures folder (the test's working directory), so the bytes do not depend on the checkout
    c["merge/allreduce.pftrace"] = ["merge", "allreduce_graph_rank0.trace.json.gz",
                                    "allreduce_eager_rank0.trace.json.gz", "--label", "graph",
                                    "--label", "eager", "-o", "{out}"]
    return c


CASES = _cases()


def _run(name: str, tmp: Path, monkeypatch) -> str:
    out = tmp / name.replace("/", "__")
    argv = [a.format(h=H200, t=T215, out=out) for a in CASES[name]] + ["-q"]
    monkeypatch.chdir(H200)
    assert main(argv) == 0, argv
    return hashlib.sha256(out.read_bytes()).hexdigest()


def test_outputs_are_byte_identical_to_the_stored_digests(tmp_path: Path, monkeypatch) -> None:
    got = {name: _run(name, tmp_path, monkeypatch) for name in CASES}
    if os.environ.get("PGA_UPDATE_DIGESTS") == "1":
        STORE.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(STORE.read_text())
    assert sorted(got) == sorted(want)
    changed = [n for n in got if got[n] != want[n]]
    assert not changed, f"outputs changed byte-wise: {changed}"
