--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- GPU work of traces written by perfetto_graph_ann: every kernel, memcpy and
-- memset slice with its lane, annotation, replay, graph node and launching call.

INCLUDE PERFETTO MODULE graph_ann.collective_kernels;
INCLUDE PERFETTO MODULE graph_ann.work_args;

-- CPU launch calls (CUDA runtime / driver slices carrying `debug.correlation`):
-- `cudaLaunchKernel*`, memcpy / memset calls and graph launches.
CREATE PERFETTO TABLE _graph_ann_launch(
  -- Slice id of the launch call.
  id LONG,
  -- Start of the call.
  ts TIMESTAMP,
  -- Duration of the call.
  dur DURATION,
  -- Name of the runtime / driver call.
  name STRING,
  -- CUPTI correlation id shared with the GPU work it launched.
  correlation LONG,
  -- Group of the call (`graph_ann_group`; from its thread's track).
  group_id LONG,
  -- Whether the call launches a whole CUDA graph (one replay).
  is_graph_launch BOOL
) AS
SELECT
  c.id,
  c.ts,
  c.dur,
  c.name,
  c.correlation,
  COALESCE(g.group_id, 0) AS group_id,
  c.name GLOB 'cu*GraphLaunch*' AS is_graph_launch
FROM (
  SELECT
    s.id,
    s.ts,
    s.dur,
    s.name,
    s.track_id,
    COALESCE(EXTRACT_ARG(s.arg_set_id, 'debug.correlation'), EXTRACT_ARG(s.arg_set_id, 'args.correlation')) AS correlation
  FROM slice AS s
  WHERE s.category IN ('cuda_runtime', 'cuda_driver', 'runtime', 'driver')
) AS c
LEFT JOIN _graph_ann_track_group AS g USING (track_id)
WHERE c.correlation IS NOT NULL;

-- One launch per (group, correlation id) (the first, should a group repeat
-- one), by `_graph_ann_launch_key`.
CREATE PERFETTO TABLE _graph_ann_launch_by_correlation(
  -- `_graph_ann_launch_key` of the correlation and group.
  launch_key LONG,
  -- Slice id of the first launch call with it.
  id LONG,
  -- Whether a call with it launches a whole CUDA graph.
  is_graph_launch BOOL
) AS
SELECT launch_key, MIN(id) AS id, MAX(is_graph_launch) AS is_graph_launch
FROM (SELECT _graph_ann_launch_key!(correlation, group_id) AS launch_key, id, is_graph_launch FROM _graph_ann_launch)
GROUP BY launch_key
ORDER BY launch_key;

-- The columns of GPU work the metric modules need, materialised once: the
-- three arguments read for every slice (device, lane, correlation) and the
-- launch found by correlation. The `graph_ann_gpu_work` view reads the other
-- arguments on demand. The correlation is not kept: the launch stands for it
-- (a replay's correlation is its launch's).
CREATE PERFETTO TABLE _graph_ann_work(
  -- Slice id.
  id LONG,
  -- Start of the work.
  ts TIMESTAMP,
  -- Duration of the work.
  dur DURATION,
  -- Kernel / memcpy / memset name.
  name STRING,
  -- Kineto category (`kernel`, `gpu_memcpy` or `gpu_memset`; the view derives
  -- `kind` from it, a computed string column being costly to materialise).
  category STRING,
  -- Group (`graph_ann_group`: the lane track's, else 0).
  group_id LONG,
  -- GPU index (`debug.device`, or the lane track's device).
  device LONG,
  -- Lane (`debug.stream`, or the lane track's lane).
  lane_id LONG,
  -- Track of the slice.
  track_id LONG,
  -- Nesting depth of the slice on its track (see `_graph_ann_track_name.laminar`).
  depth LONG,
  -- Slice id of the launching CPU call (matched by `debug.correlation`), NULL if not in the trace.
  launch_id LONG,
  -- Whether a CUDA graph launch launched it.
  is_graphed BOOL,
  -- Argument set of the slice.
  arg_set_id ARGSETID,
  -- 0 compute (a kernel that is no collective), 1 communication (a collective
  -- kernel, `graph_ann.collective_kernels`), 2 memory (memcpy / memset): read
  -- by `overlap` and the collective rows, so the argument lookup runs once.
  class LONG
) AS
WITH
  work AS (
    SELECT
      s.id,
      s.ts,
      s.dur,
      s.name,
      s.category,
      s.track_id,
      s.depth,
      s.arg_set_id,
      COALESCE(k.group_id, 0) AS group_id,
      COALESCE(k.device, _graph_ann_device!(s.arg_set_id)) AS device,
      COALESCE(k.lane_id, _graph_ann_lane!(s.arg_set_id)) AS lane_id,
      COALESCE(EXTRACT_ARG(s.arg_set_id, 'debug.correlation'), EXTRACT_ARG(s.arg_set_id, 'args.correlation')) AS correlation
    FROM slice AS s
    LEFT JOIN _graph_ann_lane_track AS k USING (track_id)
    WHERE _graph_ann_is_gpu_work!(s.category)
  )
SELECT
  w.id,
  w.ts,
  w.dur,
  w.name,
  w.category,
  w.group_id,
  w.device,
  w.lane_id,
  w.track_id,
  w.depth,
  l.id AS launch_id,
  COALESCE(l.is_graph_launch, 0) AS is_graphed,
  w.arg_set_id,
  CASE
    WHEN w.category != 'kernel' THEN 2
    WHEN _graph_ann_is_collective!(w.arg_set_id, w.name) THEN 1
    ELSE 0
  END AS class
FROM work AS w
LEFT JOIN _graph_ann_launch_by_correlation AS l ON l.launch_key = _graph_ann_launch_key!(w.correlation, w.group_id);

-- The name of every track holding GPU work (`_graph_ann_lane_name`: the
-- track's own name, else its thread's); and whether the track's slices nest
-- properly.
--
-- `laminar`: no slice of the track ends after its parent (parents still open
-- at the end of the trace, `dur` -1, contain everything). The trace processor
-- puts a slice at depth d only when the d slices it opened before are all that
-- is still open on the track, so the previous slice at depth d was closed
-- first; on such a track slices of one depth never overlap, and the union of
-- a set of them is the sum of their durations. Mixing complete and
-- begin / end events on one track with ill-nested ends breaks this (a child
-- outlives its parent, and a later slice of the child's depth can overlap the
-- child), which this flag detects (checked on v52 with random ill-nested
-- Chrome JSON: every track with overlapping same-depth slices had such a child).
CREATE PERFETTO TABLE _graph_ann_track_name(
  -- Track id.
  track_id LONG,
  -- Lane name shown for the track.
  name STRING,
  -- Whether every slice of the track lies within its parent (see above).
  laminar BOOL
) AS
SELECT
  t.id AS track_id,
  _graph_ann_lane_name(t.id) AS name,
  NOT EXISTS (
    SELECT 1
    FROM slice AS c
    JOIN slice AS p ON p.id = c.parent_id
    WHERE c.track_id = t.id AND c.depth > 0 AND p.dur >= 0 AND c.ts + c.dur > p.ts + p.dur
  ) AS laminar
FROM (SELECT track_id FROM _graph_ann_work GROUP BY track_id) AS w
JOIN track AS t ON t.id = w.track_id;

-- One row per GPU work slice (Kineto categories `kernel`, `gpu_memcpy`,
-- `gpu_memset`), with its lane, streams, annotation, replay and graph node.
--
-- The lane is the slice's `debug.stream` (the lane it is drawn on); its name is
-- the name of the slice's track. The recorded hardware stream is
-- `debug.original_stream` when the join moved the slice to another lane
-- (graph_lanes="all"), else `debug.stream`. A view: the less used arguments
-- are read when it is queried.
CREATE PERFETTO VIEW graph_ann_gpu_work(
  -- Slice id, to join back to `slice`.
  id ID(slice.id),
  -- Start of the work on the GPU.
  ts TIMESTAMP,
  -- Duration of the work.
  dur DURATION,
  -- End of the work (`ts + dur`).
  end_ts TIMESTAMP,
  -- Kernel name, or the memcpy / memset description.
  name STRING,
  -- Kineto category: `kernel`, `gpu_memcpy` or `gpu_memset`.
  category STRING,
  -- `kernel`, `memcpy` or `memset`.
  kind STRING,
  -- Group of a merged trace the work belongs to (`graph_ann_group`; 0 for a trace that is not a merge).
  group_id LONG,
  -- GPU index (`debug.device`).
  device LONG,
  -- Lane the slice is drawn on (`debug.stream`).
  lane_id LONG,
  -- Lane name: the name of the slice's track (e.g. `62 attention`, `stream 7`).
  lane_name STRING,
  -- Track the slice lies on (one of the lane's tracks when the lane spilled).
  track_id JOINID(track.id),
  -- CUDA stream the work ran on, as recorded by the profiler.
  stream LONG,
  -- Hardware stream of a slice the join moved to its annotated lane, else NULL.
  original_stream LONG,
  -- Annotated lane of a slice left on its hardware stream (graph_lanes="none"), else NULL.
  annotated_stream LONG,
  -- Annotation name (`debug.name`: the innermost annotation scope), NULL if none.
  annotation STRING,
  -- CUPTI correlation id: the launch's; for graphed work the graph launch's, so it identifies the replay.
  correlation LONG,
  -- Slice id of the CPU call that launched the work (matched by correlation), NULL if not in the trace.
  launch_id JOINID(slice.id),
  -- Whether the work was launched by a CUDA graph launch (one replay of a graph).
  is_graphed BOOL,
  -- Executable graph id (`debug.graph id`), where the join or the profiler knows it.
  graph_id LONG,
  -- Graph node key `(graph id << 32) | node local id` (`debug.graph node id`), where known.
  graph_node_id LONG,
  -- 0-based replay index of the graph in this trace (`debug.replay`), where the join set it.
  replay LONG,
  -- How the join matched the slice: `exact`, `calibrated`, `structural`; NULL if not joined.
  join_strategy STRING,
  -- Argument set of the slice, for any other argument.
  arg_set_id ARGSETID
) AS
SELECT
  w.id,
  w.ts,
  w.dur,
  w.ts + w.dur AS end_ts,
  w.name,
  w.category,
  CASE w.category
    WHEN 'kernel' THEN 'kernel'
    WHEN 'gpu_memcpy' THEN 'memcpy'
    ELSE 'memset'
  END AS kind,
  w.group_id,
  w.device,
  w.lane_id,
  n.name AS lane_name,
  w.track_id,
  COALESCE(COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.original_stream'), EXTRACT_ARG(w.arg_set_id, 'args.original_stream')), w.lane_id) AS stream,
  COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.original_stream'), EXTRACT_ARG(w.arg_set_id, 'args.original_stream')) AS original_stream,
  COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.annotated_stream'), EXTRACT_ARG(w.arg_set_id, 'args.annotated_stream')) AS annotated_stream,
  COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.name'), EXTRACT_ARG(w.arg_set_id, 'args.name')) AS annotation,
  COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.correlation'), EXTRACT_ARG(w.arg_set_id, 'args.correlation')) AS correlation,
  w.launch_id,
  w.is_graphed,
  COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.graph id'), EXTRACT_ARG(w.arg_set_id, 'args.graph id')) AS graph_id,
  COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.graph node id'), EXTRACT_ARG(w.arg_set_id, 'args.graph node id')) AS graph_node_id,
  COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.replay'), EXTRACT_ARG(w.arg_set_id, 'args.replay')) AS replay,
  COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.join'), EXTRACT_ARG(w.arg_set_id, 'args.join')) AS join_strategy,
  w.arg_set_id
FROM _graph_ann_work AS w
JOIN _graph_ann_track_name AS n USING (track_id);
