--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Private: lanes whose busy time is the union of at most two layers of
-- disjoint intervals (one SPAN_JOIN), for the busy-time modules.

INCLUDE PERFETTO MODULE graph_ann.gpu_work;

-- Whether a lane's union can be had without a window pass, from at most two
-- disjoint "layers": the lane's work lies on one or two tracks (no track id in
-- between), has no negative duration, every slice on those tracks is the
-- lane's own work, and the tracks are laminar (see `_graph_ann_track_name`).
-- Then the lane's work at depth 0 on one track is disjoint (same-depth slices
-- of a laminar track never overlap), and every deeper slice lies within its
-- depth-0 ancestor, itself the lane's work (a child starts after its parent
-- and ends within it): the union of the lane's work on a track is its depth-0
-- work, and the lane's union is |A| + |B| - |A intersect B| for the two
-- tracks' depth-0 work A and B, the intersection from a SPAN_JOIN. Each check
-- is a native filter of the lane's rows. One row (the two tracks, equal for a
-- one-track lane) when it can, none otherwise (also for a NULL device or lane).
CREATE PERFETTO FUNCTION _graph_ann_lane_layers(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG
)
-- At most one row.
RETURNS TABLE(
  -- The lane's first track.
  track_a LONG,
  -- Its last track (= track_a for a lane on one track).
  track_b LONG
) AS
SELECT a AS track_a, b AS track_b
FROM (
  SELECT
    (SELECT track_id FROM _graph_ann_work WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id ORDER BY track_id LIMIT 1) AS a,
    (SELECT track_id FROM _graph_ann_work WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id ORDER BY track_id DESC LIMIT 1) AS b
) AS t
WHERE t.a IS NOT NULL
  AND NOT EXISTS (
    SELECT 1 FROM _graph_ann_work
    WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id AND track_id > t.a AND track_id < t.b
  )
  AND NOT EXISTS (SELECT 1 FROM _graph_ann_work WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id AND dur < 0)
  AND (SELECT laminar FROM _graph_ann_track_name WHERE track_id = t.a)
  AND (SELECT laminar FROM _graph_ann_track_name WHERE track_id = t.b)
  AND (SELECT COUNT(*) FROM slice WHERE track_id = t.a)
    = (SELECT COUNT(*) FROM _graph_ann_work WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id AND track_id = t.a)
  AND (SELECT COUNT(*) FROM slice WHERE track_id = t.b)
    = (SELECT COUNT(*) FROM _graph_ann_work WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id AND track_id = t.b);

-- One layer of a lane (see `_graph_ann_lane_layers`): its work on one track at
-- depth 0 with a positive duration (zero-length work adds nothing to a union),
-- in start order.
CREATE PERFETTO FUNCTION _graph_ann_lane_layer(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- The track.
  track_id LONG
)
-- One row per slice of the layer.
RETURNS TABLE(
  -- Start.
  ts LONG,
  -- Duration.
  dur LONG,
  -- Slice id of the launching CPU call.
  launch_id LONG,
  -- Whether a graph launch launched it.
  is_graphed BOOL
) AS
SELECT ts, dur, launch_id, is_graphed
FROM _graph_ann_work
WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id AND track_id = $track_id AND depth = 0 AND dur > 0;

-- The depth-0 work of one layer of every lane of `layered` (a table with
-- `lane_key`, `group_id`, `device`, `lane_id`, `track_a` and `track_b`, one row per lane
-- found by `_graph_ann_lane_layers`): the layer on the track in column `track`;
-- `second` is true for the second layer, which a lane on one track does not
-- have (its one track is its first layer). Each layer's intervals are disjoint,
-- as SPAN_JOIN requires.
CREATE PERFETTO MACRO _graph_ann_layer_work(
  -- The lanes, one row each.
  layered TableOrSubquery,
  -- `track_a` or `track_b`.
  track ColumnName,
  -- Whether this is the second layer.
  second Expr
)
RETURNS TableOrSubquery AS
(
  SELECT k.lane_key, w.launch_id, w.ts, w.dur
  FROM $layered AS k
  JOIN _graph_ann_lane_layer(k.group_id, k.device, k.lane_id, k.$track) AS w
  WHERE NOT $second OR k.track_b != k.track_a
);
