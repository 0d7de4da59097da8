"""The native Perfetto writer's file form: a read trace and its layout in, a ``.pftrace`` out.

Like every writer it takes ``(trace, out, layout, options)`` and nothing else; reading
and joining are :mod:`perfetto_graph_ann.pipeline`'s. The output is written atomically
(temp file + rename) and gzip-compressed when asked (``ConvertConfig(gzip=True)``) or
when the name ends in ``.gz``.
"""
from __future__ import annotations

import dataclasses
from typing import IO, TYPE_CHECKING, FrozenSet, Optional

from ..errors import OutputError, PathLike
from ..read.model import KinetoTrace
from ..util.atomic import atomic_write, refuse_input_as_output
from ..util.collector import paused_gc
from ..formats import is_json_name
from .perfetto import WriterConfig, WriteStats, write_perfetto

if TYPE_CHECKING:  # annotation only: a conversion without a join does not import the join package
    from ..join.model import LaneLayout

__all__ = ["check_protobuf_output", "ConvertConfig", "paused_gc", "write_pftrace", "write_pftrace_stream"]


@dataclasses.dataclass
class ConvertConfig:
    """Options of the ``.pftrace`` writer (and of :func:`perfetto_graph_ann.convert`)."""

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
    #: Sorting-window marks every this many bytes (None: none); see WriterConfig.sort_window_bytes.
    sort_window_bytes: Optional[int] = None
    #: Read a plain JSON file in two passes where it applies (``convert`` of a path without a
    #: join): light events first, each event's JSON decoded again just before its packet is
    #: encoded (``read.scan``; same bytes, a fraction of the memory). False: every event read
    #: and held, as before. ``WriteStats.reading`` says which ran.
    two_pass: bool = True

    def writer_config(self) -> WriterConfig:
        """The packet writer's settings for these options."""
        return WriterConfig(encoder=self.encoder, progress=self.progress, list_args=self.writer_list_args(),
                            keep_args=self.keep_args, sort_window_bytes=self.sort_window_bytes)

    def writer_list_args(self) -> str:
        """The effective :attr:`list_args` (the deprecated :attr:`shape_args` wins when set)."""
        if self.shape_args is None:
            return self.list_args
        modes = {"string": "text", "typed": "typed"}
        if self.shape_args not in modes:
            raise ValueError(f"shape_args must be one of {tuple(modes)}, not {self.shape_args!r}")
        return modes[self.shape_args]


def write_pftrace(trace: KinetoTrace, out: PathLike, layout: Optional[LaneLayout] = None,
                  config: ConvertConfig = ConvertConfig()) -> WriteStats:
    """Write ``trace`` (GPU events placed by ``layout``, from the join) as a Perfetto trace at ``out``.

    A failed write leaves no file (and any previous ``out`` untouched). An ``out`` that is
    the trace's own file, or has a Chrome JSON name, raises
    :class:`~perfetto_graph_ann.errors.OutputError` (as the CLI refuses them).
    """
    check_protobuf_output(out, [trace.path], "for annotated Chrome JSON use write.chrome_json.write_chrome_json")
    with paused_gc():
        with atomic_write(out, "wb", compress=config.gzip) as f:
            return write_perfetto(trace, f, layout, config.writer_config())


def write_pftrace_stream(trace: KinetoTrace, out: IO[bytes], layout: Optional[LaneLayout] = None,
                         config: ConvertConfig = ConvertConfig()) -> WriteStats:
    """Write ``trace`` as a Perfetto trace to the binary stream ``out`` (no file, no gzip):
    for a consumer that reads the packets as they come (a trace processor being fed)."""
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


