--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- What `perfetto-graph-ann diff` compares: per graph replay, and per scope,
-- lane, collective and kernel of a replay, in the two groups of a merged trace.

INCLUDE PERFETTO MODULE graph_ann.replays;
INCLUDE PERFETTO MODULE graph_ann.scopes;
INCLUDE PERFETTO MODULE graph_ann.collectives;

-- Per replay: the GPU time of its work (the sum of the durations).
CREATE PERFETTO TABLE _graph_ann_diff_replay_gpu(
  -- Slice id of the graph launch.
  launch_id LONG,
  -- Sum of the durations of the replay's GPU work.
  gpu_dur DURATION
) AS
SELECT launch_id, SUM(dur) AS gpu_dur
FROM _graph_ann_work
WHERE is_graphed AND launch_id IS NOT NULL
GROUP BY launch_id;

-- One row per graph replay, with what `diff` compares of it.
CREATE PERFETTO TABLE graph_ann_diff_replay(
  -- Group of the merged trace (`graph_ann_group`): one run.
  group_id LONG,
  -- Slice id of the CPU graph launch call (joins `graph_ann_replay`).
  launch_id JOINID(slice.id),
  -- GPU index.
  device LONG,
  -- Executable graph id, where known.
  graph_id LONG,
  -- 0-based replay index of the graph (`debug.replay`), where the join set it.
  replay LONG,
  -- 0-based index among all replays on the device (of its group), by GPU start.
  replay_index LONG,
  -- Graph name: the projected replay's, else `graph <graph id>`, else the launch call's name.
  graph_name STRING,
  -- GPU work events of the replay (kernels, memcpy, memset).
  kernel_count LONG,
  -- Wall time on the GPU: first start to last end of the replay's work.
  wall_dur DURATION,
  -- Busy time: the union of the replay's work over all lanes.
  busy_dur DURATION,
  -- GPU time: the sum of the durations of the replay's work.
  gpu_dur DURATION,
  -- Launch latency: start of the CPU launch call to the replay's first GPU work.
  launch_latency_dur DURATION
) AS
SELECT
  r.group_id,
  r.launch_id,
  r.device,
  r.graph_id,
  r.replay,
  r.replay_index,
  COALESCE(g.graph_name, 'graph ' || r.graph_id, r.launch_name) AS graph_name,
  r.work_count AS kernel_count,
  r.wall_dur,
  r.busy_dur,
  k.gpu_dur,
  r.launch_to_gpu_dur AS launch_latency_dur
FROM graph_ann_replay AS r
LEFT JOIN graph_ann_graph_replay AS g USING (group_id, graph_id, replay)
LEFT JOIN _graph_ann_diff_replay_gpu AS k USING (launch_id)
ORDER BY r.group_id, r.device, r.ts;

-- One row per (replay, item): the replay's scopes (by path), lanes (by name),
-- collectives (by type) and kernels (by name), with what `diff` compares.
-- A scope's GPU time is not listed (NULL): a scope instance is a span of the
-- replay's work, its kernels are not keyed here; its busy time is.
CREATE PERFETTO TABLE graph_ann_diff_item(
  -- Group of the merged trace (`graph_ann_group`): one run.
  group_id LONG,
  -- Slice id of the CPU graph launch call of the replay (joins `graph_ann_diff_replay`).
  launch_id JOINID(slice.id),
  -- `scope`, `lane`, `collective` or `kernel`.
  kind STRING,
  -- The item's name: scope path, lane name, collective type or kernel name.
  name STRING,
  -- Nesting depth of a scope (0: outermost); 0 for the other kinds.
  depth LONG,
  -- GPU work events of the item in the replay.
  kernel_count LONG,
  -- Span: the item's first start to its last end in the replay (scopes and lanes; NULL otherwise).
  dur DURATION,
  -- Busy time: the union of the item's work in the replay (scopes and lanes; NULL otherwise).
  busy_dur DURATION,
  -- GPU time: the sum of the durations of the item's work in the replay (NULL for scopes).
  gpu_dur DURATION
) AS
WITH
  work AS (
    SELECT launch_id, group_id, lane_id, name, dur
    FROM _graph_ann_work
    WHERE is_graphed AND launch_id IS NOT NULL
  ),
  lane_gpu AS (
    SELECT launch_id, lane_id, SUM(dur) AS gpu_dur FROM work GROUP BY launch_id, lane_id
  )
SELECT
  r.group_id,
  r.launch_id,
  'scope' AS kind,
  s.scope_path AS name,
  s.depth,
  s.kernel_count,
  s.dur,
  s.busy_dur,
  NULL AS gpu_dur
FROM graph_ann_scope_instance AS s
JOIN graph_ann_replay AS r USING (group_id, graph_id, replay)
UNION ALL
SELECT
  l.group_id,
  l.launch_id,
  'lane' AS kind,
  COALESCE(l.lane_name, 'lane ' || l.lane_id) AS name,
  0 AS depth,
  l.work_count AS kernel_count,
  l.end_ts - l.ts AS dur,
  l.busy_dur,
  g.gpu_dur
FROM graph_ann_replay_lane AS l
LEFT JOIN lane_gpu AS g USING (launch_id, lane_id)
UNION ALL
SELECT
  w.group_id,
  w.launch_id,
  'collective' AS kind,
  COALESCE(c.collective_type, c.name) AS name,
  0 AS depth,
  COUNT(*) AS kernel_count,
  NULL AS dur,
  NULL AS busy_dur,
  SUM(c.dur) AS gpu_dur
FROM graph_ann_collective AS c
JOIN _graph_ann_work AS w USING (id)
WHERE w.is_graphed AND w.launch_id IS NOT NULL
GROUP BY w.group_id, w.launch_id, COALESCE(c.collective_type, c.name)
UNION ALL
SELECT
  group_id,
  launch_id,
  'kernel' AS kind,
  name,
  0 AS depth,
  COUNT(*) AS kernel_count,
  NULL AS dur,
  NULL AS busy_dur,
  SUM(dur) AS gpu_dur
FROM work
GROUP BY group_id, launch_id, name;
