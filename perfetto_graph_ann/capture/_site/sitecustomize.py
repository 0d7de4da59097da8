"""Run by Python at start-up where ``perfetto-graph-ann run`` put this folder on PYTHONPATH:
instrument the process, then run the ``sitecustomize`` that would have run without us."""
import importlib.util
import os
import sys


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        cand = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(cand):
            spec = importlib.util.spec_from_file_location("_pga_chained_sitecustomize", cand)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


try:
    from perfetto_graph_ann.capture.bootstrap import start

    start()
except Exception as e:  # noqa: BLE001 - the program must run whatever happens here
    print(f"perfetto_graph_ann: instrumentation not started: {e}", file=sys.stderr)
_chain()
