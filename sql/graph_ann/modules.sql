--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Module scopes: the time of every `nn.Module` call captured in a CUDA graph,
-- per replay (total, self, share), and per module path across replays.

INCLUDE PERFETTO MODULE graph_ann.scopes;
INCLUDE PERFETTO MODULE graph_ann.gpu_work;

-- Per replay and innermost module path: the GPU work whose innermost module it is.
CREATE PERFETTO TABLE _graph_ann_module_self(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- Executable graph id (`debug.graph id` of the work).
  graph_id LONG,
  -- 0-based replay index (`debug.replay` of the work).
  replay LONG,
  -- Module path (`debug.module` of the work).
  module_path STRING,
  -- Work slices.
  work_count LONG,
  -- Sum of their durations.
  self_dur DURATION
) AS
SELECT
  group_id,
  EXTRACT_ARG(arg_set_id, 'debug.graph id') AS graph_id,
  EXTRACT_ARG(arg_set_id, 'debug.replay') AS replay,
  EXTRACT_ARG(arg_set_id, 'debug.module') AS module_path,
  COUNT(*) AS work_count,
  SUM(dur) AS self_dur
FROM _graph_ann_work
WHERE is_graphed AND EXTRACT_ARG(arg_set_id, 'debug.module') IS NOT NULL
GROUP BY 1, 2, 3, 4;

-- One row per module call per replay.
CREATE PERFETTO TABLE graph_ann_module_instance(
  -- Slice id of the module's scope slice.
  id ID(slice.id),
  -- Group of a merged trace (`graph_ann_group`; 0 for a trace that is not a merge).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Executable graph id.
  graph_id LONG,
  -- Graph name.
  graph_name STRING,
  -- 0-based replay index among the replays of the graph.
  replay LONG,
  -- Module path (`layers.17.self_attn.o_proj`; the root module: its class name).
  module_path STRING,
  -- The module's class (`Linear`).
  module_class STRING,
  -- Nesting depth among the replay's scopes (0: outermost).
  depth LONG,
  -- Start of the module's first GPU work.
  ts TIMESTAMP,
  -- Its span on the GPU (first start to last end).
  dur DURATION,
  -- GPU work slices of the module, submodules included.
  kernel_count LONG,
  -- Busy time of that work (union of its intervals).
  total_dur DURATION,
  -- Summed durations of the work whose innermost module this is (0 if none).
  self_dur DURATION,
  -- `total_dur` over the replay's busy time.
  replay_share DOUBLE
) AS
SELECT
  s.id,
  s.group_id,
  s.device,
  s.graph_id,
  s.graph_name,
  s.replay,
  s.scope AS module_path,
  EXTRACT_ARG(sl.arg_set_id, 'debug.module class') AS module_class,
  s.depth,
  s.ts,
  s.dur,
  s.kernel_count,
  s.busy_dur AS total_dur,
  COALESCE(m.self_dur, 0) AS self_dur,
  CAST(s.busy_dur AS DOUBLE) / NULLIF(r.busy_dur, 0) AS replay_share
FROM graph_ann_scope_instance AS s
JOIN slice AS sl USING (id)
LEFT JOIN graph_ann_graph_replay AS r USING (group_id, graph_id, replay)
LEFT JOIN _graph_ann_module_self AS m
  ON m.group_id = s.group_id AND m.graph_id = s.graph_id AND m.replay = s.replay AND m.module_path = s.scope
WHERE EXTRACT_ARG(sl.arg_set_id, 'debug.module class') IS NOT NULL;

-- Per module path and graph, across the graph's replays: mean total and self time.
CREATE PERFETTO TABLE graph_ann_module_summary(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- Executable graph id.
  graph_id LONG,
  -- Graph name.
  graph_name STRING,
  -- Module path.
  module_path STRING,
  -- The module's class.
  module_class STRING,
  -- Nesting depth (0: outermost).
  depth LONG,
  -- Replays with this module.
  replays LONG,
  -- Mean GPU work slices per replay, submodules included.
  kernel_count DOUBLE,
  -- Mean `total_dur` per replay.
  mean_total_dur DOUBLE,
  -- Mean `self_dur` per replay.
  mean_self_dur DOUBLE,
  -- Mean `replay_share`.
  mean_replay_share DOUBLE
) AS
SELECT
  group_id,
  graph_id,
  MIN(graph_name) AS graph_name,
  module_path,
  MIN(module_class) AS module_class,
  MIN(depth) AS depth,
  COUNT(*) AS replays,
  AVG(kernel_count) AS kernel_count,
  AVG(total_dur) AS mean_total_dur,
  AVG(self_dur) AS mean_self_dur,
  AVG(replay_share) AS mean_replay_share
FROM graph_ann_module_instance
GROUP BY group_id, graph_id, module_path
ORDER BY group_id, graph_id, mean_total_dur DESC;

-- A module path's kind: the path with every all-digit component (a layer's or an expert's
-- index in a `ModuleList`) replaced by `*` (`model.layers.17.self_attn` ->
-- `model.layers.*.self_attn`), so that the same module of every layer falls in one row.
CREATE PERFETTO FUNCTION graph_ann_module_kind_path(
  -- Module path.
  path STRING
)
-- The path with its all-digit components as `*`.
RETURNS STRING AS
WITH RECURSIVE split(rest, kind_path) AS (
  SELECT $path || '.', NULL
  UNION ALL
  SELECT
    SUBSTR(rest, INSTR(rest, '.') + 1),
    COALESCE(kind_path || '.', '')
      || IIF(SUBSTR(rest, 1, INSTR(rest, '.') - 1) GLOB '[0-9]*'
             AND SUBSTR(rest, 1, INSTR(rest, '.') - 1) NOT GLOB '*[^0-9]*',
             '*', SUBSTR(rest, 1, INSTR(rest, '.') - 1))
  FROM split
  WHERE rest != ''
)
SELECT kind_path FROM split WHERE rest = '';

-- Each module path met and its kind (`graph_ann_module_kind_path`).
CREATE PERFETTO TABLE _graph_ann_module_kind_path(
  -- Module path.
  module_path STRING,
  -- Its kind.
  kind_path STRING
) AS
SELECT module_path, graph_ann_module_kind_path(module_path) AS kind_path
FROM (SELECT DISTINCT module_path FROM graph_ann_module_instance);

-- Per module kind and graph, across the graph's replays: the modules of every layer taken
-- together (`model.layers.*.mlp`), to see which part of a layer the time goes to. Each
-- replay's times are the sums over the kind's modules; a kind's modules never nest in each
-- other (they have as many path components), but where they run at once on several streams
-- each counts its own time, so `mean_total_dur` can then exceed their span.
CREATE PERFETTO TABLE graph_ann_module_kind(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- Executable graph id.
  graph_id LONG,
  -- Graph name.
  graph_name STRING,
  -- Module path with each all-digit component as `*`.
  kind_path STRING,
  -- The modules' class (the first by name where they differ).
  module_class STRING,
  -- Nesting depth (0: outermost; the least of the modules').
  depth LONG,
  -- Module paths of this kind.
  module_count LONG,
  -- Replays with a module of this kind.
  replays LONG,
  -- Mean GPU work slices per replay, summed over the modules (submodules included).
  kernel_count DOUBLE,
  -- Mean per replay of the modules' summed `total_dur`.
  mean_total_dur DOUBLE,
  -- Mean per replay of the modules' summed `self_dur`.
  mean_self_dur DOUBLE,
  -- Mean per replay of the modules' summed `replay_share`.
  mean_replay_share DOUBLE,
  -- Mean per replay of the modules' summed `self_dur` over the replay's busy time.
  mean_self_share DOUBLE
) AS
WITH per_replay AS (
  SELECT
    i.group_id,
    i.graph_id,
    MIN(i.graph_name) AS graph_name,
    i.replay,
    k.kind_path,
    MIN(i.module_class) AS module_class,
    MIN(i.depth) AS depth,
    COUNT(DISTINCT i.module_path) AS module_count,
    SUM(i.kernel_count) AS kernel_count,
    SUM(i.total_dur) AS total_dur,
    SUM(i.self_dur) AS self_dur,
    SUM(i.replay_share) AS replay_share,
    CAST(SUM(i.self_dur) AS DOUBLE) / NULLIF(MIN(r.busy_dur), 0) AS self_share
  FROM graph_ann_module_instance AS i
  JOIN _graph_ann_module_kind_path AS k USING (module_path)
  LEFT JOIN graph_ann_graph_replay AS r USING (group_id, graph_id, replay)
  GROUP BY i.group_id, i.graph_id, i.replay, k.kind_path
)
SELECT
  group_id,
  graph_id,
  MIN(graph_name) AS graph_name,
  kind_path,
  MIN(module_class) AS module_class,
  MIN(depth) AS depth,
  MAX(module_count) AS module_count,
  COUNT(*) AS replays,
  AVG(kernel_count) AS kernel_count,
  AVG(total_dur) AS mean_total_dur,
  AVG(self_dur) AS mean_self_dur,
  AVG(replay_share) AS mean_replay_share,
  AVG(self_share) AS mean_self_share
FROM per_replay
GROUP BY group_id, graph_id, kind_path
ORDER BY group_id, graph_id, mean_self_dur DESC;
