--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Private: the report's summary of replays and idle gaps without their full
-- tables: the rows, order and totals, and every column for the first few rows.

INCLUDE PERFETTO MODULE graph_ann.intervals;
INCLUDE PERFETTO MODULE graph_ann.lanes;

-- One row per replay (graph launch with GPU work): the rows of
-- `graph_ann_replay` where every replay's work is on one device (see
-- `_graph_ann_summary_exact`), with its span; no argument read, no union.
CREATE PERFETTO TABLE _graph_ann_replay_extent(
  -- Slice id of the launch call.
  launch_id LONG,
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index (the smallest of the replay's work).
  device LONG,
  -- Start of the replay's first work.
  ts TIMESTAMP,
  -- End of its last work.
  end_ts TIMESTAMP,
  -- `end_ts - ts`.
  wall_dur DURATION,
  -- Whether all of its work has a device, and the same one.
  one_device BOOL
) AS
SELECT
  launch_id,
  group_id,
  device,
  ts,
  end_ts,
  end_ts - ts AS wall_dur,
  n = n_device AND device = max_device AS one_device
FROM (
  SELECT
    launch_id,
    MIN(group_id) AS group_id,
    MIN(device) AS device,
    MAX(device) AS max_device,
    COUNT(device) AS n_device,
    COUNT(*) AS n,
    MIN(ts) AS ts,
    MAX(ts + dur) AS end_ts
  FROM _graph_ann_work
  WHERE is_graphed
  GROUP BY launch_id
);

-- Per lane of `graph_ann_lane`: its span, busy and idle time as
-- `graph_ann_lane_idle` has them where `_graph_ann_summary_exact` says so (no
-- negative duration, all work on a lane: the union of the work with
-- `dur > 0` is then the lane's busy time of `graph_ann_lane`).
CREATE PERFETTO TABLE _graph_ann_lane_idle_extent(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- The lane's first track (for its name).
  track_id LONG,
  -- First work start to last work end.
  span_dur DURATION,
  -- Busy time (union of the lane's work).
  busy_dur DURATION,
  -- `span_dur - busy_dur`.
  idle_dur DURATION
) AS
SELECT
  s.group_id,
  s.device,
  s.lane_id,
  s.track_id,
  s.end_ts - s.first_ts AS span_dur,
  l.busy_dur,
  s.end_ts - s.first_ts - l.busy_dur AS idle_dur
FROM _graph_ann_lane_stats AS s
JOIN graph_ann_lane AS l USING (group_id, device, lane_id);

-- Whether the tables above hold the rows (and the order and summed columns)
-- of the full tables they stand for; where not, the summary reads those.
CREATE PERFETTO TABLE _graph_ann_summary_exact(
  -- `replays` or `lane_idle`.
  section STRING,
  -- Whether the summary's table is exact for the section.
  exact BOOL
) AS
SELECT 'replays' AS section, NOT EXISTS (SELECT 1 FROM _graph_ann_replay_extent WHERE NOT one_device) AS exact
UNION ALL
SELECT
  'lane_idle' AS section,
  (SELECT COUNT(*) FROM _graph_ann_work) = (SELECT COALESCE(SUM(work_count), 0) FROM _graph_ann_lane_stats)
    AND NOT EXISTS (SELECT 1 FROM _graph_ann_lane_stats WHERE min_dur < 0) AS exact;

-- What one replay's work adds to its row: count, graph id and replay index
-- (smallest over its work) and busy time (union of its work).
CREATE PERFETTO FUNCTION _graph_ann_replay_work_figures(
  -- Slice id of the launch call.
  launch_id LONG
)
-- One row.
RETURNS TABLE(
  -- Work count.
  work_count LONG,
  -- Executable graph id (`debug.graph id`), where known.
  graph_id LONG,
  -- Replay index of the graph (`debug.replay`), where known.
  replay LONG,
  -- Union of its work.
  busy_dur LONG
) AS
SELECT a.work_count, a.graph_id, a.replay, u.busy_dur
FROM (
  SELECT
    COUNT(*) AS work_count,
    MIN(COALESCE(EXTRACT_ARG(arg_set_id, 'debug.graph id'), EXTRACT_ARG(arg_set_id, 'args.graph id'))) AS graph_id,
    MIN(COALESCE(EXTRACT_ARG(arg_set_id, 'debug.replay'), EXTRACT_ARG(arg_set_id, 'args.replay'))) AS replay
  FROM _graph_ann_work
  WHERE launch_id = $launch_id AND is_graphed
) AS a
JOIN _graph_ann_union_per_replay!((
  SELECT launch_id, ts, dur FROM _graph_ann_work WHERE launch_id = $launch_id AND is_graphed
)) AS u;

-- The latest end, on one device, of the replays and of the work outside
-- replays that start before `ts` (what a replay starting at `ts` queues
-- behind, as `graph_ann_replay` computes it for every replay); NULL if none.
CREATE PERFETTO FUNCTION _graph_ann_replay_prev_end_at(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Start of the replay.
  ts LONG
)
RETURNS LONG AS
SELECT MAX(COALESCE(a, b), COALESCE(b, a))
FROM (
  SELECT
    (SELECT MAX(end_ts) FROM _graph_ann_replay_extent WHERE group_id = $group_id AND device = $device AND ts < $ts) AS a,
    (
      SELECT MAX(ts + dur) FROM _graph_ann_work
      WHERE group_id = $group_id AND device = $device AND is_graphed = 0 AND ts < $ts
    ) AS b
);

-- The columns of `graph_ann_replay` the summary shows (and those they come
-- from), for the rows `keys` of `_graph_ann_replay_extent`, with the same
-- values; unordered.
CREATE PERFETTO MACRO _graph_ann_replay_summary_rows(
  -- Rows of `_graph_ann_replay_extent`.
  keys TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  SELECT
    launch_id,
    correlation,
    group_id,
    device,
    graph_id,
    replay,
    replay_index,
    launch_name,
    launch_ts,
    ts,
    end_ts,
    wall_dur,
    work_count,
    busy_dur,
    CAST(busy_dur AS DOUBLE) / NULLIF(wall_dur, 0) AS busy_fraction,
    ts - launch_ts AS launch_to_gpu_dur,
    MAX(0, MIN(COALESCE(prev_end_ts, launch_ts), ts) - launch_ts) AS queued_dur,
    ts - launch_ts - MAX(0, MIN(COALESCE(prev_end_ts, launch_ts), ts) - launch_ts) AS launch_overhead_dur
  FROM (
    SELECT
      k.launch_id,
      l.correlation,
      k.group_id,
      k.device,
      f.graph_id,
      f.replay,
      (
        SELECT COUNT(*) FROM _graph_ann_replay_extent AS e
        WHERE e.group_id = k.group_id AND e.device = k.device
          AND (e.ts < k.ts OR (e.ts = k.ts AND e.launch_id < k.launch_id))
      ) AS replay_index,
      l.name AS launch_name,
      l.ts AS launch_ts,
      k.ts,
      k.end_ts,
      k.wall_dur,
      f.work_count,
      f.busy_dur,
      _graph_ann_replay_prev_end_at(k.group_id, k.device, k.ts) AS prev_end_ts
    FROM $keys AS k
    JOIN _graph_ann_launch AS l ON l.id = k.launch_id
    JOIN _graph_ann_replay_work_figures(k.launch_id) AS f
  )
);

-- The gaps of one lane summarised, as `graph_ann.lane_idle` computes them
-- (its work with `dur > 0` in start order), from `_graph_ann_work`.
CREATE PERFETTO FUNCTION _graph_ann_lane_work_gaps(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG
)
-- One row: count, longest and mean gap (NULL longest / mean when none).
RETURNS TABLE(
  -- Number of gaps.
  gap_count LONG,
  -- Longest gap.
  max_gap_dur LONG,
  -- Mean gap.
  mean_gap_dur DOUBLE
) AS
SELECT COUNT(*) AS gap_count, MAX(ts - prev_end_ts) AS max_gap_dur, AVG(ts - prev_end_ts) AS mean_gap_dur
FROM (
  SELECT ts, _graph_ann_prev_end!(ts, ts + dur) AS prev_end_ts
  FROM _graph_ann_work
  WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id AND dur > 0
)
WHERE ts > prev_end_ts;

-- The rows of `graph_ann_lane_idle` for the rows `keys` of
-- `_graph_ann_lane_idle_extent`; unordered.
CREATE PERFETTO MACRO _graph_ann_lane_idle_summary_rows(
  -- Rows of `_graph_ann_lane_idle_extent`.
  keys TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  SELECT
    k.group_id,
    k.device,
    k.lane_id,
    _graph_ann_lane_name(k.track_id) AS lane_name,
    k.span_dur,
    k.busy_dur,
    k.idle_dur,
    g.gap_count,
    COALESCE(g.max_gap_dur, 0) AS max_gap_dur,
    g.mean_gap_dur
  FROM $keys AS k
  JOIN _graph_ann_lane_work_gaps(k.group_id, k.device, k.lane_id) AS g
);
