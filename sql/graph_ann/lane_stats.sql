--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Per-lane statistics of GPU work (counts, durations, extremes) and per
-- device the replays' span, for `graph_ann.lanes` and `graph_ann.lane_busy`.

INCLUDE PERFETTO MODULE graph_ann.gpu_work;

-- One lane's counts, sums and extremes. Each is either one aggregate pass
-- over the lane's rows (which the trace processor filters natively) or the
-- first row of the lane's work in one order (filtered and sorted natively):
-- no GROUP BY over all GPU work. A NULL device or lane matches nothing here
-- (`=`); such work has no row in `_graph_ann_lane_stats`.
CREATE PERFETTO FUNCTION _graph_ann_lane_figures(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG
)
-- One row.
RETURNS TABLE(
  -- Number of work slices.
  work_count LONG,
  -- Sum of the durations.
  total_dur LONG,
  -- Last end.
  end_ts LONG,
  -- Number of kernels.
  kernel_count LONG,
  -- Longest duration.
  max_dur LONG,
  -- First start.
  first_ts LONG,
  -- Last start.
  last_ts LONG,
  -- Shortest duration.
  min_dur LONG,
  -- Smallest track id.
  track_id LONG,
  -- Largest track id.
  max_track_id LONG,
  -- Smallest depth.
  min_depth LONG,
  -- Largest depth.
  max_depth LONG
) AS
SELECT
  a.work_count,
  a.total_dur,
  a.end_ts,
  (SELECT COUNT(*) FROM _graph_ann_work WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id AND category = 'kernel')
    AS kernel_count,
  (SELECT dur FROM _graph_ann_work WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id ORDER BY dur DESC LIMIT 1) AS max_dur,
  (SELECT ts FROM _graph_ann_work WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id ORDER BY ts LIMIT 1) AS first_ts,
  (SELECT ts FROM _graph_ann_work WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id ORDER BY ts DESC LIMIT 1) AS last_ts,
  (SELECT dur FROM _graph_ann_work WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id ORDER BY dur LIMIT 1) AS min_dur,
  (SELECT track_id FROM _graph_ann_work WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id ORDER BY track_id LIMIT 1)
    AS track_id,
  (SELECT track_id FROM _graph_ann_work WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id ORDER BY track_id DESC LIMIT 1)
    AS max_track_id,
  (SELECT depth FROM _graph_ann_work WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id ORDER BY depth LIMIT 1) AS min_depth,
  (SELECT depth FROM _graph_ann_work WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id ORDER BY depth DESC LIMIT 1)
    AS max_depth
FROM (
  SELECT COUNT(*) AS work_count, SUM(dur) AS total_dur, MAX(ts + dur) AS end_ts
  FROM _graph_ann_work
  WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id
) AS a;

-- The lanes that have GPU work: one row per (group, device, lane), neither
-- device nor lane NULL.
CREATE PERFETTO TABLE _graph_ann_lane_ids(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG
) AS
SELECT group_id, device, lane_id
FROM _graph_ann_work
WHERE device IS NOT NULL AND lane_id IS NOT NULL
GROUP BY group_id, device, lane_id;

-- The last end of one device's graph-launched work, whose last start is
-- `last_ts`. Only work that starts at or after `last_ts` less the longest
-- duration can end after `last_ts`, and the work started last ends no
-- earlier than `last_ts` unless its duration is negative: where those
-- candidates (filtered natively) end at `last_ts` or later, their last end is
-- the answer; otherwise every row is read.
CREATE PERFETTO FUNCTION _graph_ann_graphed_end(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Last start of the device's graph-launched work.
  last_ts LONG
)
-- The last end.
RETURNS LONG AS
SELECT CASE WHEN c.end_ts >= $last_ts THEN c.end_ts ELSE (
  SELECT MAX(ts + dur) FROM _graph_ann_work WHERE group_id = $group_id AND device = $device AND is_graphed = 1
) END
FROM (
  SELECT MAX(ts + dur) AS end_ts
  FROM _graph_ann_work
  WHERE group_id = $group_id AND device = $device AND is_graphed = 1 AND ts >= $last_ts - (
    SELECT dur FROM _graph_ann_work WHERE group_id = $group_id AND device = $device AND is_graphed = 1
    ORDER BY dur DESC LIMIT 1
  )
) AS c;

-- Per (group, device): the span of the graph replays (first start to last end
-- of the GPU work launched by graph launches); no row for a device without
-- replays.
CREATE PERFETTO TABLE _graph_ann_replays_span(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Start of the first replay's first GPU work.
  ts TIMESTAMP,
  -- Length of the span.
  dur DURATION
) AS
SELECT group_id, device, ts, _graph_ann_graphed_end(group_id, device, last_ts) - ts AS dur
FROM (
  SELECT
    d.group_id,
    d.device,
    (SELECT ts FROM _graph_ann_work AS w
     WHERE w.group_id = d.group_id AND w.device = d.device AND w.is_graphed = 1 ORDER BY ts LIMIT 1) AS ts,
    (SELECT ts FROM _graph_ann_work AS w
     WHERE w.group_id = d.group_id AND w.device = d.device AND w.is_graphed = 1 ORDER BY ts DESC LIMIT 1) AS last_ts
  FROM (SELECT group_id, device FROM _graph_ann_lane_ids GROUP BY group_id, device) AS d
)
WHERE ts IS NOT NULL;

-- Per lane: counts and simple statistics of its work, and whether the lane's
-- work intervals are disjoint by construction ("flat"): all on one track, at
-- one depth, none with a negative duration, on a laminar track (see
-- `_graph_ann_track_name`). A flat lane's busy time is the sum of its
-- durations, with no window pass over its work; writers such as ours keep a
-- lane on one track unless its work overlaps (then extra same-named tracks).
CREATE PERFETTO TABLE _graph_ann_lane_stats(
  -- Group (`graph_ann_group`).
  group_id LONG,
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
  l.group_id,
  l.device,
  l.lane_id,
  x.track_id,
  x.work_count,
  x.kernel_count,
  x.total_dur,
  -- total / count is what AVG(dur) gives for integers (SQLite sums them
  -- exactly, then divides as doubles)
  CAST(x.total_dur AS DOUBLE) / x.work_count AS mean_dur,
  x.min_dur,
  x.max_dur,
  x.first_ts,
  x.last_ts,
  x.end_ts,
  x.track_id = x.max_track_id AND x.min_depth = x.max_depth AND x.min_dur >= 0
    AND (SELECT n.laminar FROM _graph_ann_track_name AS n WHERE n.track_id = x.track_id) AS flat
FROM _graph_ann_lane_ids AS l
JOIN _graph_ann_lane_figures(l.group_id, l.device, l.lane_id) AS x;
