"""Collectives in graphs: eager NCCL metadata on graphed collective kernels.

Eager torch.profiler traces give every NCCL kernel ``Collective name``, ``In msg
nelems``, ``Out msg nelems``, ``Group size``, ``dtype``, ``In split size``, ``Out split
size``, ``Process Group Name``, ``Process Group Description`` and ``Process Group
Ranks``; graphed ones carry none. :func:`annotate_collective` writes exactly those names
with eager's value types (ints for counts and size, strings like ``"Float"``, ``"[]"``,
``"[0, 1]"`` for the rest) plus ``stream``: one logical lane per process group, labelled
``"<pg description> (<collective>)"``.

Inside ``graph(...)`` the ``torch.distributed`` collectives are wrapped (only during
capture) so they annotate themselves. On torch's own backend (torch >= 2.15, which has no
``annotate_collective``) the same fields go to torch's ``mark_kernels`` and the lane comes
from torch's ``get_stream_for_pg``, so graphed NCCL kernels carry them there too. Field
building and wrapping are torch-free: tensors only need ``numel()`` and ``dtype``, groups
are resolved by an injectable function.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import sys
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from . import session as _session
from . import torch_native
from .registry import REGISTRY

__all__ = ["annotate_collective", "AUTO_ANNOTATE", "collective_fields", "COLLECTIVES", "get_stream_for_pg",
           "group_resolver", "GroupInfo", "GroupResolver", "install", "scalar_type_name", "SCALAR_TYPE_NAMES",
           "torch_group_info", "uninstall"]

#: torch dtype name (``str(dtype)`` without ``torch.``) -> c10 ScalarType name as eager traces print it
SCALAR_TYPE_NAMES = {
    "float32": "Float", "float": "Float", "float64": "Double", "double": "Double", "float16": "Half",
    "half": "Half", "bfloat16": "BFloat16", "int8": "Char", "uint8": "Byte", "int16": "Short", "short": "Short",
    "int32": "Int", "int": "Int", "int64": "Long", "long": "Long", "bool": "Bool", "complex32": "ComplexHalf",
    "complex64": "ComplexFloat", "cfloat": "ComplexFloat", "complex128": "ComplexDouble", "cdouble": "ComplexDouble",
    "float8_e4m3fn": "Float8_e4m3fn", "float8_e5m2": "Float8_e5m2", "float8_e4m3fnuz": "Float8_e4m3fnuz",
    "float8_e5m2fnuz": "Float8_e5m2fnuz", "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64",
}

#: torch.distributed function -> (eager "Collective name", input parameter, output parameter)
COLLECTIVES: Dict[str, Tuple[str, str, str]] = {
    "all_reduce": ("allreduce", "tensor", "tensor"),
    "all_gather": ("all_gather", "tensor", "tensor_list"),
    "all_gather_into_tensor": ("_allgather_base", "input_tensor", "output_tensor"),
    "reduce_scatter": ("reduce_scatter", "input_list", "output"),
    "reduce_scatter_tensor": ("_reduce_scatter_base", "input", "output"),
    # torch 2.11's eager trace names even an even-split all_to_all_single "all_to_allv"
    "all_to_all_single": ("all_to_allv", "input", "output"),
    "broadcast": ("broadcast", "tensor", "tensor"),
    "reduce": ("reduce", "tensor", "tensor"),
    "send": ("send", "tensor", "tensor"),
    "recv": ("recv", "tensor", "tensor"),
    "isend": ("send", "tensor", "tensor"),
    "irecv": ("recv", "tensor", "tensor"),
    "barrier": ("barrier", "", ""),
}
_EAGER_TO_OP = {v[0]: k for k, v in COLLECTIVES.items() if k not in ("isend", "irecv")}


@dataclasses.dataclass(frozen=True)
class GroupInfo:
    name: str  #: "Process Group Name", e.g. "0"
    desc: str  #: "Process Group Description", e.g. "default_pg"
    ranks: Tuple[int, ...]  #: global ranks in the group

    @property
    def size(self) -> int:
        return len(self.ranks)


def scalar_type_name(dtype: Any) -> str:
    """``torch.float32`` -> ``"Float"`` (c10's ScalarType name, as eager traces print it)."""
    s = str(dtype)
    s = s[6:] if s.startswith("torch.") else s
    return SCALAR_TYPE_NAMES.get(s, s)


def _numel(x: Any) -> int:
    if x is None:
        return 0
    if isinstance(x, (list, tuple)):
        return sum(_numel(t) for t in x)
    return int(x.numel())


def _dtype(*xs: Any) -> Optional[Any]:
    for x in xs:
        if isinstance(x, (list, tuple)):
            d = _dtype(*x)
            if d is not None:
                return d
        elif x is not None and hasattr(x, "dtype"):
            return x.dtype
    return None


def _split(sizes: Optional[Sequence[int]]) -> str:
    return "[" + ", ".join(str(int(s)) for s in sizes) + "]" if sizes else "[]"


def collective_fields(name: str, input: Any, output: Any, group: GroupInfo,
                      in_splits: Optional[Sequence[int]] = None,
                      out_splits: Optional[Sequence[int]] = None) -> Dict[str, Any]:
    """The eager trace's fields for one collective, with eager's names and value types.

    ``name``: a torch.distributed function name (``all_reduce``) or eager's collective
    name (``allreduce``).
    """
    eager = COLLECTIVES[name][0] if name in COLLECTIVES else name
    if eager == "all_to_all" and (in_splits or out_splits):
        eager = "all_to_allv"
    if eager == "barrier":
        in_n = out_n = 0  # what torch 2.11's eager trace records for ProcessGroupNCCL::barrier
        dtype = "Byte"
    else:
        in_n, out_n = _numel(input), _numel(output)
        d = _dtype(input, output)
        dtype = scalar_type_name(d) if d is not None else "Float"
    return {
        "Collective name": eager,
        "In msg nelems": in_n,
        "Out msg nelems": out_n,
        "Group size": group.size,
        "dtype": dtype,
        "In split size": _split(in_splits),
        "Out split size": _split(out_splits),
        "Process Group Name": group.name,
        "Process Group Description": group.desc,
        "Process Group Ranks": "[" + ", ".join(str(r) for r in group.ranks) + "]",
    }


def torch_group_info(group: Any = None) -> GroupInfo:
    """GroupInfo of a torch ProcessGroup (None: the default group)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    g = group if group is not None else c10d._get_default_group()
    name = str(getattr(g, "group_name", None) or c10d._get_process_group_name(g))
    desc = str(getattr(g, "group_desc", "") or ("default_pg" if g is c10d._get_default_group() else "undefined"))
    ranks = tuple(int(r) for r in dist.get_process_group_ranks(g))
    return GroupInfo(name, desc, ranks)


GroupResolver = Callable[[Any], GroupInfo]
_resolver: List[GroupResolver] = [torch_group_info]


def _group(group: Any) -> GroupInfo:
    return group if isinstance(group, GroupInfo) else _resolver[-1](group)


def get_stream_for_pg(key: Any) -> int:
    """The logical lane of a process group (a ProcessGroup, a GroupInfo or its name): stable, 60 upward.

    On torch's backend, torch's own ``get_stream_for_pg`` (the lanes its ``mark_stream`` shares)."""
    name = key if isinstance(key, str) else _group(key).name
    if _on_torch_backend():
        return int(torch_native.call("get_stream_for_pg", name))
    return REGISTRY.lanes.lane(("pg", name))


def _on_torch_backend() -> bool:
    """Whether torch's own annotations record captures here (then torch gets the fields)."""
    if torch_native.capturing():
        return True
    from . import backends

    return backends.selected_name() == backends.TORCH


@contextlib.contextmanager
def annotate_collective(name: str, input: Any, output: Any, group: Any = None,
                        in_splits: Optional[Sequence[int]] = None,
                        out_splits: Optional[Sequence[int]] = None) -> Iterator[None]:
    """Annotate the kernels a collective launches inside the block with eager's fields.

    A no-op outside ``graph(...)``. The lane is the process group's (see
    :func:`get_stream_for_pg`), labelled ``"<pg description> (<collective>)"``. On torch's
    backend the fields go to torch's ``mark_kernels(fields, backward=False)`` with the lane
    from torch's ``get_stream_for_pg(<process group name>)``.
    """
    sess = _session.current()
    if sess is None and _on_torch_backend():
        g = _group(group)
        fields = collective_fields(name, input, output, g, in_splits, out_splits)
        fields["stream"] = torch_native.call("get_stream_for_pg", g.name)
        with torch_native.call("mark_kernels", fields, backward=False):
            yield
        return
    if sess is None or not sess.recorder.active:
        yield
        return
    g = _group(group)
    fields = collective_fields(name, input, output, g, in_splits, out_splits)
    op = name if name in COLLECTIVES else _EAGER_TO_OP.get(name, name)
    label = f"{g.desc} ({op})"
    fields["stream"] = REGISTRY.lanes.lane(("pg", g.name), label)
    sess.label_lane(fields["stream"], label)  # this capture's label: first collective of the group in it
    tok = sess.recorder.open(fields)
    try:
        yield
    finally:
        sess.recorder.close(tok)


# --- automatic wrapping of torch.distributed during capture -------------------------

_install_lock = threading.Lock()
_installed: Dict[Tuple[int, str], Tuple[Any, Any]] = {}  # (id(module), fn) -> (module, original)
_wrappers: Dict[int, Callable] = {}  # id(original) -> its wrapper, reused by every capture
_install_count = 0
#: set False to stop graph() from wrapping torch.distributed (same as graph(..., annotate_collectives=False))
AUTO_ANNOTATE = True


def _wrap(fn_name: str, original: Callable) -> Callable:
    _, in_param, out_param = COLLECTIVES[fn_name]
    sig: List[Optional[inspect.Signature]] = []  # computed at first use: install stays cheap

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        sess = _session.current()
        if (sess is None or not sess.recorder.active) and not torch_native.capturing():
            return original(*args, **kwargs)
        if not sig:
            try:
                sig.append(inspect.signature(original))
            except (TypeError, ValueError):
                sig.append(None)
        if sig[0] is None:
            return original(*args, **kwargs)
        try:
            bound = sig[0].bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)
        a = bound.arguments
        inp, out = a.get(in_param), a.get(out_param)
        splits = (a.get("input_split_sizes"), a.get("output_split_sizes")) if fn_name == "all_to_all_single" else (None, None)
        with annotate_collective(fn_name, inp, out, a.get("group"), splits[0], splits[1]):
            return original(*args, **kwargs)

    wrapper.__pga_original__ = original  # type: ignore[attr-defined]
    return wrapper


def install(modules: Optional[Sequence[Any]] = None) -> bool:
    """Wrap the collectives of ``modules`` (default: torch.distributed and distributed_c10d).

    By default only when a default process group exists (no group, no collective to
    annotate). Reference counted: nested captures install once; :func:`uninstall` restores
    the originals when the last one ends. Returns whether it installed (then call uninstall).
    """
    global _install_count
    if modules is None:
        dist = sys.modules.get("torch.distributed")  # never imported: no process group exists
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return False
        from torch.distributed import distributed_c10d

        modules = [dist, distributed_c10d]
    with _install_lock:
        _install_count += 1
        for m in modules:
            for fn_name in COLLECTIVES:
                orig = getattr(m, fn_name, None)
                if orig is None or (id(m), fn_name) in _installed or hasattr(orig, "__pga_original__"):
                    continue
                _installed[(id(m), fn_name)] = (m, orig)
                w = _wrappers.get(id(orig))
                if w is None or w.__pga_original__ is not orig:  # type: ignore[attr-defined]
                    w = _wrappers[id(orig)] = _wrap(fn_name, orig)
                setattr(m, fn_name, w)
    return True


def uninstall() -> None:
    """Undo :func:`install` once the last capture using it has ended."""
    global _install_count
    with _install_lock:
        _install_count = max(0, _install_count - 1)
        if _install_count:
            return
        for (_, fn_name), (m, orig) in list(_installed.items()):
            setattr(m, fn_name, orig)
        _installed.clear()


@contextlib.contextmanager
def group_resolver(resolver: GroupResolver) -> Iterator[None]:
    """Resolve process groups with ``resolver`` (tests; other distributed front-ends)."""
    _resolver.append(resolver)
    try:
        yield
    finally:
        _resolver.remove(resolver)
