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
INCLUDE PERFETTO MODULE graph_ann.intervals;

-- Per (replay, lane): the extent, counts and busy time of the replay's work
-- on the lane, and the smallest graph id / replay index on it.
CREATE PERFETTO TABLE _graph_ann_replay_lane_work(
  -- Slice id of the graph launch.
  launch_id LONG,
  -- Lane id.
  lane_id LONG,
  -- Correlation id (smallest; all the replay's work shares the launch's).
  correlation LONG,
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
  -- Busy time: the union of the replay's work on the lane.
  busy_dur DURATION
) AS
SELECT
  grp AS launch_id,
  sub_grp AS lane_id,
  MIN(correlation) AS correlation,
  MIN(device) AS device,
  MIN(track_id) AS track_id,
  MIN(COALESCE(EXTRACT_ARG(arg_set_id, 'debug.graph id'), EXTRACT_ARG(arg_set_id, 'args.graph id'))) AS graph_id,
  MIN(COALESCE(EXTRACT_ARG(arg_set_id, 'debug.replay'), EXTRACT_ARG(arg_set_id, 'args.replay'))) AS replay,
  COUNT(*) AS work_count,
  MIN(ts) AS ts,
  MAX(ts + dur) AS end_ts,
  SUM(cover_dur) AS busy_dur
FROM _graph_ann_intervals_cover!(
  (
    SELECT launch_id AS grp, lane_id AS sub_grp, correlation, device, track_id, arg_set_id, ts, dur
    FROM _graph_ann_work
    WHERE is_graphed
  )
)
GROUP BY grp, sub_grp;

-- Per replay: the extent, counts and busy time of its GPU work (the per-lane
-- rows summed up; the busy time is the union over all lanes, one more pass).
CREATE PERFETTO TABLE _graph_ann_replay_work(
  -- Slice id of the graph launch.
  launch_id LONG,
  -- Its correlation id.
  correlation LONG,
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
  lane_count LONG,
  -- Busy time: the union of the replay's work over all lanes.
  busy_dur DURATION
) AS
WITH
  busy AS (
    SELECT grp AS launch_id, SUM(cover_dur) AS busy_dur
    FROM _graph_ann_intervals_cover!(
      (SELECT launch_id AS grp, 0 AS sub_grp, ts, dur FROM _graph_ann_work WHERE is_graphed)
    )
    GROUP BY grp
  ),
  per_replay AS (
    SELECT
      launch_id,
      MIN(correlation) AS correlation,
      MIN(device) AS device,
      MIN(graph_id) AS graph_id,
      MIN(replay) AS replay,
      MIN(ts) AS ts,
      MAX(end_ts) AS end_ts,
      SUM(work_count) AS work_count,
      COUNT(lane_id) AS lane_count
    FROM _graph_ann_replay_lane_work
    GROUP BY launch_id
  )
SELECT
  p.launch_id,
  p.correlation,
  p.device,
  p.graph_id,
  p.replay,
  p.ts,
  p.end_ts,
  p.work_count,
  p.lane_count,
  b.busy_dur
FROM per_replay AS p
JOIN busy AS b USING (launch_id);

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
  r.correlation,
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
  r.busy_dur,
  CAST(r.busy_dur AS DOUBLE) / NULLIF(r.end_ts - r.ts, 0) AS busy_fraction,
  r.ts - l.ts AS launch_overhead_dur
FROM _graph_ann_replay_work AS r
JOIN _graph_ann_launch AS l ON l.id = r.launch_id
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
  p.correlation,
  p.device,
  p.lane_id,
  (SELECT n.name FROM _graph_ann_track_name AS n WHERE n.track_id = p.track_id) AS lane_name,
  p.work_count,
  p.ts,
  p.end_ts,
  p.busy_dur
FROM _graph_ann_replay_lane_work AS p
ORDER BY p.device, p.ts, p.lane_id;
