"""The one place where the stages are wired: read -> join -> write (-> query).

Each stage only knows the one below it (``read`` a file, ``join`` a read trace with an
:class:`~perfetto_graph_ann.annotations.model.AnnotationSet`, a writer ``(trace, out,
layout, options)``, ``query`` a trace processor); these modules decide what runs in which
order for each use:

* :mod:`.joined`: :func:`~.joined.read_and_join`, the one way every entry point below
  reads a trace and joins it (the graph-lanes rule, the trace's rank, the progress phases);
* :mod:`.convert`: one trace to ``.pftrace`` or annotated Chrome JSON (``convert``, the
  CLI's ``convert``, ``lanes``, ``report`` and ``sql``), joined with annotation files;
* :mod:`.merge`: several ranks' traces into one ``.pftrace``;
* :mod:`.query`: a converted trace fed into a trace processor (``open_converted``; a JSON
  file read, joined and fed while the engine starts: ``open_json``, the CLI's ``report``), and
  the conversion the many-trace queries (``query_many``, ``fleet_report``) run on a worker.

The capture side (``capture.export`` / ``trace_handler``) and the CLI sit on top.
"""

__all__: "list[str]" = []
