--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Scope ranges on the GPU (`graph_ann.scope_stats`, included) and, deprecated,
-- the projected replays under their earlier names.

INCLUDE PERFETTO MODULE graph_ann.scope_stats;
INCLUDE PERFETTO MODULE graph_ann.replays;

-- Deprecated (until 0.2): `graph_ann_replay` (module `graph_ann.replays`)
-- under its earlier names, one row per projected replay: `dur` is `wall_dur`,
-- `kernel_count` is `work_count`, `launch_latency` is `launch_to_gpu_dur`, `id`
-- is `replay_slice_id`. The projection's own numbers stand in only for a
-- replay slice without its launch.
CREATE PERFETTO VIEW graph_ann_graph_replay(
  -- Slice id of the replay slice.
  id ID(slice.id),
  -- First GPU start of the replay.
  ts TIMESTAMP,
  -- Last GPU end minus first GPU start (the span).
  dur DURATION,
  -- Group of a merged trace (`graph_ann_group`; 0 for a trace that is not a merge).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Executable graph id (NULL when the join could not tell which graph
  -- replayed: see `graph_candidates`).
  graph_id LONG,
  -- Graph name (`pga.graph(g, name=...)`, else `graph <id>`): the slice name
  -- without its ` #<replay>` suffix (NULL with `graph_id`).
  graph_name STRING,
  -- 0-based replay index among the replays of the graph (NULL with `graph_id`).
  replay LONG,
  -- The graphs the replay may be, `A | B`, when the join could not tell which
  -- (no replay record and several graphs its kernels fit); NULL when known.
  graph_candidates STRING,
  -- GPU work events of the replay.
  kernel_count LONG,
  -- Length of the union of the replay's GPU work.
  busy_dur DURATION,
  -- CPU launch start to first GPU work (NULL when the launch is not in the trace).
  launch_latency DURATION
) AS
SELECT
  s.id,
  COALESCE(r.ts, s.ts) AS ts,
  COALESCE(r.wall_dur, s.dur) AS dur,
  s.group_id,
  s.device,
  s.graph_id,
  s.graph_name,
  s.replay,
  s.graph_candidates,
  COALESCE(r.work_count, s.kernel_count) AS kernel_count,
  COALESCE(r.busy_dur, s.busy_dur) AS busy_dur,
  COALESCE(r.launch_to_gpu_dur, s.launch_latency) AS launch_latency
FROM _graph_ann_replay_slice AS s
LEFT JOIN graph_ann_replay AS r USING (launch_id);
