"""The annotation model and its files: the ground floor every stage builds on.

``model`` holds what capture records per executable-graph node (:class:`AnnotationSet`,
node keys, lane ids); ``files`` saves and loads it (the binary and JSON sidecar,
``sidecar_proto`` / ``sidecar_json``) and reads the fixtures' capture records
(``capture_record``); ``scope_instances`` builds and walks the scope tables. No torch, and
nothing of the package above ``errors`` and ``util``: capture produces an
:class:`AnnotationSet`, the join and the writers consume it.
"""

__all__: "list[str]" = []
