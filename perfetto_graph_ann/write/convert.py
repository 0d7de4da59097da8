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
from typing import IO, TYPE_CHECKING, FrozenSet, Iterator, Optional

from ..errors import OutputError, PathLike
from ..read.kineto import read_trace
from ..read.model import KinetoTrace
from ..util.atomic import atomic_write, refuse_input_as_output
from ..formats import is_json_name
from .perfetto import WriterConfig, WriteStats, write_perfetto

if TYPE_CHECKING:  # annotation only: importing the join package costs ~18 ms a conversion
    from ..join.model import LaneLayout


@dataclasses.dataclass
class ConvertConfig:
    """Options of :func:`convert`."""

    gzip: Optional[bool] = None  #: None: by the output name (".gz")
    progress: Optional[bool] = None  #: tqdm bar on stderr; None: on a TTY for large inputs
    encoder: str = "fast"  #: packet encoder: "fast" or "protos" (reference, slower)
    #: "text" (default): every list arg of Kineto's own (``grid``, ``block``, ``Input Dims``,
    #: ``Input Strides``, ``Input type``, ``Concrete Inputs``, ...) as one string, its compact
    #: JSON text (``[[4,256],[],[256]]``): one arg row instead of one per item, so the trace
    #: loads faster than its JSON. Annotation and join fields stay typed. "typed": those
    #: lists as typed nested debug annotations, one arg row per item (CLI ``--typed-args``).
    list_args: str = "text"
    #: Only args with these names are written (None: all); see WriterConfig.keep_args.
    keep_args: Optional[FrozenSet[str]] = None
    #: Deprecated spelling: "string" is list_args="text", "typed" is list_args="typed".
    shape_args: Optional[str] = None

    def writer_config(self) -> WriterConfig:
        """The packet writer's settings for these options."""
        return WriterConfig(encoder=self.encoder, progress=self.progress, list_args=self.writer_list_args(),
                            keep_args=self.keep_args)

    def writer_list_args(self) -> str:
        """The effective :attr:`list_args` (the deprecated :attr:`shape_args` wins when set)."""
        if self.shape_args is None:
            return self.list_args
        modes = {"string": "text", "typed": "typed"}
        if self.shape_args not in modes:
            raise ValueError(f"shape_args must be one of {tuple(modes)}, not {self.shape_args!r}")
        return modes[self.shape_args]


def convert(src: "PathLike | KinetoTrace", out: PathLike, config: ConvertConfig = ConvertConfig(),
            layout: Optional[LaneLayout] = None) -> WriteStats:
    """Convert ``src`` (a path, or an already read trace) to a Perfetto trace at ``out``.

    ``layout`` (from the join) moves GPU events to their lanes and adds their args.
    Bad input raises :class:`~perfetto_graph_ann.errors.TraceFormatError` before anything
    is written; a failed write leaves no file (and any previous ``out`` untouched). An ``out``
    that is the input, or has a Chrome JSON name, raises
    :class:`~perfetto_graph_ann.errors.OutputError` (as the CLI refuses them).
    """
    check_protobuf_output(out, [src.path if isinstance(src, KinetoTrace) else src],
                          "for annotated Chrome JSON use write.chrome_json.write_chrome_json")
    with paused_gc():
        trace = src if isinstance(src, KinetoTrace) else read_trace(src)
        wc = config.writer_config()
        try:
            with atomic_write(out, "wb", compress=config.gzip) as f:
                return write_perfetto(trace, f, layout, wc)
        finally:
            # Drop the trace read here while the collector is still paused: everything
            # allocated meanwhile is still in the youngest generation, so the first
            # allocation after re-enabling it would trigger a pass over the whole dying
            # trace (measured: +0.15 s CPU on a 200k-event trace; benchmarks/convert.py).
            del trace


def convert_to_stream(trace: KinetoTrace, out: IO[bytes], config: ConvertConfig = ConvertConfig(),
                      layout: Optional[LaneLayout] = None) -> WriteStats:
    """Write ``trace`` as a Perfetto trace to the binary stream ``out`` (no file, no gzip):
    for a consumer that reads the packets as they come (``query.session.open_converted``)."""
    with paused_gc():
        return write_perfetto(trace, out, layout, config.writer_config())


def check_protobuf_output(out: PathLike, inputs: "list[PathLike | str | None]", hint: str) -> None:
    """Refuse, before any work, a protobuf output that has a JSON name or would replace an input.

    Raises :class:`~perfetto_graph_ann.errors.OutputError` naming ``out``; ``hint`` says
    where the JSON form is written instead.
    """
    refuse_input_as_output(out, inputs)
    if is_json_name(out):
        raise OutputError(out, f"is a Chrome JSON name (.json / .json.gz) but a Perfetto protobuf trace is "
                               f"written here: name the output .pftrace ({hint})")


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
