--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Per-lane statistics of GPU work, for `graph_ann.lanes` and
-- `graph_ann.lane_busy`: counts, durations and extremes, and per device the
-- replays' span: from the start of the first graph replay's GPU work to the
-- end of the last one's (see `graph_ann.replays`). The percentiles, which only
-- `graph_ann.lanes` shows, are computed there.

INCLUDE PERFETTO MODULE graph_ann.gpu_work;

-- The one pass over all GPU work that the lane statistics, the top kernels and
-- the replays' span share: per (device, lane, name, category, graphed or not),
-- counts and extremes. Each of the three is then a small aggregate of these
-- groups. Only what needs the groups is aggregated here; a lane's other
-- extremes come from `_graph_ann_lane_extremes`.
CREATE PERFETTO TABLE _graph_ann_lane_group(
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Kernel / memcpy / memset name.
  name STRING,
  -- Kineto category.
  category STRING,
  -- Whether a graph launch launched the work.
  is_graphed BOOL,
  -- Number of work slices.
  work_count LONG,
  -- Sum of the durations.
  total_dur DURATION,
  -- Longest duration.
  max_dur DURATION,
  -- Last end.
  end_ts TIMESTAMP,
  -- Smallest track id.
  track_id LONG
) AS
SELECT
  device,
  lane_id,
  name,
  category,
  is_graphed,
  COUNT(*) AS work_count,
  SUM(dur) AS total_dur,
  MAX(dur) AS max_dur,
  MAX(ts + dur) AS end_ts,
  MIN(track_id) AS track_id
FROM _graph_ann_work
GROUP BY device, lane_id, name, category, is_graphed;

-- One lane's first and last start, shortest duration, largest track id and
-- smallest and largest depth: each the first row of the lane's work in one
-- order, which the trace processor filters and sorts natively. A NULL device
-- or lane matches nothing here (`=`); such work has no row in `graph_ann_lane`
-- (the percentiles are joined with `=` too).
CREATE PERFETTO FUNCTION _graph_ann_lane_extremes(
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG
)
-- One row.
RETURNS TABLE(
  -- First start.
  first_ts LONG,
  -- Last start.
  last_ts LONG,
  -- Shortest duration.
  min_dur LONG,
  -- Largest track id.
  max_track_id LONG,
  -- Smallest depth.
  min_depth LONG,
  -- Largest depth.
  max_depth LONG
) AS
SELECT
  (SELECT ts FROM _graph_ann_work WHERE device = $device AND lane_id = $lane_id ORDER BY ts LIMIT 1) AS first_ts,
  (SELECT ts FROM _graph_ann_work WHERE device = $device AND lane_id = $lane_id ORDER BY ts DESC LIMIT 1) AS last_ts,
  (SELECT dur FROM _graph_ann_work WHERE device = $device AND lane_id = $lane_id ORDER BY dur LIMIT 1) AS min_dur,
  (SELECT track_id FROM _graph_ann_work WHERE device = $device AND lane_id = $lane_id ORDER BY track_id DESC LIMIT 1)
    AS max_track_id,
  (SELECT depth FROM _graph_ann_work WHERE device = $device AND lane_id = $lane_id ORDER BY depth LIMIT 1) AS min_depth,
  (SELECT depth FROM _graph_ann_work WHERE device = $device AND lane_id = $lane_id ORDER BY depth DESC LIMIT 1)
    AS max_depth;

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
SELECT
  device,
  (SELECT ts FROM _graph_ann_work AS w WHERE w.device = g.device AND w.is_graphed = 1 ORDER BY ts LIMIT 1) AS ts,
  MAX(end_ts)
    - (SELECT ts FROM _graph_ann_work AS w WHERE w.device = g.device AND w.is_graphed = 1 ORDER BY ts LIMIT 1) AS dur
FROM _graph_ann_lane_group AS g
WHERE is_graphed
GROUP BY device;

-- Per lane: counts and simple statistics of its work, and whether the lane's
-- work intervals are disjoint by construction ("flat"): all on one track, at
-- one depth, none with a negative duration, on a laminar track (see
-- `_graph_ann_track_name`). A flat lane's busy time is the sum of its
-- durations, with no window pass over its work; writers such as ours keep a
-- lane on one track unless its work overlaps (then extra same-named tracks).
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
  end_ts TIMESTAMP,
  -- Whether the lane's work intervals are disjoint by construction (see above).
  flat BOOL
) AS
SELECT
  s.device,
  s.lane_id,
  s.track_id,
  s.work_count,
  s.kernel_count,
  s.total_dur,
  s.mean_dur,
  x.min_dur,
  s.max_dur,
  x.first_ts,
  x.last_ts,
  s.end_ts,
  s.track_id = x.max_track_id AND x.min_depth = x.max_depth AND x.min_dur >= 0
    AND (SELECT n.laminar FROM _graph_ann_track_name AS n WHERE n.track_id = s.track_id) AS flat
FROM (
  -- The mean as total / count is what AVG(dur) gives for integers (SQLite
  -- sums them exactly, then divides as doubles).
  SELECT
    device,
    lane_id,
    MIN(track_id) AS track_id,
    SUM(work_count) AS work_count,
    SUM(CASE WHEN category = 'kernel' THEN work_count ELSE 0 END) AS kernel_count,
    SUM(total_dur) AS total_dur,
    CAST(SUM(total_dur) AS DOUBLE) / SUM(work_count) AS mean_dur,
    MAX(max_dur) AS max_dur,
    MAX(end_ts) AS end_ts
  FROM _graph_ann_lane_group
  GROUP BY device, lane_id
) AS s
JOIN _graph_ann_lane_extremes(s.device, s.lane_id) AS x;
