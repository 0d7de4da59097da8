--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- CUDA graph replays: every graph launch (`cudaGraphLaunch` and its driver /
-- versioned spellings) whose GPU work is in the trace, with its timing on the
-- GPU, the busy time per lane and the launch overhead.
--
-- A replay's GPU work is the work whose correlation id is the graph launch's:
-- CUPTI gives every kernel of one replay its graph launch's correlation.

INCLUDE PERFETTO MODULE graph_ann.gpu_work;

-- Which spellings of the graph id / replay arguments the trace has at all
-- (`debug.*` in our TrackEvent traces, `args.*` in Chrome JSON; neither in a
-- trace the join did not annotate): the per-slice lookups below are skipped
-- for a key no slice has, which gives the same NULLs (v52 wasm, 1M kernels
-- without the keys: 0.5 s less; one lookup instead of two with them).
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
-- the smallest graph id / replay index on it, and whether that work is "flat"
-- (all on one track, at one depth, no negative duration, on a laminar track;
-- see `_graph_ann_track_name`), so that its busy time is the sum of its
-- durations.
CREATE PERFETTO TABLE _graph_ann_replay_lane_stats(
  -- Slice id of the graph launch.
  launch_id LONG,
  -- Lane id.
  lane_id LONG,
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
  total_dur DURATION,
  -- Whether the work is flat (see above).
  flat BOOL
) AS
SELECT
  launch_id,
  lane_id,
  device,
  track_id,
  graph_id,
  replay,
  work_count,
  ts,
  end_ts,
  total_dur,
  track_id = max_track_id AND min_depth = max_depth AND min_dur >= 0
    -- `NOT IN` a (mostly empty) list, not a lookup per pair: 0.15 s less at 1M kernels.
    AND +track_id NOT IN (SELECT n.track_id FROM _graph_ann_track_name AS n WHERE NOT n.laminar) AS flat
FROM (
  SELECT
    launch_id,
    lane_id,
    MIN(device) AS device,
    MIN(track_id) AS track_id,
    MAX(track_id) AS max_track_id,
    MIN(depth) AS min_depth,
    MAX(depth) AS max_depth,
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
    SUM(dur) AS total_dur,
    MIN(dur) AS min_dur
  FROM _graph_ann_work
  WHERE is_graphed
  GROUP BY launch_id, lane_id
) AS g;

-- Per replay: the extent and counts of its GPU work (the per-lane rows summed
-- up).
CREATE PERFETTO TABLE _graph_ann_replay_stats(
  -- Slice id of the graph launch.
  launch_id LONG,
  -- GPU index.
  device LONG,
  -- `debug.graph id` (smallest over the replay's work).
  graph_id LONG,
  -- `debug.replay` (smallest over the replay's work).
  replay LONG,
  -- First start.
  ts TIMESTAMP,
  -- Last end.
  end_ts TIMESTAMP,
  -- Number of work slices.
  work_count LONG,
  -- Number of lanes.
  lane_count LONG
) AS
SELECT
  launch_id,
  MIN(device) AS device,
  MIN(graph_id) AS graph_id,
  MIN(replay) AS replay,
  MIN(ts) AS ts,
  MAX(end_ts) AS end_ts,
  SUM(work_count) AS work_count,
  COUNT(lane_id) AS lane_count
FROM _graph_ann_replay_lane_stats
GROUP BY launch_id;

-- The union of each replay's work in `work` (columns launch_id, ts, dur), one
-- window pass in start order partitioned by replay (the union rule: see
-- `graph_ann.gpu_work`). One row per launch_id: (launch_id, busy_dur).
CREATE PERFETTO MACRO _graph_ann_union_per_replay(
  -- Graphed work: launch_id, ts, dur.
  work TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  SELECT launch_id, SUM(MAX(0, ts + dur - MAX(ts, COALESCE(prev_end_ts, ts)))) AS busy_dur
  FROM (
    SELECT
      launch_id,
      ts,
      dur,
      MAX(ts + dur) OVER (
        PARTITION BY launch_id ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
      ) AS prev_end_ts
    FROM $work
  )
  GROUP BY launch_id
);

-- The busy time of each replay on one lane: the union of the replay's work on
-- the lane, one window pass over the lane's graphed work in start order,
-- partitioned by replay (the union rule: see `graph_ann.gpu_work`).
-- Called per lane: the trace processor filters the lane's rows natively.
CREATE PERFETTO FUNCTION _graph_ann_replay_lane_union(
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
  WHERE device = $device AND lane_id = $lane_id AND is_graphed
));

-- Busy time of the (replay, lane) pairs whose work is not flat, from the lanes
-- that have such a pair.
CREATE PERFETTO TABLE _graph_ann_replay_lane_busy(
  -- Slice id of the graph launch.
  launch_id LONG,
  -- Lane id.
  lane_id LONG,
  -- Busy time: the union of the replay's work on the lane.
  busy_dur DURATION
) AS
SELECT u.launch_id, l.lane_id, u.busy_dur
FROM (
  SELECT device, lane_id FROM _graph_ann_replay_lane_stats WHERE NOT flat GROUP BY device, lane_id
) AS l
JOIN _graph_ann_replay_lane_union(l.device, l.lane_id) AS u;

-- The busy time of each replay on one device: the union of the replay's work
-- over all lanes, one window pass over the device's graphed work, partitioned
-- by replay.
CREATE PERFETTO FUNCTION _graph_ann_replay_union(
  -- GPU index.
  device LONG
)
-- One row per replay on the device.
RETURNS TABLE(
  -- Slice id of the graph launch.
  launch_id LONG,
  -- Length of the union of the replay's work.
  busy_dur LONG
) AS
SELECT launch_id, busy_dur
FROM _graph_ann_union_per_replay!((
  SELECT launch_id, ts, dur FROM _graph_ann_work WHERE device = $device AND is_graphed
));

-- Busy time of every replay.
CREATE PERFETTO TABLE _graph_ann_replay_busy(
  -- Slice id of the graph launch.
  launch_id LONG,
  -- Busy time: the union of the replay's work over all lanes.
  busy_dur DURATION
) AS
SELECT u.launch_id, u.busy_dur
FROM (SELECT device FROM _graph_ann_replay_stats GROUP BY device) AS d
JOIN _graph_ann_replay_union(d.device) AS u;

-- One row per graph replay (graph launch with GPU work in the trace).
CREATE PERFETTO TABLE graph_ann_replay(
  -- Slice id of the CPU graph launch call.
  launch_id LONG,
  -- CUPTI correlation id of the launch, shared by all the replay's GPU work.
  correlation LONG,
  -- GPU index.
  device LONG,
  -- Executable graph id (`debug.graph id` of the work), where known.
  graph_id LONG,
  -- 0-based replay index of that graph in the trace (`debug.replay`), where the join set it.
  replay LONG,
  -- 0-based index of this replay among all replays on the device, by GPU start.
  replay_index LONG,
  -- Name of the launch call.
  launch_name STRING,
  -- Start of the launch call on the CPU.
  launch_ts TIMESTAMP,
  -- Duration of the launch call.
  launch_dur DURATION,
  -- Start of the replay's first GPU work.
  ts TIMESTAMP,
  -- End of the replay's last GPU work.
  end_ts TIMESTAMP,
  -- Wall duration on the GPU: `end_ts - ts`.
  wall_dur DURATION,
  -- Number of GPU work slices in the replay.
  work_count LONG,
  -- Number of lanes the replay's work lies on.
  lane_count LONG,
  -- Time at least one of the replay's slices runs (union over all lanes).
  busy_dur DURATION,
  -- `busy_dur` over `wall_dur`.
  busy_fraction DOUBLE,
  -- Launch overhead: from the start of the CPU launch call to the first GPU work.
  launch_overhead_dur DURATION
) AS
SELECT
  r.launch_id,
  -- The launch's correlation: all the replay's work has it (the launch was found by it).
  l.correlation,
  r.device,
  r.graph_id,
  r.replay,
  ROW_NUMBER() OVER (PARTITION BY r.device ORDER BY r.ts, r.launch_id) - 1 AS replay_index,
  l.name AS launch_name,
  l.ts AS launch_ts,
  l.dur AS launch_dur,
  r.ts,
  r.end_ts,
  r.end_ts - r.ts AS wall_dur,
  r.work_count,
  r.lane_count,
  b.busy_dur,
  CAST(b.busy_dur AS DOUBLE) / NULLIF(r.end_ts - r.ts, 0) AS busy_fraction,
  r.ts - l.ts AS launch_overhead_dur
FROM _graph_ann_replay_stats AS r
JOIN _graph_ann_launch AS l ON l.id = r.launch_id
JOIN _graph_ann_replay_busy AS b USING (launch_id)
ORDER BY r.device, r.ts;

-- One row per (replay, lane): the replay's work on each lane.
CREATE PERFETTO TABLE graph_ann_replay_lane(
  -- Slice id of the CPU graph launch call (joins `graph_ann_replay`).
  launch_id LONG,
  -- CUPTI correlation id of the launch.
  correlation LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Lane name.
  lane_name STRING,
  -- Number of the replay's work slices on the lane.
  work_count LONG,
  -- Start of the replay's first work on the lane.
  ts TIMESTAMP,
  -- End of the replay's last work on the lane.
  end_ts TIMESTAMP,
  -- Time the lane is busy during the replay (union of the lane's intervals).
  busy_dur DURATION
) AS
SELECT
  p.launch_id,
  l.correlation,
  p.device,
  p.lane_id,
  n.name AS lane_name,
  p.work_count,
  p.ts,
  p.end_ts,
  CASE WHEN p.flat THEN p.total_dur ELSE b.busy_dur END AS busy_dur
FROM _graph_ann_replay_lane_stats AS p
JOIN _graph_ann_launch AS l ON l.id = p.launch_id
LEFT JOIN _graph_ann_replay_lane_busy AS b USING (launch_id, lane_id)
-- A join, not a scalar subquery per row: 0.21 -> 0.09 s for 200k rows.
LEFT JOIN _graph_ann_track_name AS n USING (track_id)
ORDER BY p.device, p.ts, p.lane_id;
