"""Fleet analysis on a local Ray instance (``ray.init(num_cpus=2)``): 32 synthetic ranks
with one delayed, Ray against local, a worker killed mid-run, traces sent through the
object store. Skipped where Ray is not installed (the ``cluster`` extra)."""
from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time

import pandas as pd
import pytest

from support.engine_support import requires_portable
from support.fleet_synth import expected_report, make_fleet, nccl_starts_ns
from perfetto_graph_ann.errors import EngineError
from perfetto_graph_ann.query.engine import EngineConfig, choose_engine

ray = pytest.importorskip("ray")
# one xdist worker runs the whole module: its Ray instance takes ~30 s to start (--dist loadgroup)
pytestmark = [requires_portable, pytest.mark.xdist_group("ray")]

N = 32
DELAYED = 5
DELAY_NS = 2_000_000  # 2 ms
PORTABLE = EngineConfig(engine="portable")
COUNT_SQL = "SELECT COUNT(*) AS n FROM slice WHERE category = 'kernel' AND name GLOB '*ncclDevKernel*'"


@contextlib.contextmanager
def short_ray_dir():
    """A folder for Ray's files whose path is short, removed afterwards. Ray puts its Unix
    sockets under it (``session_<date>_<pid>/sockets/plasma_store``) and a socket path has at
    most 107 bytes: under pytest's base temp (``--basetemp``, a long ``TMPDIR``) Ray failed."""
    path = tempfile.mkdtemp(prefix="pga-ray-", dir="/tmp" if os.path.isdir("/tmp") else None)
    try:
        yield path
    finally:
        for _ in range(40):  # a process Ray is stopping may still write its last log lines
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.exists(path):
                break
            time.sleep(0.25)


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance with its files in a short temporary folder, shut down after the
    module (no token file in ~/.ray: token auth off for this loopback-only instance)."""
    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    with short_ray_dir() as temp_dir:
        ray.init(num_cpus=2, _temp_dir=temp_dir, include_dashboard=False,
                 log_to_driver=False, object_store_memory=96 << 20, _node_ip_address="127.0.0.1")
        try:
            yield ray
        finally:
            ray.shutdown()
    if saved is None:
        os.environ.pop("RAY_AUTH_MODE", None)
    else:
        os.environ["RAY_AUTH_MODE"] = saved


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fleet")
    make_fleet(folder, N, DELAYED, DELAY_NS)
    return folder


@pytest.fixture(scope="module")
def ray_report(local_ray, fleet_dir):
    import perfetto_graph_ann as pga

    return pga.fleet_report([fleet_dir], executor="ray", config=PORTABLE, progress=False)


@pytest.fixture(scope="module")
def local_report(fleet_dir):
    import perfetto_graph_ann as pga

    return pga.fleet_report([fleet_dir], executor="local", config=PORTABLE, progress=False, max_workers=2)


def test_the_delayed_rank_and_its_delay_are_named(ray_report):
    exp = expected_report(N, DELAYED, DELAY_NS)
    top = ray_report.ranking.iloc[0]
    assert top["rank"] == DELAYED and top["times_last"] == len(exp["instances"])
    assert abs(top["median_lateness_ns"] - DELAY_NS) <= 1000  # the injected delay, within 1 us
    assert top["median_lateness_ns"] == exp["median_lateness"][DELAYED]
    c = ray_report.collectives.sort_values("seq")
    assert c["blamed"].all() and (c["ranks"] == N).all() and (c["expected_ranks"] == N).all()
    assert c["spread_ns"].tolist() == [i["spread_ns"] for i in exp["instances"]]
    assert c["last_lead_ns"].tolist() == [i["lead_ns"] for i in exp["instances"]]
    assert c["peer_wait_ns"].tolist() == [i["peer_wait_ns"] for i in exp["instances"]]
    assert (c["last_rank"] == DELAYED).all()
    caused = ray_report.ranking.set_index("rank")["peer_wait_caused_ns"]
    assert caused.to_dict() == pytest.approx(exp["caused"])
    assert sorted(ray_report.ranks["rank"]) == list(range(N))
    assert len(ray_report.lanes) == 2 * N  # stream 7 and the all_reduce lane on every rank


def test_ray_returns_exactly_what_local_returns(ray_report, local_report):
    for name in ("ranking", "collectives", "arrivals", "lanes", "ranks"):
        pd.testing.assert_frame_equal(getattr(ray_report, name), getattr(local_report, name), check_exact=True)


def test_query_many_on_ray_equals_local(local_ray, fleet_dir):
    import perfetto_graph_ann as pga

    traces = [fleet_dir / f"rank{r}.trace.json.gz" for r in (3, 0, 1)]
    sql = {"count": COUNT_SQL, "mixed": "SELECT id, name, dur, arg_set_id, NULL AS missing FROM slice ORDER BY id LIMIT 7"}
    on_ray = pga.query_many(traces, sql, executor="ray", config=PORTABLE, progress=False)
    here = pga.query_many(traces, sql, executor="local", config=PORTABLE, progress=False)
    for name in sql:
        pd.testing.assert_frame_equal(on_ray[name], here[name], check_exact=True)
    assert on_ray["count"]["trace"].tolist() == [str(t) for t in traces]  # input order
    assert on_ray["count"]["n"].tolist() == [len(nccl_starts_ns(r % 2)) for r in (3, 0, 1)]


def test_traces_the_workers_cannot_see_travel_through_the_object_store(local_ray, fleet_dir, monkeypatch):
    import perfetto_graph_ann as pga
    from perfetto_graph_ann.query.executors import RayOptions

    # Relative paths from a folder the workers (started in the driver's first folder) are not in.
    monkeypatch.chdir(fleet_dir)
    names = ["rank0.trace.json.gz", "rank1.trace.json.gz"]

    def visible(path):
        return os.path.exists(path)

    assert os.path.exists(names[0]) and not ray.get(ray.remote(visible).remote(names[0]))
    for ship in ("auto", "store"):
        df = pga.query_many(names, COUNT_SQL, executor="ray", config=PORTABLE, progress=False,
                            annotations=[n.replace(".trace.json.gz", ".annotations.json") for n in names],
                            ray_options=RayOptions(ship=ship))
        assert df["trace"].tolist() == names and df["n"].tolist() == [5, 5]
    with pytest.raises(EngineError, match=r"rank[01]\.trace\.json\.gz: not readable at this path"):
        pga.query_many(names, COUNT_SQL, executor="ray", config=PORTABLE, progress=False,
                       ray_options=RayOptions(ship="path"))


def _node_that_kills_its_worker_once(tmp_path, marker):
    """A ``node`` that, the first time it runs, SIGKILLs the process that started it (the Ray
    worker running the task) and otherwise is the real node."""
    real = choose_engine(PORTABLE).node
    script = tmp_path / "node"
    script.write_text(f"#!/bin/sh\nif mkdir '{marker}' 2>/dev/null; then kill -9 $PPID; sleep 5; exit 1; fi\n"
                      f"exec '{real}' \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_a_worker_that_dies_is_retried_and_the_run_completes(local_ray, fleet_dir, tmp_path):
    import perfetto_graph_ann as pga
    from perfetto_graph_ann.query.executors import RayOptions

    marker = tmp_path / "killed-once"
    node = _node_that_kills_its_worker_once(tmp_path, marker)
    traces = [fleet_dir / f"rank{r}.trace.json.gz" for r in (0, 1)]
    df = pga.query_many(traces, COUNT_SQL, executor="ray", config=EngineConfig(engine="portable", node_path=node),
                        progress=False, ray_options=RayOptions(max_retries=2))
    assert marker.exists()  # a worker was killed
    assert df["n"].tolist() == [5, 5]


def test_a_worker_that_keeps_dying_fails_naming_its_trace(local_ray, fleet_dir, tmp_path):
    import perfetto_graph_ann as pga
    from perfetto_graph_ann.query.executors import RayOptions

    node = _node_that_kills_its_worker_once(tmp_path, tmp_path / "killed-once")
    trace = fleet_dir / "rank0.trace.json.gz"
    with pytest.raises(EngineError, match=f"{trace}: the Ray task failed after 0 retries"):
        pga.query_many([trace], COUNT_SQL, executor="ray", config=EngineConfig(engine="portable", node_path=node),
                       progress=False, ray_options=RayOptions(max_retries=0))


_HEAD = """
import sys, ray
ray.init(num_cpus=1, _temp_dir=sys.argv[1], include_dashboard=False, _node_ip_address="127.0.0.1")
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()  # until the test closes it
ray.shutdown()
"""


def test_fleet_cli_joins_a_running_cluster_by_address():
    import json
    import subprocess
    import sys

    from support.fleet_synth import LIVE

    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    with short_ray_dir() as temp_dir:
        head = subprocess.Popen([sys.executable, "-c", _HEAD, temp_dir], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            address = head.stdout.readline().strip()
            assert address, "the head did not start"
            cli = subprocess.run([sys.executable, "-m", "perfetto_graph_ann", "fleet", str(LIVE), "--ray", address,
                                  "--engine", "portable", "--format", "json"], env=env, capture_output=True,
                                 text=True, timeout=240)
            assert cli.returncode == 0, cli.stderr[-3000:]
            doc = json.loads(cli.stdout)
            assert doc["ranking"][0]["rank"] == 1 and doc["worst_collectives"][0]["last_rank"] == 1
        finally:
            head.stdin.close()
            try:
                head.wait(timeout=60)
            except subprocess.TimeoutExpired:
                head.kill()
                head.wait()
