"""Tables keep what identifies a row (issue 32, item 6).

Kernel names use the terminal width (no fixed 60-character cut), a name shortened in the
middle keeps the part where it differs from another row's (two GEMMs that differ only by a
tile size never print the same), and a table cut into blocks repeats its key columns
(device, lane, rank, scope ...) at the start of every block, not only the first column.
"""
from __future__ import annotations

import pandas as pd
import pytest

from conftest import fixture_capture, fixture_trace
from support.engine_support import requires_portable
from perfetto_graph_ann.cli.main import main
from perfetto_graph_ann.util.tables import render, shorten_column

# two cuBLAS GEMMs of the seed block's trace (H200): 120 characters, the same but for the tile size
GEMM64 = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
GEMM128 = GEMM64.replace("tilesize64x64x8", "tilesize128x64x8")


def _top_kernels():
    return pd.DataFrame([
        dict(device=0, lane_id=7, rank=1, name=GEMM64, count=5, total_dur=800_000, share=0.7),
        dict(device=0, lane_id=7, rank=2, name=GEMM128, count=5, total_dur=300_000, share=0.3),
    ])


def _column(text: str, title: str):
    """The cells under ``title`` in the block of ``text`` that has that column."""
    block = next(b for b in text.split("\n\n") if title in b.splitlines()[0].split())
    lines = block.splitlines()
    at = lines[0].index(title)
    end = lines[1].find(" ", at)
    return [line[at:end if end > 0 else None].rstrip() for line in lines[2:]]


def test_a_wide_terminal_shows_whole_names():
    text = render(_top_kernels(), width=200)
    assert _column(text, "name") == [GEMM64, GEMM128]  # 120 characters: no cut at 60 any more
    assert max(len(line) for line in text.splitlines()) <= 200


@pytest.mark.parametrize("width", [40, 60, 80, 100, 120])
def test_shortened_names_stay_apart(width):
    text = render(_top_kernels(), width=width)
    a, b = _column(text, "name")
    assert a != b and "…" in a and "…" in b, text
    assert "64x64x8" in a and "128x64x8" in b, text
    assert a.startswith("sm80") and b.startswith("sm80")
    assert max(len(line) for line in text.splitlines()) <= width


def test_shorten_column_keeps_the_difference_and_the_ends():
    a, b = shorten_column([GEMM64, GEMM128], 40)
    assert a != b and len(a) <= 40 and len(b) <= 40
    assert a.startswith("sm80") and b.startswith("sm80") and a.endswith("blas") and b.endswith("blas")
    assert shorten_column(["same", "same", "x" * 50], 24)[:2] == ["same", "same"]


def test_a_wrapped_table_repeats_the_key_columns():
    df = pd.DataFrame([dict(device=d, lane_id=lane, lane_name=f"{lane} attention", scope_path="layer 3 / attn",
                            busy_dur=1_000 * lane, mean_dur=10, p50_dur=11, p90_dur=12, p99_dur=13, max_dur=14,
                            utilization=0.5, replay_utilization=0.25)
                       for d in (0, 1) for lane in (7, 61, 62)])
    text = render(df, width=60)
    blocks = [b for b in text.split("\n\n") if b.strip()]
    assert len(blocks) > 1
    for block in blocks:
        head = block.splitlines()[0].split()
        assert head[:2] == ["device", "lane_id"], block  # every block says which lane a row is
        assert "scope_path" in head or block is blocks[0] or "scope_path" not in text
        assert len(block.splitlines()) == 2 + len(df)
    seen = [c for b in blocks for c in b.splitlines()[0].split() if c not in ("device", "lane_id", "scope_path")]
    assert sorted(seen) == sorted(c for c in df.columns if c not in ("device", "lane_id", "scope_path"))
    assert all(len(line) <= 60 for line in text.splitlines())


@requires_portable
def test_report_uses_the_terminal_width(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["report", str(fixture_trace("seed_block_annotated")), "-a",
                 str(fixture_capture("seed_block_annotated")), "--engine", "portable", "-q", "--all"]) == 0
    text = capsys.readouterr().out
    top = text.split("Top kernels per lane (graph_ann_lane_top_kernels)\n")[1].split("\n\n")[0]
    names = _column(top, "name")
    # its two GEMMs that differ only by a tile size, whole (they were cut to the same 60 characters)
    assert GEMM64 in names and GEMM64.replace("tilesize64x64x8", "tilesize64x128x8") in names, top
    assert max(len(line) for line in text.splitlines()[1:]) <= 250
