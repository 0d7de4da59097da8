--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Idle gaps per lane: the holes in the union of its work, listed and
-- summarised per lane.

INCLUDE PERFETTO MODULE graph_ann.intervals;
INCLUDE PERFETTO MODULE graph_ann.work_args;

-- The GPU work this module reads (the same rows, devices and lanes as
-- `graph_ann_gpu_work`), straight from `slice` with the rules of
-- `graph_ann.work_args`: six columns and no launch lookup.
CREATE PERFETTO TABLE _graph_ann_lane_work(
  -- Start.
  ts TIMESTAMP,
  -- Duration.
  dur DURATION,
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Track of the slice.
  track_id LONG
) AS
SELECT
  s.ts,
  s.dur,
  COALESCE(k.group_id, 0) AS group_id,
  COALESCE(k.device, _graph_ann_device!(s.arg_set_id)) AS device,
  COALESCE(k.lane_id, _graph_ann_lane!(s.arg_set_id)) AS lane_id,
  s.track_id
FROM slice AS s
LEFT JOIN _graph_ann_lane_track AS k USING (track_id)
WHERE _graph_ann_is_gpu_work!(s.category);

-- The idle gaps of one lane, in start order: one window pass over the lane's
-- work with `dur > 0` in start order (the rule of `graph_ann.intervals`; work
-- with `dur <= 0` neither ends nor fills a gap, so the trace processor drops
-- it natively), called per lane so that the trace processor filters the
-- lane's rows natively and the window needs no partitions.
CREATE PERFETTO FUNCTION _graph_ann_lane_gaps(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG
)
-- One row per gap.
RETURNS TABLE(
  -- Start of the gap (end of the busy interval before it).
  ts LONG,
  -- Length of the gap.
  dur LONG
) AS
SELECT prev_end_ts AS ts, ts - prev_end_ts AS dur
FROM (
  SELECT ts, _graph_ann_prev_end!(ts, ts + dur) AS prev_end_ts
  FROM _graph_ann_lane_work
  WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id AND dur > 0
)
WHERE ts > prev_end_ts;

-- Per lane: its first track (for its name), its span and the span of its work
-- with `dur > 0`. When all of the lane's durations are positive the two spans
-- are one (the usual case); only other lanes read their positive work again,
-- filtered natively.
CREATE PERFETTO TABLE _graph_ann_lane_span(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- One of the lane's tracks (for its name).
  track_id LONG,
  -- First work start to last work end.
  span_dur DURATION,
  -- First start to last end of the work with `dur > 0`; NULL if none.
  positive_span_dur DURATION
) AS
SELECT
  s.group_id,
  s.device,
  s.lane_id,
  s.track_id,
  s.end_ts - s.ts AS span_dur,
  CASE
    WHEN s.min_dur > 0 THEN s.end_ts - s.ts
    -- `=` where it can (filtered natively), `IS` for a NULL device or lane.
    WHEN s.device IS NOT NULL AND s.lane_id IS NOT NULL THEN (
      SELECT MAX(w.ts + w.dur) - MIN(w.ts)
      FROM _graph_ann_lane_work AS w
      WHERE w.group_id = s.group_id AND w.device = s.device AND w.lane_id = s.lane_id AND w.dur > 0
    )
    ELSE (
      SELECT MAX(w.ts + w.dur) - MIN(w.ts)
      FROM _graph_ann_lane_work AS w
      WHERE w.group_id = s.group_id AND w.device IS s.device AND w.lane_id IS s.lane_id AND w.dur > 0
    )
  END AS positive_span_dur
FROM (
  SELECT group_id, device, lane_id, MIN(track_id) AS track_id, MIN(ts) AS ts, MAX(ts + dur) AS end_ts,
    MIN(dur) AS min_dur
  FROM _graph_ann_lane_work
  GROUP BY group_id, device, lane_id
) AS s;

-- One row per idle gap of each lane: a time between two of the lane's busy
-- intervals (see `graph_ann_lane`) when nothing runs on the lane. Unordered.
CREATE PERFETTO TABLE graph_ann_lane_gap(
  -- Group of a merged trace (`graph_ann_group`; 0 for a trace that is not a merge).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Start of the gap (end of the busy interval before it).
  ts TIMESTAMP,
  -- Length of the gap.
  dur DURATION
) AS
-- No ORDER BY (a sort of every gap): read it with
-- `ORDER BY group_id, device, lane_id, ts` where the order matters.
SELECT l.group_id, l.device, l.lane_id, g.ts, g.dur
FROM _graph_ann_lane_span AS l
JOIN _graph_ann_lane_gaps(l.group_id, l.device, l.lane_id) AS g;

-- The gaps of one lane summarised (from `graph_ann_lane_gap`, filtered natively).
CREATE PERFETTO FUNCTION _graph_ann_lane_gap_summary(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG
)
-- One row: count, total, longest and mean gap (NULL total / longest / mean when none).
RETURNS TABLE(
  -- Number of gaps.
  gap_count LONG,
  -- Sum of their lengths.
  gap_dur LONG,
  -- Longest gap.
  max_gap_dur LONG,
  -- Mean gap.
  mean_gap_dur DOUBLE
) AS
SELECT COUNT(*) AS gap_count, SUM(dur) AS gap_dur, MAX(dur) AS max_gap_dur, AVG(dur) AS mean_gap_dur
FROM graph_ann_lane_gap
WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id;

-- Idle gaps per lane, summarised: between the lane's first work start and
-- last work end, how long and how often the lane has nothing running.
--
-- The busy time is the union of the lane's intervals with `dur > 0`: from the
-- first such start to the last such end, less the gaps.
CREATE PERFETTO TABLE graph_ann_lane_idle(
  -- Group of a merged trace (`graph_ann_group`; 0 for a trace that is not a merge).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Lane name.
  lane_name STRING,
  -- The lane's span: first work start to last work end.
  span_dur DURATION,
  -- Busy time (union of the lane's work).
  busy_dur DURATION,
  -- Idle time within the span: `span_dur - busy_dur`.
  idle_dur DURATION,
  -- Number of gaps.
  gap_count LONG,
  -- Longest gap; 0 when none.
  max_gap_dur DURATION,
  -- Mean gap; NULL when none.
  mean_gap_dur DOUBLE
) AS
WITH
  busy AS (
    SELECT
      l.group_id,
      l.device,
      l.lane_id,
      l.track_id,
      l.span_dur,
      COALESCE(l.positive_span_dur - COALESCE(g.gap_dur, 0), 0) AS busy_dur,
      g.gap_count,
      g.max_gap_dur,
      g.mean_gap_dur
    FROM _graph_ann_lane_span AS l
    JOIN _graph_ann_lane_gap_summary(l.group_id, l.device, l.lane_id) AS g
  )
SELECT
  b.group_id,
  b.device,
  b.lane_id,
  _graph_ann_lane_name(b.track_id) AS lane_name,
  b.span_dur,
  b.busy_dur,
  b.span_dur - b.busy_dur AS idle_dur,
  b.gap_count,
  COALESCE(b.max_gap_dur, 0) AS max_gap_dur,
  b.mean_gap_dur
FROM busy AS b
ORDER BY b.group_id, b.device, b.lane_id;
