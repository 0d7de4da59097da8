--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Per-lane metrics: how busy each lane of each GPU is, how its work is
-- distributed (nearest-rank percentiles), and which kernels take its time.

INCLUDE PERFETTO MODULE graph_ann.lane_busy;
INCLUDE PERFETTO MODULE graph_ann.lane_stats;
INCLUDE PERFETTO MODULE graph_ann.percentiles;

-- The k-th shortest (0-based) work duration of a lane, for percentiles: the
-- trace processor filters and sorts the lane natively.
CREATE PERFETTO FUNCTION _graph_ann_lane_nth_dur(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- 0-based rank in ascending duration order.
  k LONG
)
-- The duration, NULL when the lane has k or fewer slices.
RETURNS LONG AS
SELECT dur
FROM _graph_ann_work
WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id
ORDER BY dur
LIMIT 1 OFFSET $k;

-- Per lane: nearest-rank percentiles of the work durations
-- (`_graph_ann_nearest_rank`).
CREATE PERFETTO TABLE _graph_ann_lane_pct(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Median.
  p50_dur DURATION,
  -- 90th percentile.
  p90_dur DURATION,
  -- 99th percentile.
  p99_dur DURATION
) AS
SELECT
  group_id,
  device,
  lane_id,
  _graph_ann_lane_nth_dur(group_id, device, lane_id, _graph_ann_nearest_rank!(50, work_count) - 1) AS p50_dur,
  _graph_ann_lane_nth_dur(group_id, device, lane_id, _graph_ann_nearest_rank!(90, work_count) - 1) AS p90_dur,
  _graph_ann_lane_nth_dur(group_id, device, lane_id, _graph_ann_nearest_rank!(99, work_count) - 1) AS p99_dur
FROM _graph_ann_lane_stats;

-- The profiled span of each group: first start and last end over its slices
-- with `dur >= 0` (all slices in a trace of one group; in a merged trace, the
-- slices of the tracks `_graph_ann_track_group` gives the group).
CREATE PERFETTO TABLE _graph_ann_profiled_span(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- First instant a slice of the group covers.
  ts TIMESTAMP,
  -- Length of the span.
  dur DURATION
) AS
-- Each branch starts from the group count as its outer loop (CROSS JOIN keeps
-- the order), so a trace reads its slices for one branch only.
SELECT 0 AS group_id, p.ts, p.end_ts - p.ts AS dur
FROM (SELECT COUNT(*) AS n FROM graph_ann_group) AS c
CROSS JOIN (
  SELECT
    -- The first start by the trace processor's own filter and order (slices
    -- are kept sorted by start).
    (SELECT ts FROM slice WHERE dur >= 0 ORDER BY ts LIMIT 1) AS ts,
    (SELECT MAX(ts + dur) FROM slice WHERE dur >= 0) AS end_ts
) AS p
WHERE c.n = 1
UNION ALL
SELECT g.group_id, MIN(s.ts) AS ts, MAX(s.ts + s.dur) - MIN(s.ts) AS dur
FROM (SELECT COUNT(*) AS n FROM graph_ann_group) AS c
CROSS JOIN slice AS s
JOIN _graph_ann_track_group AS g USING (track_id)
WHERE c.n > 1 AND s.dur >= 0
GROUP BY g.group_id;

-- One row per lane of each GPU: work count, busy time, utilization and the
-- distribution of work durations.
CREATE PERFETTO TABLE graph_ann_lane(
  -- Group of a merged trace (`graph_ann_group`; 0 for a trace that is not a merge).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id (the `debug.stream` of its slices: a CUDA stream or an annotated lane).
  lane_id LONG,
  -- Lane name (its track's name, e.g. `62 attention`).
  lane_name STRING,
  -- Number of GPU work slices (kernels, memcpys, memsets) on the lane.
  work_count LONG,
  -- Of those, kernels.
  kernel_count LONG,
  -- Sum of the durations (overlapping work counted once per slice).
  total_dur DURATION,
  -- Time the lane is busy: length of the union of its work intervals.
  busy_dur DURATION,
  -- `busy_dur` over the profiled span.
  utilization DOUBLE,
  -- Busy time inside the device's replays' span, over that span; NULL without replays.
  replay_utilization DOUBLE,
  -- Mean work duration.
  mean_dur DOUBLE,
  -- Median work duration (nearest rank).
  p50_dur DURATION,
  -- 90th percentile of the work duration (nearest rank).
  p90_dur DURATION,
  -- 99th percentile of the work duration (nearest rank).
  p99_dur DURATION,
  -- Shortest work duration.
  min_dur DURATION,
  -- Longest work duration.
  max_dur DURATION,
  -- Start of the lane's first work.
  first_ts TIMESTAMP,
  -- Start of the lane's last work.
  last_ts TIMESTAMP,
  -- End of the lane's work (latest `ts + dur`).
  end_ts TIMESTAMP
) AS
SELECT
  s.group_id,
  s.device,
  s.lane_id,
  (SELECT n.name FROM _graph_ann_track_name AS n WHERE n.track_id = s.track_id) AS lane_name,
  s.work_count,
  s.kernel_count,
  s.total_dur,
  COALESCE(b.busy_dur, 0) AS busy_dur,
  CAST(COALESCE(b.busy_dur, 0) AS DOUBLE) / ps.dur AS utilization,
  CAST(COALESCE(b.replay_busy_dur, 0) AS DOUBLE) / NULLIF(r.dur, 0) AS replay_utilization,
  s.mean_dur,
  p.p50_dur,
  p.p90_dur,
  p.p99_dur,
  s.min_dur,
  s.max_dur,
  s.first_ts,
  s.last_ts,
  s.end_ts
FROM _graph_ann_lane_stats AS s
JOIN _graph_ann_lane_pct AS p USING (group_id, device, lane_id)
LEFT JOIN _graph_ann_lane_busy AS b USING (group_id, device, lane_id)
LEFT JOIN _graph_ann_replays_span AS r USING (group_id, device)
LEFT JOIN _graph_ann_profiled_span AS ps USING (group_id)
ORDER BY s.group_id, s.device, s.lane_id;

-- One lane's kernels by name: count, total and longest duration (the lane's
-- rows filtered natively, then grouped by name).
CREATE PERFETTO FUNCTION _graph_ann_lane_kernels(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG
)
-- One row per kernel name.
RETURNS TABLE(
  -- Kernel name.
  name STRING,
  -- Number of launches.
  count LONG,
  -- Sum of the durations.
  total_dur LONG,
  -- Longest duration.
  max_dur LONG
) AS
SELECT name, COUNT(*) AS count, SUM(dur) AS total_dur, MAX(dur) AS max_dur
FROM _graph_ann_work
WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id AND category = 'kernel'
GROUP BY name;

-- Kernels per lane by total time: one row per (group, device, lane, kernel name),
-- ranked within the lane by total duration (1 = most time; ties by name).
-- Keep `rank <= N` for a lane's top N.
CREATE PERFETTO TABLE graph_ann_lane_top_kernels(
  -- Group of a merged trace (`graph_ann_group`; 0 for a trace that is not a merge).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Lane name.
  lane_name STRING,
  -- Kernel name.
  name STRING,
  -- Rank within the lane by `total_dur` (1 = most), ties broken by name.
  rank LONG,
  -- Number of launches of this kernel on the lane.
  count LONG,
  -- Sum of its durations.
  total_dur DURATION,
  -- Mean duration.
  mean_dur DOUBLE,
  -- Longest duration.
  max_dur DURATION,
  -- `total_dur` over the sum of the durations of all kernels on the lane.
  share DOUBLE
) AS
WITH
  per_kernel AS (
    SELECT s.group_id, s.device, s.lane_id, s.track_id, k.name, k.count, k.total_dur, k.max_dur
    FROM _graph_ann_lane_stats AS s
    JOIN _graph_ann_lane_kernels(s.group_id, s.device, s.lane_id) AS k
    UNION ALL
    -- work without a device or lane (no row in `_graph_ann_lane_stats`): its
    -- kernels grouped as they are, named after their first track
    SELECT group_id, device, lane_id, MIN(track_id) AS track_id, name, COUNT(*) AS count, SUM(dur) AS total_dur,
      MAX(dur) AS max_dur
    FROM _graph_ann_work
    WHERE category = 'kernel' AND (device IS NULL OR lane_id IS NULL)
    GROUP BY group_id, device, lane_id, name
  )
SELECT
  group_id,
  device,
  lane_id,
  (SELECT n.name FROM _graph_ann_track_name AS n WHERE n.track_id = k.track_id) AS lane_name,
  name,
  ROW_NUMBER() OVER (PARTITION BY group_id, device, lane_id ORDER BY total_dur DESC, name) AS rank,
  count,
  total_dur,
  CAST(total_dur AS DOUBLE) / count AS mean_dur,
  max_dur,
  CAST(total_dur AS DOUBLE) / SUM(total_dur) OVER (PARTITION BY group_id, device, lane_id) AS share
FROM per_kernel AS k
ORDER BY group_id, device, lane_id, rank;
