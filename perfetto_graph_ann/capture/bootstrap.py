"""Instrumentation at interpreter start: what ``perfetto-graph-ann run`` puts in every Python
process it starts (and in their Python children).

The launcher prepends the folder ``capture/_site`` to ``PYTHONPATH`` and sets
``PERFETTO_GRAPH_ANN_RUN`` (a JSON :class:`RunConfig`); that folder's ``sitecustomize`` calls
:func:`start` when any Python process with that environment starts, the program itself and its
``multiprocessing`` spawn / forkserver workers alike (a forked child inherits the parent's
state). Nothing here imports torch: the capture hooks go in when torch is imported.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any, Dict, Optional, Tuple

from .. import settings
from ..errors import SettingError

__all__ = ["RunConfig", "SITE_DIR", "start"]

#: The folder whose ``sitecustomize.py`` runs :func:`start`.
SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_site")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What the launcher asks of each process (``PERFETTO_GRAPH_ANN_RUN``)."""

    out: Optional[str] = None  #: folder for each process's sidecar
    modules: bool = False
    max_depth: Optional[int] = None
    include: Tuple[str, ...] = ()
    exclude: Tuple[str, ...] = ()
    calibrate: bool = True
    annotate_collectives: bool = True

    def to_env(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @staticmethod
    def from_env(text: str) -> "RunConfig":
        name = settings.RUN.name
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise SettingError(f"{name}: not JSON ({e})") from e
        if not isinstance(doc, dict):
            raise SettingError(f"{name}: expected a JSON object, got {type(doc).__name__}")
        fields = {f.name for f in dataclasses.fields(RunConfig)}
        unknown = sorted(set(doc) - fields)
        if unknown:
            raise SettingError(f"{name}: unknown keys {', '.join(unknown)}")
        kw: Dict[str, Any] = dict(doc)
        for k in ("include", "exclude"):
            if k in kw:
                kw[k] = tuple(kw[k])
        return RunConfig(**kw)

    def module_scopes(self) -> Any:
        from .modules import ModuleScopes

        if not self.modules:
            return False
        return ModuleScopes(self.max_depth, self.include, self.exclude)


def start() -> bool:
    """Instrument this process from ``PERFETTO_GRAPH_ANN_RUN``; False when it is not set.

    A problem is one line on stderr, never an exception: the program runs as it would
    without us (the launcher checked the settings before starting it)."""
    text = settings.text(settings.RUN)
    if not text:
        return False
    try:
        cfg = RunConfig.from_env(text)
        from .instrument import instrument

        instrument(modules=cfg.module_scopes(), calibrate=cfg.calibrate,
                   annotate_collectives=cfg.annotate_collectives, out=cfg.out)
    except Exception as e:  # noqa: BLE001 - never break the program
        print(f"perfetto_graph_ann: instrumentation not started in pid {os.getpid()}: {e}", file=sys.stderr)
        return False
    return True
