"""What the demo runs on: a list of recordings (a profiler trace plus, when annotated, its annotations).

The shipped set is the real H200 recordings inside the package (``demo/data/h200``); the live
set is produced by :mod:`.scenarios` on a CUDA machine. Both are plain :class:`Recording` lists
so the pipeline in :mod:`.runner` does not care where they came from.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import List, Optional, Tuple

from .._resources import demo_data_dir, demo_live_data_dir

__all__ = ["Recording", "shipped_recordings"]


@dataclasses.dataclass(frozen=True)
class Recording:
    """One scenario's inputs.

    ``annotations``: a sidecar or capture record for the join (``None``: raw export only).
    ``reference``: a trace to compare with (the eager run of a graphed step), exported raw.
    """

    name: str  #: file stem of the outputs, e.g. "seed_block"
    title: str  #: one line for the printout
    trace: Path
    annotations: Optional[Path] = None
    reference: Optional[Path] = None
    note: str = ""


def shipped_recordings(data_dir: Optional[Path] = None,
                       live_dir: Optional[Path] = None) -> Tuple[str, List[Recording]]:
    """The bundled H200 recordings and a one-line description of where they come from.

    The all_reduce scenario uses the annotated 2-rank capture this package's live demo recorded
    on an H200 (``demo/data/h200_live``), compared with the probe's eager run.
    """
    d = Path(data_dir) if data_dir is not None else demo_data_dir()
    live = Path(live_dir) if live_dir is not None else demo_live_data_dir()
    origin = ("no CUDA device here: running on the real H200 recordings shipped in the package "
              "(torch 2.11, driver 580 / CUDA 13.0), not on a live capture")
    return origin, [
        Recording("seed_block", "transformer block: qkv_proj, attention (lane 62), out_proj, mlp (lane 61)",
                  d / "seed_block_annotated.trace.json.gz", d / "seed_block_annotated.capture.json"),
        Recording("two_branch", "two-branch mark_stream block: left_projection, right_projection, combine",
                  d / "two_branch.trace.json.gz", d / "two_branch.capture.json"),
        Recording("allreduce", "2-rank x @ W + all_reduce step in a CUDA graph, collective annotated "
                  "automatically (rank 0), vs eager",
                  live / "allreduce_graph_rank0.trace.json.gz", live / "allreduce_graph_rank0.annotations.json",
                  d / "allreduce_eager_rank0.trace.json.gz",
                  note="recorded by this package's live demo on 2 H200s; the eager run shows the fields "
                  "graphs lose and the join restores"),
    ]
