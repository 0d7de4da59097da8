--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Busy time per lane (the union of its work), overall and inside the
-- device's replays' span, for `graph_ann.lanes`.

INCLUDE PERFETTO MODULE graph_ann.intervals;
INCLUDE PERFETTO MODULE graph_ann.lane_layers;
INCLUDE PERFETTO MODULE graph_ann.lane_stats;

-- The union of one lane's work, overall and clipped to a span: one window
-- pass over the lane's work in start order (the rule of `graph_ann.intervals`).
CREATE PERFETTO FUNCTION _graph_ann_lane_union(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Start of the span to clip to (NULL: no span).
  span_ts LONG,
  -- End of that span.
  span_end_ts LONG
)
-- One row: the union's length, and its length inside the span (NULL without a span).
RETURNS TABLE(
  -- Length of the union of the lane's work.
  busy_dur LONG,
  -- Of that, the time inside the span.
  span_busy_dur LONG
) AS
SELECT
  SUM(_graph_ann_union_piece!(ts, ts + dur, prev_end_ts)) AS busy_dur,
  SUM(_graph_ann_union_piece_in!(ts, ts + dur, prev_end_ts, $span_ts, $span_end_ts)) AS span_busy_dur
FROM (
  SELECT ts, dur, _graph_ann_prev_end!(ts, ts + dur) AS prev_end_ts
  FROM _graph_ann_work
  WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id
);

-- The sum of one lane's work durations clipped to a span: the busy time
-- inside the span of a flat lane (see `_graph_ann_lane_stats`), whose work
-- intervals are disjoint.
CREATE PERFETTO FUNCTION _graph_ann_lane_clipped_dur(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Start of the span.
  span_ts LONG,
  -- End of the span.
  span_end_ts LONG
)
-- The sum, NULL when the span is NULL.
RETURNS LONG AS
SELECT SUM(MAX(0, MIN(ts + dur, $span_end_ts) - MAX(ts, $span_ts)))
FROM _graph_ann_work
WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id;

-- The lanes that are not flat but whose union comes from at most two layers
-- (see `_graph_ann_lane_layers`) and that lie in their device's replays' span
-- (or whose device has none), each with a key for the SPAN_JOIN below.
CREATE PERFETTO TABLE _graph_ann_lane_layered(
  -- Key of the lane (partition of the SPAN_JOIN).
  lane_key LONG,
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- The lane's first track.
  track_a LONG,
  -- Its last track.
  track_b LONG,
  -- Whether the device has replays (else the busy time in their span is NULL).
  has_span BOOL
) AS
SELECT
  ROW_NUMBER() OVER (ORDER BY s.group_id, s.device, s.lane_id) AS lane_key,
  s.group_id,
  s.device,
  s.lane_id,
  y.track_a,
  y.track_b,
  r.ts IS NOT NULL AS has_span
FROM _graph_ann_lane_stats AS s
LEFT JOIN _graph_ann_replays_span AS r USING (group_id, device)
JOIN _graph_ann_lane_layers(s.group_id, s.device, s.lane_id) AS y
WHERE NOT s.flat AND (r.ts IS NULL OR (r.ts <= s.first_ts AND s.end_ts <= r.ts + r.dur));

-- The first layer (depth-0 work on the first track) of each such lane.
CREATE PERFETTO TABLE _graph_ann_lane_layer_a(
  -- Key of the lane.
  lane_key LONG,
  -- Start.
  ts TIMESTAMP,
  -- Duration.
  dur DURATION
) AS
SELECT lane_key, ts, dur FROM _graph_ann_layer_work!(_graph_ann_lane_layered, track_a, FALSE);

-- The second layer (depth-0 work on the last track) of such lanes on two tracks.
CREATE PERFETTO TABLE _graph_ann_lane_layer_b(
  -- Key of the lane.
  lane_key LONG,
  -- Start.
  ts TIMESTAMP,
  -- Duration.
  dur DURATION
) AS
SELECT lane_key, ts, dur FROM _graph_ann_layer_work!(_graph_ann_lane_layered, track_b, TRUE);

-- The two layers' intersection, lane by lane (each layer's intervals are
-- disjoint, as SPAN_JOIN requires; it sorts its inputs by partition and start
-- itself).
CREATE VIRTUAL TABLE _graph_ann_lane_layer_ab
USING SPAN_JOIN(_graph_ann_lane_layer_a PARTITIONED lane_key, _graph_ann_lane_layer_b PARTITIONED lane_key);

-- Per lane: busy time overall and inside the device's replays' span. A flat
-- lane's (see `_graph_ann_lane_stats`) is the sum of its durations, plain or
-- clipped to the span (no clipping needed, and no pass over its work, when
-- the lane's first start and last end lie in the span: its durations are not
-- negative, so every interval lies in the span); a layered lane's (see
-- `_graph_ann_lane_layered`) is |A| + |B| - |A intersect B|, all of it in the
-- span; any other lane's is the union of its work.
CREATE PERFETTO TABLE _graph_ann_lane_busy(
  -- Group (`graph_ann_group`).
  group_id LONG,
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
  s.group_id,
  s.device,
  s.lane_id,
  s.total_dur AS busy_dur,
  CASE
    WHEN r.ts <= s.first_ts AND s.end_ts <= r.ts + r.dur THEN s.total_dur
    ELSE _graph_ann_lane_clipped_dur(s.group_id, s.device, s.lane_id, r.ts, r.ts + r.dur)
  END AS replay_busy_dur
FROM _graph_ann_lane_stats AS s
LEFT JOIN _graph_ann_replays_span AS r USING (group_id, device)
WHERE s.flat
UNION ALL
SELECT k.group_id, k.device, k.lane_id, b.busy_dur, CASE WHEN k.has_span THEN b.busy_dur END AS replay_busy_dur
FROM _graph_ann_lane_layered AS k
JOIN (
  -- The lane's total duration less that of its work below depth 0 (within
  -- depth-0 work) is |A| + |B| (zero-length work adds nothing).
  SELECT
    k.lane_key,
    s.total_dur
      - COALESCE((
        SELECT SUM(dur) FROM _graph_ann_work
        WHERE group_id = k.group_id AND device = k.device AND lane_id = k.lane_id AND depth > 0
      ), 0)
      - COALESCE(ab.dur, 0) AS busy_dur
  FROM _graph_ann_lane_layered AS k
  JOIN _graph_ann_lane_stats AS s USING (group_id, device, lane_id)
  LEFT JOIN (
    SELECT lane_key, SUM(dur) AS dur FROM _graph_ann_lane_layer_ab GROUP BY lane_key
  ) AS ab USING (lane_key)
) AS b USING (lane_key)
UNION ALL
SELECT s.group_id, s.device, s.lane_id, u.busy_dur, u.span_busy_dur AS replay_busy_dur
FROM _graph_ann_lane_stats AS s
LEFT JOIN _graph_ann_replays_span AS r USING (group_id, device)
JOIN _graph_ann_lane_union(s.group_id, s.device, s.lane_id, r.ts, r.ts + r.dur) AS u
WHERE NOT s.flat
  AND NOT EXISTS (
    SELECT 1 FROM _graph_ann_lane_layered AS k
    WHERE k.group_id = s.group_id AND k.device = s.device AND k.lane_id = s.lane_id
  );
