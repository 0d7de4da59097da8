"""Graph and node ids across a CUPTI detach (the keys are CUPTI's ids on drivers before 13.1).

Run as its own process (tests/gpu/run_all.sh runs each file so): no torch.profiler may have
started in it (a profiler takes CUPTI for good, and no detach runs after it). A graph captured
before a detach must keep its ids once CUPTI is initialised again, and a graph captured after
must get ids of its own: otherwise keys taken before a detach would name other graphs' nodes.
"""
from __future__ import annotations

import os

import pytest
import torch

import perfetto_graph_ann as pga
from perfetto_graph_ann.capture import instrument as inst, nodewatch
from perfetto_graph_ann.capture.registry import REGISTRY

from test_cupti_detach_gpu import Model

pytestmark = pytest.mark.gpu


def _scoped(model, x, name):
    g = torch.cuda.CUDAGraph()
    with pga.graph(g, calibrate=False):
        with pga.mark_kernels(name):
            model(x)
    g.replay()  # binds the executable graph: its id is read now
    torch.cuda.synchronize()
    return g, REGISTRY.get(g._pga_owner)


def test_graph_ids_survive_a_detach(results):
    """The keys are CUPTI's ids: a graph captured before a detach keeps its ids after CUPTI is
    initialised again (its calibration then, in the new CUPTI, finds every node by its key),
    and a graph captured after gets ids of its own (no numbering restarts)."""
    os.environ["PERFETTO_GRAPH_ANN_DETACH_CUPTI_MS"] = "off"  # detached by hand here
    inst.uninstrument()
    model = Model()
    x = torch.zeros(16, device="cuda")
    model(x)
    torch.cuda.synchronize()
    g1, rec1 = _scoped(model, x, "one")
    if not nodewatch.WATCH.attached:  # the node watch is off or refused: CUPTI attached by the ids anyway
        nodewatch.WATCH.idle(nodewatch.WATCH._detach_fns)
    assert nodewatch.WATCH.detach(), f"not detached (refused: {nodewatch.WATCH.detach_refused})"
    g2, rec2 = _scoped(model, x, "two")  # CUPTI initialised again by this capture
    pga.calibrate(g1)  # activity records of g1's replay, in the new CUPTI
    rec1 = REGISTRY.get(g1._pga_owner)
    calibrated = sum(1 for n in rec1.nodes if n.ordinal is not None)
    ids = {"before": {"template": rec1.template_id, "exec": rec1.exec_id},
           "after": {"template": rec2.template_id, "exec": rec2.exec_id}, "calibrated_before": calibrated}
    results["ids_across_detach"] = ids
    assert calibrated == 64, ids
    assert rec2.exec_id != rec1.exec_id and rec2.template_id != rec1.template_id, ids
    assert rec2.exec_id > rec1.exec_id and rec2.template_id > rec1.template_id, ids
