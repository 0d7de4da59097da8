--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Private interval helpers shared by the modules of this package. Written in
-- plain SQL (one window function) so they behave the same on trace processor
-- v52 and on current releases, whose own interval macros changed signature.

-- For each interval, the latest end of the intervals with `dur > 0` of its
-- group that start before it (in start order; ties in any order), else its
-- own start.
--
-- With `p` = `prev_end_ts`: sorted by start within a group, interval i adds
-- the piece [MAX(ts, p), MAX(ts + dur, that)] to the time covered so far:
-- everything before p that is at or after ts is covered already, because
-- every earlier interval starts at or before ts. The pieces are disjoint, so
-- the sum of `MAX(0, ts + dur - MAX(ts, p))` over a group is the length of the
-- union of its intervals (overlap counted once); a piece clipped to a window
-- gives the union's time inside that window. When `dur > 0 AND ts > p`
-- nothing runs in between: that is an idle gap [p, ts]. Intervals with
-- `dur <= 0` cover no time: they add nothing and end no gap. The modules use
-- the same rule in functions over one group (one lane, one device), where a
-- window without partitions is cheaper.
--
-- The input needs the columns `grp` and `sub_grp` (intervals interact only
-- within equal (`grp`, `sub_grp`); two plain columns rather than one computed
-- key, because a computed partition key costs a quarter of the statement in v52
-- wasm), `ts` and `dur`, and may carry any others; the output has them all
-- plus `prev_end_ts`. Callers aggregate straight away: a window's output
-- cannot be flattened into the query around it, so every column computed here
-- costs on every row.
CREATE PERFETTO MACRO _graph_ann_intervals_prev_end(
  -- Table or subquery with the columns `grp`, `sub_grp`, `ts`, `dur` (and any others).
  intervals TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  SELECT
    *,
    COALESCE(
      MAX(CASE WHEN dur > 0 THEN ts + dur END) OVER (
        PARTITION BY grp, sub_grp ORDER BY ts
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
      ),
      ts
    ) AS prev_end_ts
  FROM $intervals
);

-- (Used by graph_ann.replays.) For each interval, the piece of time it adds to the time covered by the
-- intervals of its group that start before it, and the idle gap before it.
--
-- Sorted by start within a group, interval i adds the piece
-- [max(start_i, prev_end_i), max(end_i, that)] to the time covered so far,
-- where prev_end_i is the latest end of the intervals before it (start_i if none): everything
-- before prev_end_i that is at or after start_i is covered already, because
-- every earlier interval starts at or before start_i. The pieces are disjoint,
-- so the sum of `cover_dur` over a group is the length of the union of its
-- intervals (overlap counted once), and pieces clipped to a window give the
-- union's time inside that window. When start_i > prev_end_i nothing runs in
-- between: that is an idle gap [prev_end_i, start_i]. Intervals with
-- `dur <= 0` cover no time: they add nothing and end no gap.
--
-- The input needs the columns `grp` and `sub_grp` (intervals interact only
-- within equal (`grp`, `sub_grp`); two plain columns rather than one computed
-- key, because a computed partition key costs a quarter of the statement in v52
-- wasm), `ts` and `dur`, and may carry any others. The returned table has
-- every input row and column plus `cover_prev_end_ts` (the latest end before
-- the interval, else its own start), `cover_ts` (TIMESTAMP), `cover_dur`
-- (DURATION, >= 0), `gap_ts` and `gap_dur` (the gap before the interval, NULL
-- when there is none).
CREATE PERFETTO MACRO _graph_ann_intervals_cover(
  -- Table or subquery with the columns `grp`, `sub_grp`, `ts`, `dur` (and any others).
  intervals TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  SELECT
    *,
    MAX(ts, cover_prev_end_ts) AS cover_ts,
    CASE
      WHEN dur > 0 THEN MAX(0, ts + dur - MAX(ts, cover_prev_end_ts))
      ELSE 0
    END AS cover_dur,
    CASE WHEN dur > 0 AND ts > cover_prev_end_ts THEN cover_prev_end_ts END AS gap_ts,
    CASE WHEN dur > 0 AND ts > cover_prev_end_ts THEN ts - cover_prev_end_ts END AS gap_dur
  FROM (
    SELECT
      *,
      COALESCE(
        MAX(CASE WHEN dur > 0 THEN ts + dur END) OVER (
          PARTITION BY grp, sub_grp ORDER BY ts
          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        ),
        ts
      ) AS cover_prev_end_ts
    FROM $intervals
  )
);
