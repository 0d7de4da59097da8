--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Scope ranges on the GPU: every `mark_kernels` scope instance of every replay,
-- as the converter projects them, and per scope its statistics across replays.

INCLUDE PERFETTO MODULE graph_ann.projection;
INCLUDE PERFETTO MODULE graph_ann.percentiles;

-- Every scope instance of every replay.
CREATE PERFETTO TABLE graph_ann_scope_instance(
  -- Slice id of the scope slice.
  id ID(slice.id),
  -- Earliest start of the GPU work inside the scope.
  ts TIMESTAMP,
  -- Latest end minus earliest start (the span).
  dur DURATION,
  -- Group of a merged trace (`graph_ann_group`; 0 for a trace that is not a merge).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Executable graph id.
  graph_id LONG,
  -- Graph name (from the instance's replay slice).
  graph_name STRING,
  -- 0-based replay index among the replays of the graph.
  replay LONG,
  -- The scope's label: its `name` and other fields (`layer 3`).
  scope STRING,
  -- Labels from the outermost enclosing scope down to this one (`layer 3 / attn`).
  scope_path STRING,
  -- Nesting depth (0: outermost).
  depth LONG,
  -- GPU work events inside the scope.
  kernel_count LONG,
  -- Length of the union of that work (at most `dur`).
  busy_dur DURATION
) AS
SELECT
  i.id,
  i.ts,
  i.dur,
  i.group_id,
  COALESCE(r.device, i.device) AS device,
  i.graph_id,
  r.graph_name,
  i.replay,
  i.scope,
  i.scope_path,
  (LENGTH(i.scope_path) - LENGTH(REPLACE(i.scope_path, ' / ', ''))) / 3 AS depth,
  i.kernel_count,
  i.busy_dur
FROM (
  SELECT
    p.id,
    p.ts,
    p.dur,
    p.group_id,
    p.device,
    p.name AS scope,
    sr.graph_id,
    sr.replay,
    COALESCE(EXTRACT_ARG(p.arg_set_id, 'debug.scope path'), p.name) AS scope_path,
    p.kernel_count,
    p.busy_dur
  FROM _graph_ann_projected_slice AS p
  JOIN _graph_ann_scope_replay AS sr USING (id)
  WHERE p.category = 'gpu_scope'
) AS i
LEFT JOIN _graph_ann_replay_slice AS r USING (group_id, graph_id, replay);

-- Scope instances with their rank among the instances of the same scope
-- (group, graph and path), longest span first.
CREATE PERFETTO TABLE _graph_ann_scope_ranked(
  -- Slice id of the scope slice.
  id LONG,
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- Executable graph id.
  graph_id LONG,
  -- Graph name.
  graph_name STRING,
  -- Scope path.
  scope_path STRING,
  -- Span of the instance.
  dur DURATION,
  -- 1-based rank by span ascending (ties: slice id).
  asc_rank LONG,
  -- 1-based rank by span descending (ties: slice id).
  desc_rank LONG,
  -- Instances of the scope.
  n LONG
) AS
SELECT
  id,
  group_id,
  graph_id,
  graph_name,
  scope_path,
  dur,
  ROW_NUMBER() OVER (PARTITION BY group_id, graph_id, graph_name, scope_path ORDER BY dur, id) AS asc_rank,
  ROW_NUMBER() OVER (PARTITION BY group_id, graph_id, graph_name, scope_path ORDER BY dur DESC, id) AS desc_rank,
  COUNT(*) OVER (PARTITION BY group_id, graph_id, graph_name, scope_path) AS n
FROM graph_ann_scope_instance;

-- Per scope (group, graph and path) across its replays: span and busy-time statistics.
CREATE PERFETTO TABLE graph_ann_scope_stats(
  -- Group of a merged trace (`graph_ann_group`; 0 for a trace that is not a merge).
  group_id LONG,
  -- Executable graph id.
  graph_id LONG,
  -- Graph name.
  graph_name STRING,
  -- Scope path (`layer 3 / attn`).
  scope_path STRING,
  -- The scope's own label (`attn`).
  scope STRING,
  -- Nesting depth (0: outermost).
  depth LONG,
  -- Number of instances (replays in which the scope ran).
  instance_count LONG,
  -- GPU work events inside one instance (the largest count over the instances).
  kernel_count LONG,
  -- Mean span.
  mean_dur DOUBLE,
  -- Median span (nearest rank).
  p50_dur DURATION,
  -- 90th percentile of the span (nearest rank).
  p90_dur DURATION,
  -- Longest span.
  max_dur DURATION,
  -- Mean busy time (union of the scope's work).
  mean_busy_dur DOUBLE,
  -- Sum of the spans over all instances.
  total_dur DURATION,
  -- Start of the earliest instance (orders scopes as they ran).
  first_ts TIMESTAMP
) AS
SELECT
  i.group_id,
  i.graph_id,
  i.graph_name,
  i.scope_path,
  MIN(i.scope) AS scope,
  MIN(i.depth) AS depth,
  COUNT(*) AS instance_count,
  MAX(i.kernel_count) AS kernel_count,
  AVG(i.dur) AS mean_dur,
  MIN(CASE WHEN r.asc_rank = _graph_ann_nearest_rank!(50, r.n) THEN i.dur END) AS p50_dur,
  MIN(CASE WHEN r.asc_rank = _graph_ann_nearest_rank!(90, r.n) THEN i.dur END) AS p90_dur,
  MAX(i.dur) AS max_dur,
  AVG(i.busy_dur) AS mean_busy_dur,
  SUM(i.dur) AS total_dur,
  MIN(i.ts) AS first_ts
FROM graph_ann_scope_instance AS i
JOIN _graph_ann_scope_ranked AS r USING (id)
GROUP BY i.group_id, i.graph_id, i.graph_name, i.scope_path;

-- Every scope instance with how it compares to the other instances of its
-- scope: sort by `dur` (or `vs_p50`) descending for the slowest instances.
CREATE PERFETTO TABLE graph_ann_scope_slowest(
  -- Slice id of the scope slice.
  id ID(slice.id),
  -- Start of the instance.
  ts TIMESTAMP,
  -- Span of the instance.
  dur DURATION,
  -- Group of a merged trace (`graph_ann_group`; 0 for a trace that is not a merge).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Graph name.
  graph_name STRING,
  -- Replay index.
  replay LONG,
  -- Scope path.
  scope_path STRING,
  -- 1-based rank among the instances of the scope, slowest first.
  rank LONG,
  -- Span divided by the scope's median span.
  vs_p50 DOUBLE
) AS
SELECT
  i.id,
  i.ts,
  i.dur,
  i.group_id,
  i.device,
  i.graph_name,
  i.replay,
  i.scope_path,
  r.desc_rank AS rank,
  CAST(i.dur AS DOUBLE) / NULLIF(s.p50_dur, 0) AS vs_p50
FROM graph_ann_scope_instance AS i
JOIN _graph_ann_scope_ranked AS r USING (id)
JOIN graph_ann_scope_stats AS s
  ON s.group_id = i.group_id AND s.graph_id = i.graph_id AND s.graph_name = i.graph_name
    AND s.scope_path = i.scope_path;
