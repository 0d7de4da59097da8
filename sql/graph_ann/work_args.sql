--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Private: how GPU work and its lane are read from a trace written by
-- perfetto_graph_ann, in one place for every module.

INCLUDE PERFETTO MODULE graph_ann.groups;

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

-- The key a launch is looked up by: its correlation and its group in one
-- number (correlation x number of groups + group), since correlation ids repeat
-- across the groups of a merged trace; the correlation itself in a trace of one
-- group. One column, so that the lookup is one native equality.
CREATE PERFETTO MACRO _graph_ann_launch_key(
  -- The CUPTI correlation id.
  correlation Expr,
  -- The group (`graph_ann_group`).
  group_id Expr
)
RETURNS Expr AS
($correlation * (SELECT COUNT(*) FROM graph_ann_group) + $group_id);

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

-- Lane tracks that carry their group, device and lane: those perfetto_graph_ann
-- writes (docs/design.md, Contract 4) merge their spill tracks by the sibling
-- merge key `graph_ann.lane:<device>:<lane>` (`convert`: group 0), or
-- `graph_ann.lane:<group>:<device>:<lane>` in a merged trace (`merge` adds the
-- group, so that the UI never merges the lanes of two inputs either), and
-- every GPU work slice the writer puts on such a track has `debug.device` =
-- device and `debug.stream` = lane. `graph_ann.gpu_work`, `graph_ann.overlap`
-- and `graph_ann.lane_idle` take a slice's group, device and lane from here
-- when its track is listed, and its device and lane from its args otherwise
-- (group 0): the same values, without two argument reads a slice. Keys not in
-- that exact form (integers as SQLite prints them) are not listed; nor is
-- anything on a trace processor that does not report the merge key, whose
-- modules then read every slice's args.
CREATE PERFETTO TABLE _graph_ann_lane_track(
  -- Track id.
  track_id LONG,
  -- Group of every GPU work slice on the track (`graph_ann_group`; 0 when the key has none).
  group_id LONG,
  -- GPU index of every GPU work slice on the track.
  device LONG,
  -- Lane id of every GPU work slice on the track.
  lane_id LONG
) AS
WITH
  keyed AS (
    SELECT id, SUBSTR(merge_key, 16) AS rest
    FROM (SELECT id, EXTRACT_ARG(dimension_arg_set_id, 'merge_key_value') AS merge_key FROM track)
    WHERE merge_key GLOB 'graph_ann.lane:*'
  ),
  first_part AS (
    SELECT id, SUBSTR(rest, 1, INSTR(rest, ':') - 1) AS a, SUBSTR(rest, INSTR(rest, ':') + 1) AS b
    FROM keyed
    WHERE INSTR(rest, ':') > 0
  ),
  parts AS (
    -- two numbers: device and lane (group 0); three: group, device and lane
    SELECT
      id,
      CASE WHEN INSTR(b, ':') > 0 THEN a ELSE '0' END AS g,
      CASE WHEN INSTR(b, ':') > 0 THEN SUBSTR(b, 1, INSTR(b, ':') - 1) ELSE a END AS d,
      CASE WHEN INSTR(b, ':') > 0 THEN SUBSTR(b, INSTR(b, ':') + 1) ELSE b END AS l
    FROM first_part
  )
SELECT id AS track_id, CAST(g AS INT) AS group_id, CAST(d AS INT) AS device, CAST(l AS INT) AS lane_id
FROM parts
WHERE CAST(CAST(g AS INT) AS TEXT) = g AND CAST(CAST(d AS INT) AS TEXT) = d AND CAST(CAST(l AS INT) AS TEXT) = l
ORDER BY track_id;
