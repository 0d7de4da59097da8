"""Query stage: Perfetto traces in a trace processor, with the ``graph_ann`` SQL package.

Depends on no other stage: a torch.profiler JSON trace reaches it converted by the
pipeline (:mod:`perfetto_graph_ann.pipeline.query`).
"""

__all__: "list[str]" = []
