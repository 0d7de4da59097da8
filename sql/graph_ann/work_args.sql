--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Private helper: how GPU work and its lane are read from a trace written by
-- perfetto_graph_ann (docs/design.md, "Contract 4"), in one place for every
-- module. `graph_ann.gpu_work` builds its table of all GPU work with these;
-- `graph_ann.overlap` and `graph_ann.lane_idle` build narrower tables of their
-- own straight from `slice` with the same rules, so that each of them, loaded
-- alone, does not pay for the columns and the launch lookup it never reads.
-- Macros are expanded into the query, so a rule costs what the spelled-out
-- expression costs.

-- Whether a slice is GPU work: Kineto category `kernel`, `gpu_memcpy` or
-- `gpu_memset`.
CREATE PERFETTO MACRO _graph_ann_is_gpu_work(
  -- The slice's category.
  category Expr
)
RETURNS Expr AS
($category IN ('kernel', 'gpu_memcpy', 'gpu_memset'));

-- The GPU index of a slice: `debug.device`, else `args.device` (Chrome JSON).
CREATE PERFETTO MACRO _graph_ann_device(
  -- The slice's argument set.
  arg_set_id Expr
)
RETURNS Expr AS
(COALESCE(EXTRACT_ARG($arg_set_id, 'debug.device'), EXTRACT_ARG($arg_set_id, 'args.device')));

-- The lane of a slice: `debug.stream`, else `args.stream` (Chrome JSON).
CREATE PERFETTO MACRO _graph_ann_lane(
  -- The slice's argument set.
  arg_set_id Expr
)
RETURNS Expr AS
(COALESCE(EXTRACT_ARG($arg_set_id, 'debug.stream'), EXTRACT_ARG($arg_set_id, 'args.stream')));

-- The lane name shown for a track holding GPU work: the track's own name
-- (TrackEvent traces), else its thread's name (Chrome JSON traces, where a
-- stream or lane is a thread, e.g. `stream 7`; Kineto's trailing space trimmed).
CREATE PERFETTO FUNCTION _graph_ann_lane_name(
  -- Track id.
  track_id LONG
)
-- The name, NULL when neither the track nor its thread has one.
RETURNS STRING AS
SELECT COALESCE(t.name, TRIM(th.name))
FROM track AS t
LEFT JOIN thread_track AS tt ON tt.id = t.id
LEFT JOIN thread AS th USING (utid)
WHERE t.id = $track_id;
