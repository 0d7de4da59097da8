"""Write stage: a read trace and its join layout out as a file.

Every writer takes ``(trace, out, layout, options)`` and nothing else: ``pftrace``
(native Perfetto), ``chrome_json`` (annotated Chrome JSON), ``merge`` (converted ranks
combined). Reading and joining are the pipeline's (:mod:`perfetto_graph_ann.pipeline`).
"""

__all__: "list[str]" = []
