--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- CUDA graph replays, one row each (the one replay table): timing on the GPU,
-- busy time, launch overhead, and the projection's graph name where present.

INCLUDE PERFETTO MODULE graph_ann.projection;
INCLUDE PERFETTO MODULE graph_ann.replay_lane_busy;

-- Per replay: the extent and counts of its GPU work (the per-lane rows summed
-- up).
CREATE PERFETTO TABLE _graph_ann_replay_stats(
  -- Slice id of the graph launch.
  launch_id LONG,
  -- Group (`graph_ann_group`).
  group_id LONG,
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
  MIN(group_id) AS group_id,
  MIN(device) AS device,
  MIN(graph_id) AS graph_id,
  MIN(replay) AS replay,
  MIN(ts) AS ts,
  MAX(end_ts) AS end_ts,
  SUM(work_count) AS work_count,
  COUNT(lane_id) AS lane_count
FROM _graph_ann_replay_lane_stats
GROUP BY launch_id;

-- Per replay: the last end of the device's earlier work (see the module
-- comment), one window pass in start order over the replays and the GPU work
-- outside replays; NULL when nothing ran before on the device.
CREATE PERFETTO TABLE _graph_ann_replay_prev_end(
  -- Slice id of the graph launch.
  launch_id LONG,
  -- Last end of the earlier work.
  prev_end_ts TIMESTAMP
) AS
SELECT launch_id, prev_end_ts
FROM (
  SELECT
    launch_id,
    MAX(end_ts) OVER (
      PARTITION BY group_id, device ORDER BY ts RANGE BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) AS prev_end_ts
  FROM (
    SELECT launch_id, group_id, device, ts, end_ts FROM _graph_ann_replay_stats
    UNION ALL
    SELECT NULL AS launch_id, group_id, device, ts, ts + dur AS end_ts FROM _graph_ann_work WHERE NOT is_graphed
  )
)
WHERE launch_id IS NOT NULL;

-- The devices whose graphed work `_graph_ann_replay_busy` reads (each
-- replay's smallest device), and whether each replay's busy time there is its
-- span less its idle gaps (see `graph_ann.intervals`): it is when no graphed
-- work has a negative duration and the work of every (replay, lane) pair lies
-- on one device (every lane `complete` in `_graph_ann_replay_lane_flat`), so
-- that the pairs of a replay on a device hold exactly its work there.
CREATE PERFETTO TABLE _graph_ann_replay_device(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Whether the gaps give the busy time (the same for every device).
  by_gaps BOOL
) AS
SELECT
  group_id,
  device,
  NOT EXISTS (SELECT 1 FROM _graph_ann_work WHERE is_graphed = 1 AND dur < 0)
    AND NOT EXISTS (SELECT 1 FROM _graph_ann_replay_lane_flat WHERE NOT complete) AS by_gaps
FROM _graph_ann_replay_stats
GROUP BY group_id, device;

-- The idle gaps inside each replay's work on one device, summed per replay:
-- one window pass over the device's graphed work in start order, partitioned
-- by replay. Only the gap rows are summed, which is what makes this cheaper
-- than summing every interval's piece of the union.
CREATE PERFETTO FUNCTION _graph_ann_replay_gap_dur(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG
)
-- One row per replay with at least one gap on the device.
RETURNS TABLE(
  -- Slice id of the graph launch.
  launch_id LONG,
  -- Sum of the gaps' lengths.
  gap_dur LONG
) AS
SELECT launch_id, SUM(ts - prev_end_ts) AS gap_dur
FROM (
  SELECT launch_id, ts, _graph_ann_prev_end_by!(launch_id, ts, ts + dur) AS prev_end_ts
  FROM _graph_ann_work
  WHERE group_id = $group_id AND device = $device AND is_graphed
)
WHERE ts > prev_end_ts
GROUP BY launch_id;

-- The gaps of every replay, per device where they give the busy time.
CREATE PERFETTO TABLE _graph_ann_replay_gap(
  -- Slice id of the graph launch.
  launch_id LONG,
  -- GPU index.
  device LONG,
  -- Sum of the gaps' lengths.
  gap_dur DURATION
) AS
SELECT g.launch_id, d.device, g.gap_dur
FROM _graph_ann_replay_device AS d
JOIN _graph_ann_replay_gap_dur(d.group_id, d.device) AS g
WHERE d.by_gaps;

-- The busy time of each replay on one device: the union of the replay's work
-- over all lanes, summed piece by piece (the rule of `graph_ann.intervals`),
-- one window pass over the device's graphed work, partitioned by replay. Used
-- where the gaps cannot be (see `_graph_ann_replay_device`).
CREATE PERFETTO FUNCTION _graph_ann_replay_union(
  -- Group (`graph_ann_group`).
  group_id LONG,
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
  SELECT launch_id, ts, dur FROM _graph_ann_work WHERE group_id = $group_id AND device = $device AND is_graphed
));

-- Busy time of every replay: per device of `_graph_ann_replay_device` with
-- work of the replay, the union of that work (one row per such device).
CREATE PERFETTO TABLE _graph_ann_replay_busy(
  -- Slice id of the graph launch.
  launch_id LONG,
  -- Busy time: the union of the replay's work over all lanes.
  busy_dur DURATION
) AS
SELECT launch_id, SUM(dur) AS busy_dur
FROM (
  -- The span (first start to last end) less the gaps; a sum rather than a
  -- join on two columns, which the trace processor does not look up natively.
  SELECT s.launch_id, s.device, s.end_ts - s.ts AS dur
  FROM (
    SELECT launch_id, group_id, device, MIN(ts) AS ts, MAX(end_ts) AS end_ts
    FROM _graph_ann_replay_lane_stats
    GROUP BY launch_id, group_id, device
  ) AS s
  JOIN _graph_ann_replay_device AS d USING (group_id, device)
  WHERE d.by_gaps
  UNION ALL
  SELECT launch_id, device, -gap_dur AS dur FROM _graph_ann_replay_gap
)
GROUP BY launch_id, device
UNION ALL
SELECT u.launch_id, u.busy_dur
FROM _graph_ann_replay_device AS d
JOIN _graph_ann_replay_union(d.group_id, d.device) AS u
WHERE NOT d.by_gaps;

-- One row per graph replay (graph launch with GPU work in the trace).
CREATE PERFETTO TABLE graph_ann_replay(
  -- Slice id of the CPU graph launch call.
  launch_id JOINID(slice.id),
  -- CUPTI correlation id of the launch, shared by all the replay's GPU work.
  correlation LONG,
  -- Group of a merged trace (`graph_ann_group`; 0 for a trace that is not a merge).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Executable graph id (`debug.graph id` of the work), where known.
  graph_id LONG,
  -- 0-based replay index of that graph in the trace (`debug.replay`), where the join set it.
  replay LONG,
  -- 0-based index of this replay among all replays on the device (of its group), by GPU start.
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
  -- From the start of the CPU launch call to the replay's first GPU work:
  -- `queued_dur + launch_overhead_dur`.
  launch_to_gpu_dur DURATION,
  -- Of `launch_to_gpu_dur`, the time the GPU was still busy with earlier work
  -- (see the module comment); 0 when it was idle at the launch.
  queued_dur DURATION,
  -- Launch overhead: `launch_to_gpu_dur` less `queued_dur`, from the later of
  -- the launch call's start and the end of earlier work to the first GPU work.
  launch_overhead_dur DURATION,
  -- Slice id of the replay's slice on the `graph replays` track of its GPU
  -- (the converter's projection); NULL where the trace has none.
  replay_slice_id JOINID(slice.id),
  -- Graph name (`pga.graph(g, name=...)`, else `graph <id>`), from the replay
  -- slice; NULL without one, or when the join could not tell the graph.
  graph_name STRING,
  -- The graphs the replay may be, `A | B`, when the join could not tell which
  -- (no replay record and several graphs its kernels fit); NULL when known.
  graph_candidates STRING
) AS
SELECT
  r.launch_id,
  -- The launch's correlation: all the replay's work has it (the launch was found by it).
  l.correlation,
  r.group_id,
  r.device,
  r.graph_id,
  r.replay,
  ROW_NUMBER() OVER (PARTITION BY r.group_id, r.device ORDER BY r.ts, r.launch_id) - 1 AS replay_index,
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
  r.ts - l.ts AS launch_to_gpu_dur,
  MAX(0, MIN(COALESCE(q.prev_end_ts, l.ts), r.ts) - l.ts) AS queued_dur,
  r.ts - l.ts - MAX(0, MIN(COALESCE(q.prev_end_ts, l.ts), r.ts) - l.ts) AS launch_overhead_dur,
  p.id AS replay_slice_id,
  p.graph_name,
  p.graph_candidates
FROM _graph_ann_replay_stats AS r
JOIN _graph_ann_launch AS l ON l.id = r.launch_id
JOIN _graph_ann_replay_busy AS b USING (launch_id)
JOIN _graph_ann_replay_prev_end AS q USING (launch_id)
LEFT JOIN _graph_ann_replay_slice AS p USING (launch_id)
ORDER BY r.group_id, r.device, r.ts;

-- One row per (replay, lane): the replay's work on each lane.
CREATE PERFETTO TABLE graph_ann_replay_lane(
  -- Slice id of the CPU graph launch call (joins `graph_ann_replay`).
  launch_id JOINID(slice.id),
  -- CUPTI correlation id of the launch.
  correlation LONG,
  -- Group of a merged trace (`graph_ann_group`; 0 for a trace that is not a merge).
  group_id LONG,
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
  p.group_id,
  p.device,
  p.lane_id,
  n.name AS lane_name,
  p.work_count,
  p.ts,
  p.end_ts,
  CASE WHEN f.flat THEN p.total_dur ELSE b.busy_dur END AS busy_dur
FROM _graph_ann_replay_lane_stats AS p
JOIN _graph_ann_replay_lane_flat AS f USING (group_id, device, lane_id)
JOIN _graph_ann_launch AS l ON l.id = p.launch_id
LEFT JOIN _graph_ann_replay_lane_busy AS b USING (launch_id, lane_id)
LEFT JOIN _graph_ann_track_name AS n USING (track_id)
ORDER BY p.group_id, p.device, p.ts, p.lane_id;
