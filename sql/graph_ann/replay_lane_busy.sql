--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Private: per (graph replay, lane), the extent and counts of the replay's
-- work on the lane and its busy time there, for `graph_ann.replays`.

INCLUDE PERFETTO MODULE graph_ann.intervals;
INCLUDE PERFETTO MODULE graph_ann.lane_layers;

-- Which spellings of the graph id / replay arguments the trace has at all
-- (`debug.*` in our TrackEvent traces, `args.*` in Chrome JSON; neither in a
-- trace the join did not annotate): the per-slice lookups below are skipped
-- for a key no slice has, which gives the same NULLs.
CREATE PERFETTO TABLE _graph_ann_replay_arg_keys(
  -- Whether some slice has `debug.graph id`.
  debug_graph_id BOOL,
  -- Whether some slice has `args.graph id`.
  args_graph_id BOOL,
  -- Whether some slice has `debug.replay`.
  debug_replay BOOL,
  -- Whether some slice has `args.replay`.
  args_replay BOOL
) AS
SELECT
  EXISTS (SELECT 1 FROM args WHERE key = 'debug.graph id') AS debug_graph_id,
  EXISTS (SELECT 1 FROM args WHERE key = 'args.graph id') AS args_graph_id,
  EXISTS (SELECT 1 FROM args WHERE key = 'debug.replay') AS debug_replay,
  EXISTS (SELECT 1 FROM args WHERE key = 'args.replay') AS args_replay;

-- Per (replay, lane): the extent and counts of the replay's work on the lane,
-- and the smallest graph id / replay index on it.
CREATE PERFETTO TABLE _graph_ann_replay_lane_stats(
  -- Slice id of the graph launch.
  launch_id LONG,
  -- Lane id.
  lane_id LONG,
  -- Group (`graph_ann_group`; the launch's, the same for all its work).
  group_id LONG,
  -- GPU index (smallest).
  device LONG,
  -- One of the lane's tracks (for its name).
  track_id LONG,
  -- `debug.graph id` (smallest).
  graph_id LONG,
  -- `debug.replay` (smallest).
  replay LONG,
  -- Number of work slices.
  work_count LONG,
  -- First start.
  ts TIMESTAMP,
  -- Last end.
  end_ts TIMESTAMP,
  -- Sum of the durations.
  total_dur DURATION
) AS
SELECT
  launch_id,
  lane_id,
  MIN(group_id) AS group_id,
  MIN(device) AS device,
  MIN(track_id) AS track_id,
  MIN(COALESCE(
    CASE WHEN (SELECT debug_graph_id FROM _graph_ann_replay_arg_keys) THEN EXTRACT_ARG(arg_set_id, 'debug.graph id') END,
    CASE WHEN (SELECT args_graph_id FROM _graph_ann_replay_arg_keys) THEN EXTRACT_ARG(arg_set_id, 'args.graph id') END
  )) AS graph_id,
  MIN(COALESCE(
    CASE WHEN (SELECT debug_replay FROM _graph_ann_replay_arg_keys) THEN EXTRACT_ARG(arg_set_id, 'debug.replay') END,
    CASE WHEN (SELECT args_replay FROM _graph_ann_replay_arg_keys) THEN EXTRACT_ARG(arg_set_id, 'args.replay') END
  )) AS replay,
  COUNT(*) AS work_count,
  MIN(ts) AS ts,
  MAX(ts + dur) AS end_ts,
  SUM(dur) AS total_dur
FROM _graph_ann_work
WHERE is_graphed
GROUP BY launch_id, lane_id;

-- Per lane with graphed work (the device being the pairs' smallest): whether
-- the busy time of each replay on it is the sum of its durations ("flat"):
-- the lane's graphed work is all on one track, at one depth, with no negative
-- duration, on a laminar track (see `_graph_ann_track_name`), and the pairs'
-- work is all of it (no pair also has work on another device); then the work
-- of any one replay on the lane is flat too. The checks are native filters of
-- the lane's rows.
CREATE PERFETTO TABLE _graph_ann_replay_lane_flat(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- The lane's first track.
  track_id LONG,
  -- Whether the pairs' work is all of the lane's graphed work on the device.
  complete BOOL,
  -- Whether each replay's work on the lane is flat (see above).
  flat BOOL
) AS
SELECT
  l.group_id,
  l.device,
  l.lane_id,
  l.track_id,
  l.complete,
  l.complete
    AND NOT EXISTS (
      SELECT 1 FROM _graph_ann_work
      WHERE group_id = l.group_id AND device = l.device AND lane_id = l.lane_id AND is_graphed = 1
        AND track_id != l.track_id
    )
    AND (
      SELECT depth FROM _graph_ann_work
      WHERE group_id = l.group_id AND device = l.device AND lane_id = l.lane_id AND is_graphed = 1
      ORDER BY depth LIMIT 1
    ) = (
      SELECT depth FROM _graph_ann_work
      WHERE group_id = l.group_id AND device = l.device AND lane_id = l.lane_id AND is_graphed = 1
      ORDER BY depth DESC LIMIT 1
    )
    AND NOT EXISTS (
      SELECT 1 FROM _graph_ann_work
      WHERE group_id = l.group_id AND device = l.device AND lane_id = l.lane_id AND is_graphed = 1 AND dur < 0
    )
    AND (SELECT n.laminar FROM _graph_ann_track_name AS n WHERE n.track_id = l.track_id) AS flat
FROM (
  SELECT
    group_id,
    device,
    lane_id,
    MIN(track_id) AS track_id,
    SUM(work_count) = (
      SELECT COUNT(*) FROM _graph_ann_work AS w
      WHERE w.group_id = p.group_id AND w.device = p.device AND w.lane_id = p.lane_id AND w.is_graphed = 1
    ) AS complete
  FROM _graph_ann_replay_lane_stats AS p
  GROUP BY group_id, device, lane_id
) AS l;

-- The lanes that are not flat but "layered" (see `_graph_ann_lane_layers`),
-- where moreover all the lane's work is graphed and no two replays' work on
-- the lane overlaps in time: then a deeper slice of a replay lies within a
-- depth-0 slice of the same replay, and the replay's busy time on the lane is
-- its total duration less that of its deeper work and less |A intersect B| of
-- its depth-0 work on the lane's two tracks. Each with a key for the SPAN_JOIN.
CREATE PERFETTO TABLE _graph_ann_replay_lane_layered(
  -- Key of the lane.
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
  track_b LONG
) AS
SELECT
  ROW_NUMBER() OVER (ORDER BY f.group_id, f.device, f.lane_id) AS lane_key,
  f.group_id,
  f.device,
  f.lane_id,
  y.track_a,
  y.track_b
FROM _graph_ann_replay_lane_flat AS f
JOIN _graph_ann_lane_layers(f.group_id, f.device, f.lane_id) AS y
WHERE NOT f.flat
  AND f.complete
  AND NOT EXISTS (
    SELECT 1 FROM _graph_ann_work
    WHERE group_id = f.group_id AND device = f.device AND lane_id = f.lane_id AND is_graphed = 0
  )
  AND NOT EXISTS (
    SELECT 1
    FROM (
      SELECT ts, _graph_ann_prev_end!(ts, end_ts) AS prev_end_ts
      FROM _graph_ann_replay_lane_stats
      WHERE group_id = f.group_id AND device = f.device AND lane_id = f.lane_id
    )
    WHERE ts < prev_end_ts
  );

-- The busy time of each replay on one lane: the union of the replay's work on
-- the lane, one window pass over the lane's graphed work in start order,
-- partitioned by replay (the rule of `graph_ann.intervals`).
-- Called per lane: the trace processor filters the lane's rows natively.
CREATE PERFETTO FUNCTION _graph_ann_replay_lane_union(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG
)
-- One row per replay with work on the lane.
RETURNS TABLE(
  -- Slice id of the graph launch.
  launch_id LONG,
  -- Length of the union of the replay's work on the lane.
  busy_dur LONG
) AS
SELECT launch_id, busy_dur
FROM _graph_ann_union_per_replay!((
  SELECT launch_id, ts, dur FROM _graph_ann_work
  WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id AND is_graphed
));

-- The first layer (depth-0 work on the first track) of each layered lane (see
-- `_graph_ann_replay_lane_layered`), keyed by (replay, lane).
CREATE PERFETTO TABLE _graph_ann_replay_layer_a(
  -- Key of the (replay, lane) pair: launch id * (lanes + 1) + lane key.
  pair_key LONG,
  -- Start.
  ts TIMESTAMP,
  -- Duration.
  dur DURATION
) AS
SELECT launch_id * (SELECT COUNT(*) + 1 FROM _graph_ann_replay_lane_layered) + lane_key AS pair_key, ts, dur
FROM _graph_ann_layer_work!(_graph_ann_replay_lane_layered, track_a, FALSE);

-- The second layer (depth-0 work on the last track) of layered lanes on two tracks.
CREATE PERFETTO TABLE _graph_ann_replay_layer_b(
  -- Key of the (replay, lane) pair.
  pair_key LONG,
  -- Start.
  ts TIMESTAMP,
  -- Duration.
  dur DURATION
) AS
SELECT launch_id * (SELECT COUNT(*) + 1 FROM _graph_ann_replay_lane_layered) + lane_key AS pair_key, ts, dur
FROM _graph_ann_layer_work!(_graph_ann_replay_lane_layered, track_b, TRUE);

-- The two layers' intersection, pair by pair (each layer's intervals are
-- disjoint, as SPAN_JOIN requires; it sorts its inputs itself).
CREATE VIRTUAL TABLE _graph_ann_replay_layer_ab
USING SPAN_JOIN(_graph_ann_replay_layer_a PARTITIONED pair_key, _graph_ann_replay_layer_b PARTITIONED pair_key);

-- The pieces of that intersection, materialised so that the sum per pair
-- below is grouped by a plain column (sorted natively).
CREATE PERFETTO TABLE _graph_ann_replay_layer_ab_piece(
  -- Key of the (replay, lane) pair.
  pair_key LONG,
  -- Length of the piece.
  dur DURATION
) AS
SELECT pair_key, dur FROM _graph_ann_replay_layer_ab;

-- The duration of a layered lane's work below depth 0, per replay.
CREATE PERFETTO FUNCTION _graph_ann_replay_deep_dur(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG
)
-- One row per replay with such work on the lane.
RETURNS TABLE(
  -- Slice id of the graph launch.
  launch_id LONG,
  -- Sum of the durations.
  dur LONG
) AS
SELECT launch_id, SUM(dur) AS dur
FROM _graph_ann_work
WHERE group_id = $group_id AND device = $device AND lane_id = $lane_id AND depth > 0
GROUP BY launch_id;

-- Busy time of the (replay, lane) pairs on lanes that are not flat: from the
-- layers on layered lanes, else the union of the replay's work on the lane.
CREATE PERFETTO TABLE _graph_ann_replay_lane_busy(
  -- Slice id of the graph launch.
  launch_id LONG,
  -- Lane id.
  lane_id LONG,
  -- Busy time: the union of the replay's work on the lane.
  busy_dur DURATION
) AS
WITH
  deep AS (
    SELECT d.launch_id * (SELECT COUNT(*) + 1 FROM _graph_ann_replay_lane_layered) + k.lane_key AS pair_key, d.dur
    FROM _graph_ann_replay_lane_layered AS k
    JOIN _graph_ann_replay_deep_dur(k.group_id, k.device, k.lane_id) AS d
    UNION ALL
    SELECT pair_key, SUM(dur) AS dur FROM _graph_ann_replay_layer_ab_piece GROUP BY pair_key
  ),
  less AS (
    SELECT pair_key, SUM(dur) AS dur FROM deep GROUP BY pair_key
  )
SELECT p.launch_id, p.lane_id, p.total_dur - COALESCE(l.dur, 0) AS busy_dur
FROM _graph_ann_replay_lane_layered AS k
JOIN _graph_ann_replay_lane_stats AS p USING (group_id, device, lane_id)
LEFT JOIN less AS l
  ON l.pair_key = p.launch_id * (SELECT COUNT(*) + 1 FROM _graph_ann_replay_lane_layered) + k.lane_key
UNION ALL
SELECT u.launch_id, f.lane_id, u.busy_dur
FROM _graph_ann_replay_lane_flat AS f
JOIN _graph_ann_replay_lane_union(f.group_id, f.device, f.lane_id) AS u
WHERE NOT f.flat
  AND NOT EXISTS (
    SELECT 1 FROM _graph_ann_replay_lane_layered AS k
    WHERE k.group_id = f.group_id AND k.device = f.device AND k.lane_id = f.lane_id
  );
