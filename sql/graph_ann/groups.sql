--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- The groups of a merged trace (one per rank or `--label`), whose devices,
-- lanes and correlation ids repeat: every table keys its rows by group.

-- One row per group of the trace: for a merged trace each input's root track, for any
-- other trace one row, group 0, with NULL name, rank, label and track.
CREATE PERFETTO TABLE graph_ann_group(
  -- Group id: the input's 0-based position in the merged trace; 0 for a trace that is not a merge.
  group_id LONG,
  -- The group's root track name (`Rank 1`, `eager (rank 0)`); NULL for a trace that is not a merge.
  name STRING,
  -- Rank of the group's input (`distributedInfo.rank`, else its position among the inputs).
  rank LONG,
  -- The input's `--label`, NULL when it has none.
  label STRING,
  -- Id of the group's root track, NULL for a trace that is not a merge.
  track_id JOINID(track.id)
) AS
WITH
  keyed AS (
    SELECT id, name, SUBSTR(merge_key, 17) AS rest
    FROM (
      SELECT id, name, EXTRACT_ARG(dimension_arg_set_id, 'merge_key_value') AS merge_key
      FROM track
      WHERE parent_id IS NULL
    )
    WHERE merge_key GLOB 'graph_ann.group:*'
  ),
  first_part AS (
    SELECT id, name, SUBSTR(rest, 1, INSTR(rest, ':') - 1) AS g, SUBSTR(rest, INSTR(rest, ':') + 1) AS rest
    FROM keyed
    WHERE INSTR(rest, ':') > 0
  ),
  parts AS (
    SELECT
      id,
      name,
      g,
      CASE WHEN INSTR(rest, ':') > 0 THEN SUBSTR(rest, 1, INSTR(rest, ':') - 1) ELSE rest END AS r,
      CASE WHEN INSTR(rest, ':') > 0 THEN SUBSTR(rest, INSTR(rest, ':') + 1) END AS label
    FROM first_part
  ),
  groups AS (
    SELECT CAST(g AS INT) AS group_id, name, CAST(r AS INT) AS rank, label, id AS track_id
    FROM parts
    WHERE CAST(CAST(g AS INT) AS TEXT) = g AND CAST(CAST(r AS INT) AS TEXT) = r
  )
SELECT group_id, name, rank, label, track_id
FROM groups
UNION ALL
SELECT 0 AS group_id, NULL AS name, NULL AS rank, NULL AS label, NULL AS track_id
WHERE NOT EXISTS (SELECT 1 FROM groups)
ORDER BY group_id;

-- The group of every track holding slices, in a trace of more than one group (empty
-- otherwise: everything is group 0): the group whose rank and label are the `debug.rank`
-- and `debug.label` of the track's first slice (merge writes them on every slice, and a
-- track belongs to one input). For the tracks that lanes do not key: CPU threads (the
-- launches of `graph_ann.gpu_work`) and the bookkeeping, for a group's profiled span.
CREATE PERFETTO TABLE _graph_ann_track_group(
  -- Track id.
  track_id LONG,
  -- Group id (see `graph_ann_group`).
  group_id LONG
) AS
SELECT f.track_id, g.group_id
-- the count first, as the outer loop (CROSS JOIN keeps the order): with one group the
-- condition fails before any slice is read (a constant subquery in the WHERE clause read
-- the slices all the same, 0.1 s at 1M slices)
FROM (SELECT COUNT(*) AS n FROM graph_ann_group) AS c
CROSS JOIN (SELECT track_id, MIN(id) AS first_id FROM slice GROUP BY track_id) AS f
JOIN slice AS s ON s.id = f.first_id
JOIN graph_ann_group AS g
  ON g.rank = EXTRACT_ARG(s.arg_set_id, 'debug.rank') AND g.label IS EXTRACT_ARG(s.arg_set_id, 'debug.label')
WHERE c.n > 1
ORDER BY f.track_id;
