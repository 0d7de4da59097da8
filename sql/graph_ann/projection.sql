--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Private: the slices of the converter's GPU projection (replays and scopes)
-- and the replay each scope slice belongs to.

INCLUDE PERFETTO MODULE graph_ann.groups;

-- The group and GPU index of each track under a `GPU N` track (the
-- projection's tracks).
CREATE PERFETTO TABLE _graph_ann_projection_track(
  -- Track id.
  track_id LONG,
  -- Group: that of the root track holding `GPU N` in a merged trace, else 0.
  group_id LONG,
  -- GPU index, from the parent track's name `GPU N`.
  device LONG
) AS
SELECT t.id AS track_id, COALESCE(g.group_id, 0) AS group_id, CAST(SUBSTR(p.name, 5) AS INT) AS device
FROM track AS t
JOIN track AS p ON t.parent_id = p.id
LEFT JOIN graph_ann_group AS g ON g.track_id = p.parent_id
WHERE p.name GLOB 'GPU [0-9]*' AND t.name IN ('graph replays', 'scopes');

-- The projection's replay and scope slices with the arguments both kinds
-- carry, read once for `graph_ann_graph_replay` and `graph_ann_scope_instance`.
CREATE PERFETTO TABLE _graph_ann_projected_slice(
  -- Slice id.
  id LONG,
  -- Slice start.
  ts TIMESTAMP,
  -- Slice duration (the span).
  dur DURATION,
  -- Track of the slice.
  track_id LONG,
  -- Slice name.
  name STRING,
  -- `graph_replay` or `gpu_scope`.
  category STRING,
  -- Argument set of the slice, for the arguments of one kind only.
  arg_set_id ARGSETID,
  -- Group of the slice's track (0 off the projection's tracks).
  group_id LONG,
  -- GPU index of the slice's track (NULL off the projection's tracks).
  device LONG,
  -- Executable graph id (`debug.graph id`).
  graph_id LONG,
  -- 0-based replay index (`debug.replay`).
  replay LONG,
  -- GPU work events (`debug.kernel count`).
  kernel_count LONG,
  -- Length of the union of the GPU work (`debug.busy ns`, else the span).
  busy_dur DURATION
) AS
SELECT
  s.id,
  s.ts,
  s.dur,
  s.track_id,
  s.name,
  s.category,
  s.arg_set_id,
  COALESCE(pt.group_id, 0) AS group_id,
  pt.device,
  EXTRACT_ARG(s.arg_set_id, 'debug.graph id') AS graph_id,
  EXTRACT_ARG(s.arg_set_id, 'debug.replay') AS replay,
  EXTRACT_ARG(s.arg_set_id, 'debug.kernel count') AS kernel_count,
  COALESCE(EXTRACT_ARG(s.arg_set_id, 'debug.busy ns'), s.dur) AS busy_dur
FROM slice AS s
LEFT JOIN _graph_ann_projection_track AS pt USING (track_id)
WHERE s.category IN ('graph_replay', 'gpu_scope');

-- The projected slices of each GPU in start order, with the number of replay
-- slices started at or before each (a replay slice before a scope slice at
-- the same time).
CREATE PERFETTO TABLE _graph_ann_projected_ordinal(
  -- Slice id.
  id LONG,
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- `graph_replay` or `gpu_scope`.
  category STRING,
  -- Executable graph id (NULL on a scope slice whose replay is implied).
  graph_id LONG,
  -- 0-based replay index (NULL where `graph_id` is).
  replay LONG,
  -- Replay slices on the device starting at or before this slice: a replay
  -- slice's own number; for a scope slice, that of its implied replay.
  ordinal LONG
) AS
SELECT
  id,
  group_id,
  device,
  category,
  graph_id,
  replay,
  SUM(category = 'graph_replay') OVER (
    PARTITION BY group_id, device ORDER BY ts, category = 'gpu_scope', id ROWS UNBOUNDED PRECEDING) AS ordinal
FROM _graph_ann_projected_slice;

-- The replay of each scope slice: its own `graph id` and `replay` arguments,
-- else those of its implied replay (see the header).
CREATE PERFETTO TABLE _graph_ann_scope_replay(
  -- Slice id of the scope slice.
  id LONG,
  -- Executable graph id.
  graph_id LONG,
  -- 0-based replay index among the replays of the graph.
  replay LONG
) AS
SELECT
  s.id,
  COALESCE(s.graph_id, r.graph_id) AS graph_id,
  COALESCE(s.replay, r.replay) AS replay
FROM _graph_ann_projected_ordinal AS s
LEFT JOIN _graph_ann_projected_ordinal AS r
  ON s.graph_id IS NULL AND r.category = 'graph_replay' AND r.group_id = s.group_id AND r.device = s.device
    AND r.ordinal = s.ordinal
WHERE s.category = 'gpu_scope';

-- Every projected replay slice with the graph launch it is drawn for (the
-- flow the converter writes from the launch into it; NULL without one), its
-- graph's name (the slice name without ` #<replay>`) and, where the join could
-- not tell the graph, its candidates.
CREATE PERFETTO TABLE _graph_ann_replay_slice(
  -- Slice id of the replay slice.
  id LONG,
  -- Slice id of the graph launch.
  launch_id LONG,
  -- First GPU start of the replay.
  ts TIMESTAMP,
  -- The span.
  dur DURATION,
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Executable graph id (NULL when the join could not tell).
  graph_id LONG,
  -- Graph name (NULL with `graph_id`).
  graph_name STRING,
  -- 0-based replay index among the replays of the graph (NULL with `graph_id`).
  replay LONG,
  -- The graphs the replay may be, `A | B`; NULL when known.
  graph_candidates STRING,
  -- GPU work events of the replay (`debug.kernel count`).
  kernel_count LONG,
  -- Length of the union of the replay's GPU work (`debug.busy ns`).
  busy_dur DURATION,
  -- CPU launch start to first GPU work (`debug.launch latency ns`).
  launch_latency DURATION
) AS
SELECT
  p.id,
  f.slice_out AS launch_id,
  p.ts,
  p.dur,
  p.group_id,
  p.device,
  p.graph_id,
  SUBSTR(p.name, 1, LENGTH(p.name) - LENGTH(' #' || p.replay)) AS graph_name,
  p.replay,
  EXTRACT_ARG(p.arg_set_id, 'debug.graph candidates') AS graph_candidates,
  p.kernel_count,
  p.busy_dur,
  EXTRACT_ARG(p.arg_set_id, 'debug.launch latency ns') AS launch_latency
FROM _graph_ann_projected_slice AS p
LEFT JOIN flow AS f ON f.slice_in = p.id
WHERE p.category = 'graph_replay';
