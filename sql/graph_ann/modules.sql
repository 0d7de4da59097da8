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
