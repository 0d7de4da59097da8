"""Cross-rank metrics from per-rank ``graph_ann`` tables, in pandas: which rank arrives
last at the collectives, and how long the others wait for it.

Input per rank: its ``graph_ann_collective`` rows and the offset that turns its trace
time into Unix time (``baseTimeNanoseconds``, read back from the trace's REALTIME clock
snapshot), so that starts on different ranks compare.

**Instances.** NCCL runs the collectives of one communicator in the same order on every
rank of it, so the k-th collective kernel of a process group on one rank is the same
collective instance as the k-th on every other rank: instances are matched by process
group (``pg_name``, which eager kernels carry and graphed kernels get back from the join)
and order. Kernels without collective metadata have no process group: they are matched
by order among the metadata-less kernels of their collective type, across every rank that
has them. Point-to-point kernels (``sendrecv``) are not group-wide and are left out.

An instance counts for blame only when it is **complete** (every rank its process group
lists is present; without the list, every rank that has that group's kernels) and
**consistent** (all ranks agree on its collective type and message size): otherwise the
order may pair different operations, and a wrong answer is worse than none.

**Per instance**: ``spread_ns`` = latest start - earliest start (the arrival spread);
``last_rank`` = the rank with the latest start (NA on a tie); ``last_lead_ns`` = latest -
second latest start (how much earlier the collective could have started had the last
rank arrived with the next one); ``peer_wait_ns`` = sum over ranks of (latest - their
start), the rank-time spent waiting for the last arrival; ``median_after_ns`` = the median
start, after the earliest.

**Per rank** (the straggler ranking): ``times_last``; ``peer_wait_caused_ns`` = the
``peer_wait_ns`` of the instances where it arrived last (split evenly on ties);
``delay_caused_ns`` = the sum of their ``last_lead_ns``; ``lateness`` = its start minus
the instance's median start, summarised (median, mean, max) over its instances;
``waited_ns`` = the time it waited for others (sum of latest - its start). Sorted by
``peer_wait_caused_ns``, then median lateness.

Starts on different hosts compare only as well as the hosts' clocks agree (NTP: tens of
µs to ms; PTP: below 1 µs); ranks on one host share a clock.
"""
from __future__ import annotations

import dataclasses
import re
from typing import List, Optional

import pandas as pd

__all__ = ["arrivals_of", "combine", "FleetReport", "parse_ranks", "RankTables"]

#: Collective types matched across ranks (sendrecv is point to point).
_EXCLUDED_TYPES = ("sendrecv",)


@dataclasses.dataclass
class RankTables:
    """What one rank contributes: its rank, trace, Unix-time offset and tables."""

    rank: int
    trace: str
    offset_ns: int
    collectives: pd.DataFrame
    lanes: pd.DataFrame
    host: Optional[str] = None


@dataclasses.dataclass
class FleetReport:
    """The fleet's DataFrames (all times in ns; starts are Unix time).

    ``ranking``: one row per rank, worst straggler first. ``collectives``: one row per
    collective instance. ``arrivals``: one row per (instance, rank). ``lanes``: every rank's
    ``graph_ann_lane`` rows (busy time, utilisation). ``ranks``: one row per rank (trace,
    host, clock offset, collective kernels, lanes, the sum of their busy time, the highest
    lane utilisation).
    """

    ranking: pd.DataFrame
    collectives: pd.DataFrame
    arrivals: pd.DataFrame
    lanes: pd.DataFrame
    ranks: pd.DataFrame
    #: files of the folders given that were left out as not traces (e.g. a ``summary.json``)
    skipped: List[str] = dataclasses.field(default_factory=list)

    def worst_collectives(self, n: int = 10) -> pd.DataFrame:
        """The ``n`` instances with the largest arrival spread (blamed ones only)."""
        c = self.collectives[self.collectives["blamed"]]
        return c.sort_values(["spread_ns", "pg", "seq"], ascending=[False, True, True]).head(n)


def parse_ranks(text) -> Optional[frozenset]:
    """The global ranks of ``Process Group Ranks`` (``"[0, 1]"``), None when unreadable."""
    if not isinstance(text, str):
        return None
    found = re.findall(r"-?\d+", text)
    if not found or not re.fullmatch(r"\s*\[\s*(-?\d+\s*,\s*)*(-?\d+\s*)?\]\s*", text):
        return None
    return frozenset(int(x) for x in found)


def arrivals_of(ranks: List[RankTables]) -> pd.DataFrame:
    """One row per (rank, collective kernel) with its instance key ``(pg, seq)`` and its
    start in Unix time."""
    frames = []
    for rt in ranks:
        c = rt.collectives
        if c.empty:
            continue
        c = c[~c["collective_type"].isin(_EXCLUDED_TYPES)].copy()
        has_pg = c["pg_name"].notna() & c["has_metadata"].astype(bool)
        c["pg"] = c["pg_name"].astype(object).where(has_pg, "(no metadata: " + c["collective_type"].astype(str) + ")")
        c = c.sort_values(["ts", "id"], kind="stable")
        c["seq"] = c.groupby("pg", sort=False).cumcount()
        c["rank"] = rt.rank
        c["start_ns"] = c["ts"].astype("int64") + rt.offset_ns
        frames.append(c)
    cols = ["pg", "seq", "rank", "start_ns", "dur", "device", "name", "is_graphed", "has_metadata",
            "collective_type", "msg_bytes", "pg_desc", "pg_ranks"]
    if not frames:
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in cols})
    return pd.concat(frames, ignore_index=True)[cols]


def combine(ranks: List[RankTables]) -> FleetReport:
    """The fleet report of ``ranks`` (see the module docstring for every definition)."""
    present = {rt.rank for rt in ranks}
    a = arrivals_of(ranks)
    instances = _instances(a, present)
    a = a.merge(instances[["pg", "seq", "blamed", "earliest_ns", "latest_ns", "median_after_ns"]], on=["pg", "seq"],
                how="left")
    a["lateness_ns"] = ((a["start_ns"] - a["earliest_ns"]) - a["median_after_ns"]).where(a["blamed"])
    a["wait_ns"] = (a["latest_ns"] - a["start_ns"]).where(a["blamed"])
    a = a.drop(columns=["earliest_ns", "latest_ns", "median_after_ns"]).sort_values(["pg", "seq", "rank"], ignore_index=True)
    ranking = _ranking(a, instances, ranks)
    lanes = _lanes(ranks)
    return FleetReport(ranking, instances, a, lanes, _rank_table(ranks, a, lanes))


def _instances(a: pd.DataFrame, present: set) -> pd.DataFrame:
    rows = []
    for (pg, seq), g in a.groupby(["pg", "seq"], sort=True):
        starts = g.set_index("rank")["start_ns"].astype("int64")
        listed = {parse_ranks(x) for x in g["pg_ranks"].dropna()}
        expected = next(iter(listed)) if len(listed) == 1 and None not in listed else None
        if expected is None:  # no usable list: every rank that has this group's kernels
            expected = frozenset(a.loc[a["pg"] == pg, "rank"])
        types = set(g["collective_type"].dropna())
        sizes = set(g["msg_bytes"].dropna())
        complete = expected <= set(starts.index) and len(starts) == len(set(starts.index))
        consistent = len(types) <= 1 and len(sizes) <= 1 and not (len(listed) > 1)
        blamed = complete and consistent and len(starts) >= 2
        ordered = starts.sort_values(kind="stable")
        latest, earliest = int(ordered.iloc[-1]), int(ordered.iloc[0])
        second = int(ordered.iloc[-2]) if len(ordered) > 1 else latest
        tied = int((starts == latest).sum())
        last_rank = int(ordered.index[-1]) if blamed and tied == 1 else None
        rows.append({
            "pg": pg, "seq": int(seq), "pg_desc": g["pg_desc"].dropna().iloc[0] if g["pg_desc"].notna().any() else None,
            "collective_type": next(iter(types)) if len(types) == 1 else None,
            "msg_bytes": next(iter(sizes)) if len(sizes) == 1 else None,
            "ranks": len(starts), "expected_ranks": len(expected),
            "complete": complete, "consistent": consistent, "blamed": blamed,
            "earliest_ns": earliest, "latest_ns": latest, "spread_ns": latest - earliest,
            # relative to the earliest start: Unix ns do not fit a float exactly
            "median_after_ns": float((starts - earliest).median()),
            "last_rank": last_rank, "last_tied": tied, "last_lead_ns": latest - second,
            "peer_wait_ns": int((latest - starts).sum()),
            "max_dur_ns": int(g["dur"].max()), "min_dur_ns": int(g["dur"].min()),
        })
    cols = ["pg", "seq", "pg_desc", "collective_type", "msg_bytes", "ranks", "expected_ranks", "complete",
            "consistent", "blamed", "earliest_ns", "latest_ns", "spread_ns", "median_after_ns", "last_rank", "last_tied",
            "last_lead_ns", "peer_wait_ns", "max_dur_ns", "min_dur_ns"]
    out = pd.DataFrame(rows, columns=cols)
    out["last_rank"] = out["last_rank"].astype("Int64")
    return out


def _ranking(a: pd.DataFrame, instances: pd.DataFrame, ranks: List[RankTables]) -> pd.DataFrame:
    blamed = instances[instances["blamed"]]
    lat = a.merge(blamed[["pg", "seq", "latest_ns", "peer_wait_ns", "last_lead_ns"]], on=["pg", "seq"])
    lat = lat[lat["start_ns"] == lat["latest_ns"]]
    ties = lat.groupby(["pg", "seq"])["rank"].transform("size")
    caused = (lat["peer_wait_ns"] / ties).groupby(lat["rank"]).sum()
    unique = lat[ties == 1]
    last = unique.groupby("rank").size()
    delay = unique.groupby("rank")["last_lead_ns"].sum()
    tied_last = lat[ties > 1].groupby("rank").size()
    b = a[a["blamed"].astype(bool)]
    stats = b.groupby("rank").agg(instances=("seq", "size"), median_lateness_ns=("lateness_ns", "median"),
                                  mean_lateness_ns=("lateness_ns", "mean"), max_lateness_ns=("lateness_ns", "max"),
                                  waited_ns=("wait_ns", "sum"))
    out = pd.DataFrame({
        "rank": [rt.rank for rt in ranks],
        "trace": [rt.trace for rt in ranks],
        "times_last": [int(last.get(rt.rank, 0)) for rt in ranks],
        "times_tied_last": [int(tied_last.get(rt.rank, 0)) for rt in ranks],
        "peer_wait_caused_ns": [float(caused.get(rt.rank, 0.0)) for rt in ranks],
        "delay_caused_ns": [int(delay.get(rt.rank, 0)) for rt in ranks],
    }).merge(stats, left_on="rank", right_index=True, how="left")
    out["instances"] = out["instances"].fillna(0).astype("int64")
    out["waited_ns"] = out["waited_ns"].fillna(0)
    out = out.sort_values(["peer_wait_caused_ns", "median_lateness_ns", "rank"], ascending=[False, False, True],
                          na_position="last", kind="stable", ignore_index=True)
    return out[["rank", "trace", "instances", "times_last", "times_tied_last", "peer_wait_caused_ns",
                "delay_caused_ns", "median_lateness_ns", "mean_lateness_ns", "max_lateness_ns", "waited_ns"]]


def _lanes(ranks: List[RankTables]) -> pd.DataFrame:
    frames = []
    for rt in ranks:
        lanes = rt.lanes.copy()
        lanes.insert(0, "rank", rt.rank)
        frames.append(lanes)
    if not frames:
        return pd.DataFrame({"rank": pd.Series([], dtype="int64")})
    return pd.concat(frames, ignore_index=True).sort_values(["rank", "device", "lane_id"], ignore_index=True)


def _rank_table(ranks: List[RankTables], a: pd.DataFrame, lanes: pd.DataFrame) -> pd.DataFrame:
    kernels = a.groupby("rank").size() if not a.empty else pd.Series(dtype="int64")
    rows = []
    for rt in sorted(ranks, key=lambda r: r.rank):
        mine = lanes[lanes["rank"] == rt.rank] if not lanes.empty else lanes
        rows.append({
            "rank": rt.rank, "trace": rt.trace, "host": rt.host, "offset_ns": rt.offset_ns,
            "collective_kernels": int(kernels.get(rt.rank, 0)),
            "lanes": len(mine),
            "lane_busy_sum_ns": int(mine["busy_dur"].sum()) if len(mine) else 0,
            "max_utilization": float(mine["utilization"].max()) if len(mine) else float("nan"),
        })
    return pd.DataFrame(rows)
