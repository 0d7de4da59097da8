"""Diff two runs: what got slower (or faster) between a base and a new trace, per graph replay,
scope, lane, collective and kernel, and which differences are beyond replay-to-replay noise.

The two runs are merged as two labelled groups (``base``, ``new``) of one trace, as ``merge
--label`` does, and loaded into one engine session (:func:`perfetto_graph_ann.pipeline.diff.diff`);
``sql/graph_ann/diff.sql`` lists per replay and per (replay, item) the numbers compared; this
module matches the runs and computes the statistics (docs/design.md, "Diff"):

- **Matching**: graph replays by graph name and kernel count (a graph of one name whose kernel
  count changed is still matched, status ``kernel count changed``); then, within a matched
  graph, scopes by path, lanes by name, collectives by type and kernels by name. An item of one
  run only is ``new`` or ``vanished``.
- **Statistics**: per matched item and run, the median (nearest rank) and the spread across
  replays (``range`` = max - min, or ``iqr`` = p75 - p25) of its wall / span, busy and GPU time,
  kernel count and (replays) launch latency.
- **Effect and the rule**: an item's time per replay is the replay's wall time, a scope's or
  lane's busy time, a kernel's or collective's GPU time (sum of durations); its effect is the
  difference of the medians (new - base). A difference is *real* when its size exceeds the
  spread of the base run and the spread of the new run (and ``min_delta_ns``); new and vanished
  items are real. Differences are ranked real ones first, then by the size of the effect; on
  a tie, scopes before collectives, kernels and lanes, and deeper scopes first (the most
  specific explanation first).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import InputError

__all__ = ["DiffConfig", "compare", "diff_rule", "read_diff", "KINDS"]

#: Kinds of rows, in the order ties are broken (the replay rows come first, unranked).
KINDS = ("replay", "scope", "collective", "kernel", "lane")
#: The time per replay whose median difference is an item's effect, per kind.
EFFECT_METRIC = {"replay": "wall_dur", "scope": "busy_dur", "lane": "busy_dur", "collective": "gpu_dur",
                 "kernel": "gpu_dur"}
#: Metrics compared per kind (the median, min and max of each, per run).
METRICS = {"replay": ("wall_dur", "busy_dur", "gpu_dur", "kernel_count", "launch_latency_dur"),
           "scope": ("dur", "busy_dur", "kernel_count"),
           "lane": ("dur", "busy_dur", "gpu_dur", "kernel_count"),
           "collective": ("gpu_dur", "kernel_count"),
           "kernel": ("gpu_dur", "kernel_count")}
ALL_METRICS = ("wall_dur", "dur", "busy_dur", "gpu_dur", "kernel_count", "launch_latency_dur")
LABELS = ("base", "new")

@dataclasses.dataclass(frozen=True)
class DiffConfig:
    """How two runs are compared.

    ``spread``: the replay-to-replay spread a difference must exceed in both runs to be real:
    ``"range"`` (max - min across replays, default) or ``"iqr"`` (p75 - p25, nearest rank).
    ``min_delta_ns``: a difference must also exceed this many ns (default 0).
    ``graph_lanes`` / ``force``: as for ``convert`` (JSON inputs joined with annotations).
    """

    spread: str = "range"
    min_delta_ns: int = 0
    graph_lanes: Optional[str] = None
    force: bool = False

    def __post_init__(self) -> None:
        if self.spread not in ("range", "iqr"):
            raise ValueError(f"spread must be 'range' or 'iqr', not {self.spread!r}")
        if self.min_delta_ns < 0:
            raise ValueError("min_delta_ns must be >= 0")


def diff_rule(config: Optional[DiffConfig] = None) -> str:
    """The rule a diff applies, in one line (printed above its table, in ``df.attrs['rule']``)."""
    config = config or DiffConfig()
    spread = "max - min" if config.spread == "range" else "p75 - p25"
    extra = f" and > {config.min_delta_ns} ns" if config.min_delta_ns else ""
    return (f"real difference: |median(new) - median(base)| of the time per replay > the replay-to-replay spread "
            f"({spread}) of BOTH runs{extra}; time = wall time (replays), busy time (scopes, lanes), GPU time "
            f"(kernels, collectives); new and vanished items are real; ranked real first, then by |delta|")


# -- statistics ----------------------------------------------------------------------------

def _nearest_rank(sorted_values: List[float], p: int) -> float:
    """The p-th percentile, nearest rank: the k-th smallest with k = ceil(p * n / 100), as in SQL."""
    k = max(1, -(-p * len(sorted_values) // 100))
    return sorted_values[k - 1]


def _stats(values: List, spread: str) -> Optional[Tuple[float, float, float, float]]:
    """(median, min, max, spread) of the non-null values, None when there are none."""
    vals = sorted(v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v)))
    if not vals:
        return None
    med = _nearest_rank(vals, 50)
    width = vals[-1] - vals[0] if spread == "range" else _nearest_rank(vals, 75) - _nearest_rank(vals, 25)
    return med, vals[0], vals[-1], width


# -- the diff ------------------------------------------------------------------------------

def read_diff(session, paths: Sequence[str], config: Optional[DiffConfig] = None):
    """The diff of the two runs of ``session``: a merged trace whose groups are labelled
    ``base`` and ``new`` (``paths``: their files, for the errors); see
    :func:`perfetto_graph_ann.pipeline.diff.diff`."""
    session.query("INCLUDE PERFETTO MODULE graph_ann.diff;")
    groups = session.query_df("SELECT group_id, label FROM graph_ann_group ORDER BY group_id")
    replays = session.query_df("SELECT * FROM graph_ann_diff_replay")
    items = session.query_df("SELECT * FROM graph_ann_diff_item")
    label_of = {int(g): lab for g, lab in zip(groups["group_id"], groups["label"])}
    if sorted(map(str, label_of.values())) != sorted(LABELS):
        raise InputError(paths[0], f"the merged runs have groups {sorted(map(str, label_of.values()))}, not base/new")
    for path, label in zip(paths, LABELS):
        if not (replays["group_id"].map(label_of) == label).any():
            raise InputError(path, "has no CUDA graph replays to compare (graph launches with GPU work)")
    return compare(replays.assign(run=replays["group_id"].map(label_of)),
                   items.assign(run=items["group_id"].map(label_of)), config)


def _graph_pairs(replays) -> Tuple[Dict[Tuple[str, str], Tuple[str, str]], List[dict]]:
    """Match graphs: by (name, kernel count), then by name alone. Returns (run, (name, kernel
    count)) -> the graph's key in the diff, for every graph of either run, matched or not, and
    per graph key its status (``matched``, ``kernel count changed (a -> b)``, ``new``, ``vanished``)."""
    keys = {}
    for run in LABELS:
        sub = replays[replays["run"] == run]
        keys[run] = sorted({(str(n), int(k)) for n, k in zip(sub["graph_name"], sub["kernel_count"])})
    base_keys, new_keys = set(keys["base"]), set(keys["new"])
    graphs: List[dict] = []
    assign: Dict[Tuple[str, Tuple[str, int]], str] = {}
    for k in sorted(base_keys & new_keys):
        gid = f"{k[0]}" if sum(1 for b in base_keys if b[0] == k[0]) == 1 else f"{k[0]} ({k[1]} kernels)"
        assign[("base", k)] = assign[("new", k)] = gid
        graphs.append({"graph": gid, "status": "matched"})
    left_b = sorted(base_keys - new_keys)
    left_n = sorted(new_keys - base_keys)
    for kb in list(left_b):
        same = [kn for kn in left_n if kn[0] == kb[0]]
        if len(same) == 1 and sum(1 for x in left_b if x[0] == kb[0]) == 1:
            kn = same[0]
            gid = kb[0]
            assign[("base", kb)] = assign[("new", kn)] = gid
            graphs.append({"graph": gid, "status": f"kernel count changed ({kb[1]} -> {kn[1]})"})
            left_b.remove(kb)
            left_n.remove(kn)
    for run, left in (("base", left_b), ("new", left_n)):
        for k in left:
            gid = f"{k[0]} ({k[1]} kernels)"
            assign[(run, k)] = gid
            graphs.append({"graph": gid, "status": "vanished" if run == "base" else "new"})
    return assign, graphs


def compare(replays, items, config: Optional[DiffConfig] = None):
    """The diff of the rows of ``graph_ann_diff_replay`` / ``graph_ann_diff_item`` of two runs,
    each with a ``run`` column (``base`` / ``new``); see :func:`perfetto_graph_ann.pipeline.diff.diff`."""
    import pandas as pd

    config = config or DiffConfig()
    assign, graphs = _graph_pairs(replays)
    graph_of_launch: Dict[Tuple[str, int], str] = {}
    for run, launch, name, count in zip(replays["run"], replays["launch_id"], replays["graph_name"],
                                        replays["kernel_count"]):
        graph_of_launch[(run, int(launch))] = assign[(run, (str(name), int(count)))]
    # values[(kind, graph, name)][run][metric] -> per-replay values
    values: Dict[Tuple[str, str, str], Dict[str, Dict[str, List]]] = {}
    depth: Dict[Tuple[str, str, str], int] = {}

    def add(kind, graph, name, run, row, metrics):
        slot = values.setdefault((kind, graph, name), {r: {m: [] for m in ALL_METRICS} for r in LABELS})
        for m in metrics:
            v = row.get(m)
            slot[run][m].append(None if v is None or pd.isna(v) else int(v))

    for row in replays.to_dict("records"):
        graph = graph_of_launch[(row["run"], int(row["launch_id"]))]
        add("replay", graph, graph, row["run"], row, METRICS["replay"])
    for row in items.to_dict("records"):
        graph = graph_of_launch.get((row["run"], int(row["launch_id"])))
        if graph is None:
            continue
        key = (row["kind"], graph, str(row["name"]))
        add(row["kind"], graph, str(row["name"]), row["run"], row, METRICS[row["kind"]])
        depth[key] = int(row["depth"]) if not pd.isna(row["depth"]) else 0
    status_of_graph = {g["graph"]: g["status"] for g in graphs}
    rows = []
    for (kind, graph, name), runs in values.items():
        effect = EFFECT_METRIC[kind]
        out = {"kind": kind, "graph_name": graph, "name": name if kind != "replay" else graph,
               "depth": depth.get((kind, graph, name), 0), "metric": effect}
        n = {r: max((len(v) for v in runs[r].values()), default=0) for r in LABELS}
        out["base_replays"], out["new_replays"] = n["base"], n["new"]
        stats = {}
        for r in LABELS:
            for m in ALL_METRICS:
                s = _stats(runs[r][m], config.spread)
                stats[(r, m)] = s
                out[f"{r}_p50_{m}"] = s[0] if s else None
                out[f"{r}_min_{m}"] = s[1] if s else None
                out[f"{r}_max_{m}"] = s[2] if s else None
        sb, sn = stats[("base", effect)], stats[("new", effect)]
        if n["base"] and n["new"]:
            status = status_of_graph.get(graph, "matched") if kind == "replay" else "matched"
        else:
            status = "new" if n["new"] else "vanished"
        out["status"] = status
        out["base_dur"] = sb[0] if sb else None
        out["new_dur"] = sn[0] if sn else None
        out["base_spread_dur"] = sb[3] if sb else None
        out["new_spread_dur"] = sn[3] if sn else None
        if sb and sn:
            delta = sn[0] - sb[0]
            real = abs(delta) > sb[3] and abs(delta) > sn[3] and abs(delta) > config.min_delta_ns
        elif sb or sn:
            delta = (sn[0] if sn else 0) - (sb[0] if sb else 0)
            real = True
        else:
            delta, real = None, False
        out["delta_dur"] = delta
        out["delta_fraction"] = (delta / sb[0]) if (sb and sn and sb[0]) else None
        out["real"] = bool(real)
        rows.append(out)
    order = {k: i for i, k in enumerate(KINDS)}
    rows.sort(key=lambda o: (o["kind"] != "replay", not o["real"], -abs(o["delta_dur"] or 0), order[o["kind"]],
                             -o["depth"], o["graph_name"], o["name"]))
    rank = 0
    for o in rows:
        if o["kind"] == "replay":
            o["rank"] = None
        else:
            rank += 1
            o["rank"] = rank
    front = ["rank", "kind", "graph_name", "name", "status", "real", "delta_dur", "delta_fraction", "metric",
             "base_dur", "new_dur", "base_spread_dur", "new_spread_dur", "base_replays", "new_replays", "depth"]
    rest = [f"{r}_{s}_{m}" for m in ALL_METRICS for r in LABELS for s in ("p50", "min", "max")]
    df = pd.DataFrame(rows, columns=front + rest)
    for c in ["rank", "delta_dur", "base_dur", "new_dur", "base_spread_dur", "new_spread_dur", "base_replays",
              "new_replays", "depth", *rest]:
        df[c] = df[c].astype("Int64")
    df = df.reset_index(drop=True)
    df.attrs["rule"] = diff_rule(config)
    return df
