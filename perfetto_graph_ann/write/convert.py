"""``convert``: a torch.profiler Chrome trace in, a native Perfetto trace (.pftrace) out.

Public entry point of the write stage::

    from perfetto_graph_ann.write.convert import convert, ConvertConfig
    stats = convert("trace.json.gz", "trace.pftrace")

The output is written atomically (temp file + rename) and gzip-compressed when asked
(``ConvertConfig(gzip=True)``) or when the name ends in ``.gz``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
from typing import TYPE_CHECKING, Iterator, Optional

from ..errors import PathLike
from ..read.kineto import read_trace
from ..read.model import KinetoTrace
from ..util.atomic import atomic_write
from .perfetto import WriterConfig, WriteStats, write_perfetto

if TYPE_CHECKING:  # annotation only: importing the join package costs ~18 ms a conversion
    from ..join.model import LaneLayout


@dataclasses.dataclass
class ConvertConfig:
    """Options of :func:`convert`."""

    gzip: Optional[bool] = None  #: None: by the output name (".gz")
    progress: Optional[bool] = None  #: tqdm bar on stderr; None: on a TTY for large inputs
    encoder: str = "fast"  #: packet encoder: "fast" or "protos" (reference, slower)
    #: "typed" (default): every list arg as typed nested debug annotations. "string": the
    #: record_shapes arrays (``Input Dims``, ``Input Strides``, ``Input type``, ``Concrete
    #: Inputs``) as one compact JSON-text string each: a smaller file that loads faster, at
    #: the price of typed per-item access (CLI ``--compact-args``).
    shape_args: str = "typed"


def convert(src: "PathLike | KinetoTrace", out: PathLike, config: ConvertConfig = ConvertConfig(),
            layout: Optional[LaneLayout] = None) -> WriteStats:
    """Convert ``src`` (a path, or an already read trace) to a Perfetto trace at ``out``.

    ``layout`` (from the join) moves GPU events to their lanes and adds their args.
    Bad input raises :class:`~perfetto_graph_ann.errors.TraceFormatError` before anything
    is written; a failed write leaves no file (and any previous ``out`` untouched).
    """
    with paused_gc():
        trace = src if isinstance(src, KinetoTrace) else read_trace(src)
        wc = WriterConfig(encoder=config.encoder, progress=config.progress, shape_args=config.shape_args)
        try:
            with atomic_write(out, "wb", compress=config.gzip) as f:
                return write_perfetto(trace, f, layout, wc)
        finally:
            # Drop the trace read here while the collector is still paused: everything
            # allocated meanwhile is still in the youngest generation, so the first
            # allocation after re-enabling it would trigger a pass over the whole dying
            # trace (measured: +0.15 s CPU on a 200k-event trace; benchmarks/convert.py).
            del trace


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while converting.

    Reading and writing allocate millions of small acyclic objects (events, tuples, bytes);
    with the collector on, its full passes over that growing heap cost as much as the
    conversion itself (measured: benchmarks/convert.py). Reference counting still frees
    everything; the collector is restored afterwards.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
