"""Benchmark (issue 31): what naming a root from its owners costs (``capture.modules.model_of``:
the modules on the stack, then who holds the module, ``capture.owners``).

    python benchmarks/module_owners.py [--objects 0 1000000 3000000] [--rounds 5] [--stand-in]

A runner that calls ``model.forward(...)`` itself makes the inner model the first module a
capture calls; its paths are then named from the model that holds it, found among the garbage
collector's objects. This runs once per root, at the first capture that meets it. For a 36-layer
decoder (``torch.nn`` modules: 400 of them) in a process holding ``--objects`` extra objects
(small dicts with a list, as a program's data), it times ``model_of(model.model)`` (a held
module), ``model_of(model)`` (the model a runner calls, held by nothing) and
``model_of(model.model)`` from a method of ``model`` (SGLang's runner calls ``model.forward``,
which calls the inner model: on Python >= 3.12 ``model`` is found on the stack) on both capture
paths, arms alternating: ``python`` (a scan of the module's referrers per question, and a pass
over ``gc.get_objects()`` for a held one) and ``compiled`` (one pass in C answers all:
``_owners.c``); it prints the median and best of ``--rounds``, per tracked object too, and the
ratio of the medians. ``--stand-in``: modules of a small stand-in for ``torch.nn`` (their
``_modules`` as torch keeps them), for a Python without torch (the compiled pass walks the
collector's lists itself from Python 3.12 on).
"""
from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import statistics
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _stand_in_nn() -> types.ModuleType:
    """``--stand-in``: a ``torch.nn`` of the few classes below, installed as ``sys.modules["torch.nn"]``
    (where ``model_of`` looks up the module class), for a Python that has no torch. Its modules
    keep their submodules in ``_modules`` as torch's do; what is timed reads nothing else."""
    nn = types.ModuleType("torch.nn")

    class Module:
        def __init__(self) -> None:
            object.__setattr__(self, "_modules", {})

        def __setattr__(self, name: str, value) -> None:
            if isinstance(value, Module):
                self._modules[name] = value
            else:
                object.__setattr__(self, name, value)

        def __getattr__(self, name: str):
            try:
                return object.__getattribute__(self, "_modules")[name]
            except KeyError:
                raise AttributeError(name) from None

        def modules(self):
            yield self
            for m in self._modules.values():
                yield from m.modules()

    class Container(Module):
        def __init__(self, items) -> None:
            super().__init__()
            for k, v in items:
                setattr(self, k, v)

    nn.Module = Module
    nn.LayerNorm = nn.Linear = nn.Embedding = lambda *a: Module()
    nn.ModuleDict = lambda d: Container(d.items())
    nn.ModuleList = lambda it: Container((str(i), m) for i, m in enumerate(it))
    sys.modules["torch.nn"] = nn
    return nn


if "--stand-in" in sys.argv:
    nn = _stand_in_nn()
else:
    from torch import nn  # noqa: E402

from perfetto_graph_ann.capture import fastpath  # noqa: E402
from perfetto_graph_ann.capture.modules import model_of  # noqa: E402


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = nn.LayerNorm(8), nn.LayerNorm(8)
        self.self_attn = nn.ModuleDict({k: nn.Linear(8, 8) for k in ("q_proj", "k_proj", "v_proj", "o_proj")})
        self.mlp = nn.ModuleDict({k: nn.Linear(8, 8) for k in ("gate_proj", "up_proj", "down_proj")})


class Inner(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(16, 8)
        self.layers = nn.ModuleList(Layer() for _ in range(layers))
        self.norm = nn.LayerNorm(8)


class CausalLM(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.model, self.lm_head = Inner(layers), nn.Linear(8, 16)

    def name_inner(self):
        """What a capture names when this model's ``forward`` calls its inner model: it is on
        the stack (Python >= 3.12), so ``model_of`` asks whether the way down is shared, then
        whether anything holds this model."""
        return model_of(self.model)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, nargs="+", default=[0, 1_000_000, 3_000_000])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--stand-in", action="store_true",
                    help="no torch: modules of a stand-in torch.nn that keeps _modules as torch's does")
    args = ap.parse_args()
    model = CausalLM(36)
    print(f"{platform.node()} {platform.machine()} Python {platform.python_version()} "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; load {os.getloadavg()[0]:.2f}; "
          f"{sum(1 for _ in model.modules())} modules{' (stand-in torch.nn)' if args.stand_in else ''}")
    if not fastpath.module_built():
        raise SystemExit(f"the compiled capture path is not built here: {fastpath.describe()}")
    print("| extra objects | tracked objects | module | python median ms (best) | compiled median ms (best) | "
          "ns a tracked object, python / compiled | compiled / python |")
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    for n in args.objects:
        data = [{"a": i, "b": [i]} for i in range(n // 2)]  # two tracked objects each
        tracked = len(gc.get_objects())
        for label, name, want in (("held (`model.model`)", lambda: model_of(model.model), model),
                                  ("not held (`model`)", lambda: model_of(model), model),
                                  ("`model.model` from `model`'s method", model.name_inner, model)):
            times = {"python": [], "compiled": []}
            for r in range(args.rounds):
                for arm in (("python", "compiled") if r % 2 == 0 else ("compiled", "python")):
                    fastpath.ENABLED = arm == "compiled"
                    t = time.perf_counter()
                    found = name()
                    times[arm].append(time.perf_counter() - t)
                    assert found is want
            med = {a: statistics.median(v) for a, v in times.items()}
            print(f"| {n:,} | {tracked:,} | {label} | {med['python'] * 1e3:.1f} ({min(times['python']) * 1e3:.1f}) | "
                  f"{med['compiled'] * 1e3:.1f} ({min(times['compiled']) * 1e3:.1f}) | "
                  f"{med['python'] * 1e9 / tracked:.0f} / {med['compiled'] * 1e9 / tracked:.0f} | "
                  f"{med['compiled'] / med['python']:.2f}x |")
        del data

if __name__ == "__main__":
    main()
