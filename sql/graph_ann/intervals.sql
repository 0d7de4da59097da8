--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Private interval helpers shared by the modules of this package. Written in
-- plain SQL (window functions) so they behave the same on trace processor v52
-- and on current releases, whose own interval macros changed signature.

-- Merges overlapping or touching intervals within each group into disjoint
-- intervals, so the total of `dur` per group is the time covered by at least
-- one input interval (the "union" of the intervals: overlap is counted once).
--
-- The input needs the columns `grp` (any value; intervals are merged within
-- equal `grp`), `ts` and `dur`; intervals with `dur <= 0` cover no time and
-- are dropped. The returned table has the schema
-- (grp, ts TIMESTAMP, dur DURATION), one row per merged interval.
CREATE PERFETTO MACRO _graph_ann_intervals_union(
  -- Table or subquery with the columns `grp`, `ts`, `dur`.
  intervals TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  -- Algorithm: keep the longest interval per start; an interval starts a new
  -- merged interval when it begins after every earlier interval has ended; a
  -- running count of such starts numbers the merged intervals.
  WITH
    _graph_ann_u_starts AS (
      SELECT grp, ts, MAX(ts + dur) AS end_ts
      FROM $intervals
      WHERE dur > 0
      GROUP BY grp, ts
    ),
    _graph_ann_u_prev AS (
      SELECT
        grp,
        ts,
        end_ts,
        MAX(end_ts) OVER (
          PARTITION BY grp ORDER BY ts
          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        ) AS prev_end_ts
      FROM _graph_ann_u_starts
    ),
    _graph_ann_u_numbered AS (
      SELECT
        grp,
        ts,
        end_ts,
        SUM(CASE WHEN prev_end_ts IS NULL OR ts > prev_end_ts THEN 1 ELSE 0 END) OVER (
          PARTITION BY grp ORDER BY ts
          ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS island
      FROM _graph_ann_u_prev
    )
  SELECT grp, MIN(ts) AS ts, MAX(end_ts) - MIN(ts) AS dur
  FROM _graph_ann_u_numbered
  GROUP BY grp, island
);
