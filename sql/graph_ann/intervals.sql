--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Private interval helpers shared by the modules of this package. Written in
-- plain SQL (one window function) so they behave the same on trace processor
-- v52 and on current releases, whose own interval macros changed signature.

-- Splits the time covered by each group's intervals into disjoint pieces, one
-- per input interval, and finds the idle gaps between them.
--
-- Sorted by start within a group, interval i adds the piece
-- [max(start_i, prev_end_i), max(end_i, that)] to the time covered so far,
-- where prev_end_i is the latest end of the intervals before it: everything
-- before prev_end_i that is at or after start_i is covered already, because
-- every earlier interval starts at or before start_i. The pieces are disjoint,
-- so the sum of `dur` per group is the length of the union of its intervals
-- (overlap counted once), and a piece clipped to a window gives the union's
-- time inside that window. When start_i > prev_end_i nothing runs in between:
-- that is an idle gap [prev_end_i, start_i].
--
-- The input needs the columns `grp` (intervals interact only within equal
-- `grp`), `ts` and `dur`; intervals with `dur <= 0` cover no time and are
-- dropped. The returned table has the schema (grp, ts TIMESTAMP, dur DURATION,
-- gap_ts TIMESTAMP, gap_dur DURATION): one row per input interval, `dur` >= 0
-- the length of its new piece starting at `ts`, and `gap_ts` / `gap_dur` the
-- idle gap just before it (NULL when there is none).
CREATE PERFETTO MACRO _graph_ann_intervals_cover(
  -- Table or subquery with the columns `grp`, `ts`, `dur`.
  intervals TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  SELECT
    grp,
    MAX(_in_ts, COALESCE(_prev_end_ts, _in_ts)) AS ts,
    MAX(0, _in_end_ts - MAX(_in_ts, COALESCE(_prev_end_ts, _in_ts))) AS dur,
    CASE WHEN _in_ts > _prev_end_ts THEN _prev_end_ts END AS gap_ts,
    CASE WHEN _in_ts > _prev_end_ts THEN _in_ts - _prev_end_ts END AS gap_dur
  FROM (
    SELECT
      grp,
      ts AS _in_ts,
      ts + dur AS _in_end_ts,
      MAX(ts + dur) OVER (
        PARTITION BY grp ORDER BY ts
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
      ) AS _prev_end_ts
    FROM $intervals
    WHERE dur > 0
  )
);
