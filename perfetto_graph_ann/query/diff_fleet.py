"""Diff two fleets of ranks: the one-rank diff (:mod:`.diff`) of each pair of ranks of one rank
number, combined per item into the fleet's comparison (docs/design.md, "Diff of two fleets").

- **Per rank**: rank ``r`` of the base fleet is compared with rank ``r`` of the new fleet by
  :func:`~perfetto_graph_ann.query.diff.compare`, unchanged: medians and spreads across the
  rank's replays, the rule of the one-rank diff.
- **Per item of the fleet**: ``base_median_dur`` / ``new_median_dur`` are the medians
  (nearest rank) across ranks of each rank's median; ``base_slowest_rank`` /
  ``new_slowest_rank`` the rank with the largest median on each side and that median; the
  per-rank deltas' median, min, max and spread (max - min).
- **The rule**: an item is real in the fleet when it is real on at least one rank (beyond the
  replay-to-replay spread of both runs of that rank); its effect is the delta of the rank that
  changed most (``most_changed_rank``: the largest |delta| among its real ranks, else among
  all), since a synchronous step waits for its slowest rank: one rank's slower kernel is the
  fleet's, even when the median rank did not change. Ranked as the one-rank diff.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from .diff import KINDS, DiffConfig, _nearest_rank

__all__ = ["compare_fleet", "fleet_rule", "FLEET_COLUMNS", "BY_RANK_COLUMNS"]

#: The columns of the fleet frame, in order.
FLEET_COLUMNS = ["rank", "kind", "graph_name", "name", "status", "real", "delta_dur", "delta_fraction",
                 "most_changed_rank", "real_ranks", "ranks", "median_delta_dur", "min_delta_dur", "max_delta_dur",
                 "delta_spread_dur", "base_median_dur", "new_median_dur", "base_slowest_rank", "base_slowest_dur",
                 "new_slowest_rank", "new_slowest_dur", "metric", "depth"]
#: The first columns of the by-rank frame (then every column of the one-rank diff).
BY_RANK_COLUMNS = ["rank", "dist_rank", "kind", "graph_name", "name", "status", "real", "delta_dur", "delta_fraction",
                   "base_dur", "new_dur", "base_spread_dur", "new_spread_dur"]


def fleet_rule(config: Optional[DiffConfig] = None) -> str:
    """The rule a fleet diff applies, in one line (printed above its table, in ``df.attrs['rule']``)."""
    config = config or DiffConfig()
    spread = "max - min" if config.spread == "range" else "p75 - p25"
    extra = f" and > {config.min_delta_ns} ns" if config.min_delta_ns else ""
    return (f"real difference: on at least one rank, |median(new) - median(base)| of the time per replay > the "
            f"replay-to-replay spread ({spread}) of BOTH runs of that rank{extra}; time = wall time (replays), busy "
            f"time (scopes, lanes), GPU time (kernels, collectives); new and vanished items are real; delta = the "
            f"rank that changed most (largest |delta| among its real ranks); base/new median = median across ranks "
            f"of each rank's median; ranked real first, then by |delta|")


def _pick(pairs: List[Tuple[int, int]], largest_abs: bool) -> Optional[Tuple[int, int]]:
    """(rank, value) with the largest value (or |value|); the lowest rank on a tie."""
    if not pairs:
        return None
    return min(pairs, key=lambda rv: (-(abs(rv[1]) if largest_abs else rv[1]), rv[0]))


def _status(statuses: Dict[str, List[int]]) -> str:
    if len(statuses) == 1:
        return next(iter(statuses))
    return "; ".join(f"{s} on rank{'s' if len(r) > 1 else ''} {','.join(map(str, sorted(r)))}"
                     for s, r in sorted(statuses.items()))


def compare_fleet(per_rank: Dict[int, "object"], config: Optional[DiffConfig] = None):
    """The fleet diff of ``per_rank``: rank -> the one-rank diff frame
    (:func:`~perfetto_graph_ann.query.diff.compare`) of that rank's base and new runs.

    Returns (fleet frame, by-rank frame): one row per item with the fleet's comparison
    (:data:`FLEET_COLUMNS`), and every rank's row of every item (``dist_rank``: the rank),
    both ranked as the one-rank diff; ``attrs['rule']`` says the rule (:func:`fleet_rule`).
    """
    import pandas as pd

    config = config or DiffConfig()
    order = {k: i for i, k in enumerate(KINDS)}
    frames = [df.assign(dist_rank=r) for r, df in sorted(per_rank.items())]
    long = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=BY_RANK_COLUMNS)
    rows = []
    for (kind, graph, name), g in long.groupby(["kind", "graph_name", "name"], sort=False):
        recs = g.to_dict("records")
        base = [(int(x["dist_rank"]), int(x["base_dur"])) for x in recs if not pd.isna(x["base_dur"])]
        new = [(int(x["dist_rank"]), int(x["new_dur"])) for x in recs if not pd.isna(x["new_dur"])]
        deltas = [(int(x["dist_rank"]), int(x["delta_dur"])) for x in recs if not pd.isna(x["delta_dur"])]
        real = [(int(x["dist_rank"]), int(x["delta_dur"])) for x in recs if x["real"] and not pd.isna(x["delta_dur"])]
        statuses: Dict[str, List[int]] = {}
        for x in recs:
            statuses.setdefault(str(x["status"]), []).append(int(x["dist_rank"]))
        pick = _pick(real, True) or _pick(deltas, True)
        slow_b, slow_n = _pick(base, False), _pick(new, False)
        base_of, new_of = dict(base), dict(new)
        dvals = sorted(v for _, v in deltas)
        out = {"kind": kind, "graph_name": graph, "name": name, "status": _status(statuses), "real": bool(real),
               "delta_dur": pick[1] if pick else None,
               "delta_fraction": pick[1] / base_of[pick[0]] if pick and base_of.get(pick[0]) and pick[0] in new_of
               else None,
               "most_changed_rank": pick[0] if pick else None, "real_ranks": len(real), "ranks": len(recs),
               "median_delta_dur": _nearest_rank(dvals, 50) if dvals else None,
               "min_delta_dur": dvals[0] if dvals else None, "max_delta_dur": dvals[-1] if dvals else None,
               "delta_spread_dur": dvals[-1] - dvals[0] if dvals else None,
               "base_median_dur": _nearest_rank(sorted(v for _, v in base), 50) if base else None,
               "new_median_dur": _nearest_rank(sorted(v for _, v in new), 50) if new else None,
               "base_slowest_rank": slow_b[0] if slow_b else None, "base_slowest_dur": slow_b[1] if slow_b else None,
               "new_slowest_rank": slow_n[0] if slow_n else None, "new_slowest_dur": slow_n[1] if slow_n else None,
               "metric": recs[0]["metric"], "depth": max(int(x["depth"]) for x in recs)}
        rows.append(out)

    def key(o):
        return (o["kind"] != "replay", not o["real"], -abs(o["delta_dur"] or 0), order[o["kind"]], -o["depth"],
                o["graph_name"], o["name"])

    rows.sort(key=key)
    _number(rows)
    fleet = pd.DataFrame(rows, columns=FLEET_COLUMNS)
    for c in ["rank", "delta_dur", "most_changed_rank", "median_delta_dur", "min_delta_dur", "max_delta_dur",
              "delta_spread_dur", "base_median_dur", "new_median_dur", "base_slowest_rank", "base_slowest_dur",
              "new_slowest_rank", "new_slowest_dur", "depth"]:
        fleet[c] = fleet[c].astype("Int64")

    by = long.drop(columns=["rank"]).to_dict("records")
    by.sort(key=lambda o: (*key({**o, "delta_dur": None if pd.isna(o["delta_dur"]) else o["delta_dur"],
                                 "depth": int(o["depth"])}), o["dist_rank"]))
    _number(by)
    rest = [c for c in long.columns if c not in BY_RANK_COLUMNS]
    by_rank = pd.DataFrame(by, columns=BY_RANK_COLUMNS + rest)
    for c in ["rank", "dist_rank"]:
        by_rank[c] = by_rank[c].astype("Int64")
    for c in long.columns:
        if str(long[c].dtype) == "Int64":
            by_rank[c] = by_rank[c].astype("Int64")
    rule = fleet_rule(config)
    fleet.attrs["rule"] = by_rank.attrs["rule"] = rule
    return fleet, by_rank


def _number(rows: List[dict]) -> None:
    """``rank``: 1, 2, ... over the ranked rows; None for the replays (listed first, unranked)."""
    n = 0
    for o in rows:
        if o["kind"] == "replay":
            o["rank"] = None
        else:
            n += 1
            o["rank"] = n
