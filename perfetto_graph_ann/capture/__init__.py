"""Capture stage: mark regions while capturing a CUDA graph; key, rekey and calibrate nodes.

The torch-facing top of the flow: it produces an
:class:`~perfetto_graph_ann.annotations.model.AnnotationSet` (``recorded``), whose model and
file formats live in :mod:`perfetto_graph_ann.annotations`. Only ``api``, ``backends`` and
``collectives`` import torch, and only when used.
"""

__all__: "list[str]" = []
