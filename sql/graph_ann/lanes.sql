--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Per-lane metrics: how busy each lane of each GPU is and how its work is
-- distributed.
--
-- Definitions used below:
--  * busy time: the length of the union of the lane's work intervals, so work
--    that overlaps on a lane (lanes that gather several hardware streams) is
--    counted once;
--  * profiled span: from the first instant any slice of the trace (CPU or GPU)
--    starts to the last instant one ends, over slices with `dur >= 0`;
--  * replays' span (per device): from the start of the first graph replay's
--    GPU work to the end of the last one's (see `graph_ann.replays`);
--  * percentiles are nearest-rank: the p-th percentile of n durations sorted
--    ascending is the one at 1-based rank ceil(p * n / 100).

INCLUDE PERFETTO MODULE graph_ann.gpu_work;
INCLUDE PERFETTO MODULE graph_ann.intervals;

-- The profiled span: first start and last end over all slices with `dur >= 0`.
CREATE PERFETTO TABLE _graph_ann_profiled_span(
  -- First instant a slice of the trace covers.
  ts TIMESTAMP,
  -- Length of the span.
  dur DURATION
) AS
SELECT MIN(ts) AS ts, MAX(ts + dur) - MIN(ts) AS dur
FROM slice
WHERE dur >= 0;

-- Per device: the span of the graph replays (first start to last end of the
-- GPU work launched by graph launches); no row for a device without replays.
CREATE PERFETTO TABLE _graph_ann_replays_span(
  -- GPU index.
  device LONG,
  -- Start of the first replay's first GPU work.
  ts TIMESTAMP,
  -- Length of the span.
  dur DURATION
) AS
SELECT device, MIN(ts) AS ts, MAX(ts + dur) - MIN(ts) AS dur
FROM _graph_ann_work
WHERE is_graphed
GROUP BY device;

-- Each lane's time split into disjoint covered pieces and the idle gaps
-- between them (see `_graph_ann_intervals_cover`).
CREATE PERFETTO TABLE _graph_ann_lane_cover(
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Start of a covered piece.
  ts TIMESTAMP,
  -- Length of the piece (0 when the interval was covered already).
  dur DURATION,
  -- Start of the idle gap before the piece, NULL if none.
  gap_ts TIMESTAMP,
  -- Length of that gap, NULL if none.
  gap_dur DURATION
) AS
SELECT grp AS device, sub_grp AS lane_id, cover_ts AS ts, cover_dur AS dur, gap_ts, gap_dur
FROM _graph_ann_intervals_cover!(
  (
    SELECT device AS grp, lane_id AS sub_grp, ts, dur
    FROM _graph_ann_work
  )
);

-- Per lane: counts and simple statistics of its work.
CREATE PERFETTO TABLE _graph_ann_lane_stats(
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- One of the lane's tracks (for its name).
  track_id LONG,
  -- Number of work slices.
  work_count LONG,
  -- Of those, kernels.
  kernel_count LONG,
  -- Sum of the durations.
  total_dur DURATION,
  -- Mean duration.
  mean_dur DOUBLE,
  -- Shortest duration.
  min_dur DURATION,
  -- Longest duration.
  max_dur DURATION,
  -- First start.
  first_ts TIMESTAMP,
  -- Last start.
  last_ts TIMESTAMP,
  -- Last end.
  end_ts TIMESTAMP
) AS
SELECT
  device,
  lane_id,
  MIN(track_id) AS track_id,
  COUNT(*) AS work_count,
  SUM(category = 'kernel') AS kernel_count,
  SUM(dur) AS total_dur,
  AVG(dur) AS mean_dur,
  MIN(dur) AS min_dur,
  MAX(dur) AS max_dur,
  MIN(ts) AS first_ts,
  MAX(ts) AS last_ts,
  MAX(ts + dur) AS end_ts
FROM _graph_ann_work
GROUP BY device, lane_id;

-- The k-th shortest (0-based) work duration of a lane. Used for percentiles:
-- the trace processor filters and sorts the lane natively, which is much faster
-- than a window function over all work (v52 wasm: 0.04 s vs 1.7 s at 1M kernels).
CREATE PERFETTO FUNCTION _graph_ann_lane_nth_dur(
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
WHERE device = $device AND lane_id = $lane_id
ORDER BY dur
LIMIT 1 OFFSET $k;

-- Per lane: nearest-rank percentiles of the work durations (the duration at
-- 1-based rank ceil(p * n / 100) in ascending order; ceil via integer division).
CREATE PERFETTO TABLE _graph_ann_lane_pct(
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
  device,
  lane_id,
  _graph_ann_lane_nth_dur(device, lane_id, (50 * work_count + 99) / 100 - 1) AS p50_dur,
  _graph_ann_lane_nth_dur(device, lane_id, (90 * work_count + 99) / 100 - 1) AS p90_dur,
  _graph_ann_lane_nth_dur(device, lane_id, (99 * work_count + 99) / 100 - 1) AS p99_dur
FROM _graph_ann_lane_stats;

-- Per lane: busy time overall and inside the device's replays' span.
CREATE PERFETTO TABLE _graph_ann_lane_busy(
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Length of the union of the lane's work.
  busy_dur DURATION,
  -- Of that, the time inside the replays' span; NULL if the device has no replays.
  replay_busy_dur DURATION
) AS
SELECT
  c.device,
  c.lane_id,
  SUM(c.dur) AS busy_dur,
  SUM(MAX(0, MIN(c.ts + c.dur, r.ts + r.dur) - MAX(c.ts, r.ts))) AS replay_busy_dur
FROM _graph_ann_lane_cover AS c
LEFT JOIN _graph_ann_replays_span AS r USING (device)
GROUP BY c.device, c.lane_id;

-- One row per lane of each GPU: work count, busy time, utilization and the
-- distribution of work durations.
CREATE PERFETTO TABLE graph_ann_lane(
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
  s.device,
  s.lane_id,
  (SELECT n.name FROM _graph_ann_track_name AS n WHERE n.track_id = s.track_id) AS lane_name,
  s.work_count,
  s.kernel_count,
  s.total_dur,
  COALESCE(b.busy_dur, 0) AS busy_dur,
  CAST(COALESCE(b.busy_dur, 0) AS DOUBLE) / (SELECT dur FROM _graph_ann_profiled_span) AS utilization,
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
JOIN _graph_ann_lane_pct AS p USING (device, lane_id)
LEFT JOIN _graph_ann_lane_busy AS b USING (device, lane_id)
LEFT JOIN _graph_ann_replays_span AS r USING (device)
ORDER BY s.device, s.lane_id;

-- Kernels per lane by total time: one row per (device, lane, kernel name),
-- ranked within the lane by total duration (1 = most time; ties by name).
-- Keep `rank <= N` for a lane's top N.
CREATE PERFETTO TABLE graph_ann_lane_top_kernels(
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
    SELECT
      device,
      lane_id,
      MIN(track_id) AS track_id,
      name,
      COUNT(*) AS count,
      SUM(dur) AS total_dur,
      AVG(dur) AS mean_dur,
      MAX(dur) AS max_dur
    FROM _graph_ann_work
    WHERE category = 'kernel'
    GROUP BY device, lane_id, name
  )
SELECT
  device,
  lane_id,
  (SELECT n.name FROM _graph_ann_track_name AS n WHERE n.track_id = k.track_id) AS lane_name,
  name,
  ROW_NUMBER() OVER (PARTITION BY device, lane_id ORDER BY total_dur DESC, name) AS rank,
  count,
  total_dur,
  mean_dur,
  max_dur,
  CAST(total_dur AS DOUBLE) / SUM(total_dur) OVER (PARTITION BY device, lane_id) AS share
FROM per_kernel AS k
ORDER BY device, lane_id, rank;
