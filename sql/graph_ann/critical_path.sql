--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- The critical path of every graph replay (recorded edges, else stream order) and what
-- each scope and lane contributes to it; notes in docs/design.md, "SQL module notes".

INCLUDE PERFETTO MODULE graph_ann.replays;

-- The graphed work of every replay with what the path needs.
CREATE PERFETTO TABLE _graph_ann_cp_work(
  -- Slice id.
  id JOINID(slice.id),
  -- Slice id of the graph launch (the replay).
  launch_id JOINID(slice.id),
  -- Start.
  ts TIMESTAMP,
  -- Duration.
  dur DURATION,
  -- End.
  end_ts TIMESTAMP,
  -- Lane the work is drawn on.
  lane_id LONG,
  -- Hardware stream (`debug.original_stream` where the join moved it, else the lane).
  stream LONG,
  -- Annotation name (`debug.name`), NULL if none.
  scope STRING,
  -- `debug.critical path` (1 on path items of replays with recorded edges, else NULL).
  on_path LONG,
  -- `debug.critical path slack ns` (other items of such replays, else NULL).
  slack_arg LONG
) AS
SELECT
  w.id,
  w.launch_id,
  w.ts,
  w.dur,
  w.ts + w.dur AS end_ts,
  w.lane_id,
  COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.original_stream'), EXTRACT_ARG(w.arg_set_id, 'args.original_stream'), w.lane_id) AS stream,
  COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.name'), EXTRACT_ARG(w.arg_set_id, 'args.name')) AS scope,
  COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.critical path'), EXTRACT_ARG(w.arg_set_id, 'args.critical path')) AS on_path,
  COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.critical path slack ns'), EXTRACT_ARG(w.arg_set_id, 'args.critical path slack ns')) AS slack_arg
FROM _graph_ann_work AS w
WHERE w.is_graphed AND w.launch_id IS NOT NULL;

-- Per replay: where its path comes from, when it starts and its last end.
CREATE PERFETTO TABLE _graph_ann_cp_replay(
  -- Slice id of the graph launch.
  launch_id JOINID(slice.id),
  -- `edges` or `stream order`.
  edges_source STRING,
  -- Start of the path: the launch call's start, or the end of earlier work on
  -- the device where the GPU was still busy with it (`graph_ann_replay.queued_dur`).
  start_ts TIMESTAMP,
  -- Last end of the replay's work.
  end_ts TIMESTAMP
) AS
SELECT
  w.launch_id,
  CASE WHEN MAX(COALESCE(w.on_path, 0)) = 1 THEN 'edges' ELSE 'stream order' END AS edges_source,
  g.launch_ts + g.queued_dur AS start_ts,
  MAX(w.end_ts) AS end_ts
FROM _graph_ann_cp_work AS w
JOIN graph_ann_replay AS g USING (launch_id)
GROUP BY w.launch_id;

-- Stream order: the work of stream-order replays numbered per (replay,
-- stream) by start, with the run it belongs to (a new run starts where the
-- previous item on the stream ends after this one).
CREATE PERFETTO TABLE _graph_ann_cp_run(
  -- Slice id.
  id JOINID(slice.id),
  -- Slice id of the graph launch.
  launch_id JOINID(slice.id),
  -- Hardware stream.
  stream LONG,
  -- Start.
  ts TIMESTAMP,
  -- End.
  end_ts TIMESTAMP,
  -- Run number on the stream (0 first).
  run LONG
) AS
SELECT
  id,
  launch_id,
  stream,
  ts,
  end_ts,
  SUM(brk) OVER (PARTITION BY launch_id, stream ORDER BY ts, id ROWS UNBOUNDED PRECEDING) AS run
FROM (
  SELECT
    w.id,
    w.launch_id,
    w.stream,
    w.ts,
    w.end_ts,
    COALESCE(LAG(w.end_ts) OVER (PARTITION BY w.launch_id, w.stream ORDER BY w.ts, w.id) > w.end_ts, 0) AS brk
  FROM _graph_ann_cp_work AS w
  JOIN _graph_ann_cp_replay AS r USING (launch_id)
  WHERE r.edges_source = 'stream order'
);

-- Stream order: the last end of every run.
CREATE PERFETTO TABLE _graph_ann_cp_run_end(
  -- Slice id of the graph launch.
  launch_id JOINID(slice.id),
  -- Hardware stream.
  stream LONG,
  -- Run number.
  run LONG,
  -- Last end of the run's work.
  end_ts TIMESTAMP
) AS
SELECT launch_id, stream, run, MAX(end_ts) AS end_ts
FROM _graph_ann_cp_run
GROUP BY launch_id, stream, run;

-- Stream order: the item each replay's path ends on (the last end; ties: the
-- earlier start, then the lower slice id).
CREATE PERFETTO TABLE _graph_ann_cp_sink(
  -- Slice id of the graph launch.
  launch_id JOINID(slice.id),
  -- Slice id of the last item.
  id JOINID(slice.id),
  -- Its stream.
  stream LONG,
  -- Its run.
  run LONG,
  -- Its start.
  ts TIMESTAMP
) AS
SELECT launch_id, id, stream, run, ts
FROM (
  SELECT
    launch_id,
    id,
    stream,
    run,
    ts,
    ROW_NUMBER() OVER (PARTITION BY launch_id ORDER BY end_ts DESC, ts, id) AS k
  FROM _graph_ann_cp_run
)
WHERE k = 1;

-- Every item's place on the path and its slack, both sources.
CREATE PERFETTO TABLE _graph_ann_cp_item_state(
  -- Slice id.
  id JOINID(slice.id),
  -- Slice id of the graph launch.
  launch_id JOINID(slice.id),
  -- Whether the item is on the path.
  on_path BOOL,
  -- Slack in ns (0 on the path).
  slack_dur DURATION
) AS
SELECT
  w.id,
  w.launch_id,
  COALESCE(w.on_path, 0) = 1 AS on_path,
  CASE WHEN COALESCE(w.on_path, 0) = 1 THEN 0 ELSE w.slack_arg END AS slack_dur
FROM _graph_ann_cp_work AS w
JOIN _graph_ann_cp_replay AS r USING (launch_id)
WHERE r.edges_source = 'edges'
UNION ALL
SELECT
  u.id,
  u.launch_id,
  s.id IS NOT NULL AS on_path,
  CASE WHEN s.id IS NOT NULL THEN 0 ELSE r.end_ts - e.end_ts END AS slack_dur
FROM _graph_ann_cp_run AS u
JOIN _graph_ann_cp_replay AS r USING (launch_id)
JOIN _graph_ann_cp_run_end AS e USING (launch_id, stream, run)
LEFT JOIN _graph_ann_cp_sink AS s
  ON s.launch_id = u.launch_id AND s.stream = u.stream AND s.run = u.run
  AND (u.ts < s.ts OR (u.ts = s.ts AND u.id <= s.id));

-- One row per item of a replay's critical path, first to last.
CREATE PERFETTO TABLE graph_ann_critical_path_item(
  -- Slice id of the CPU graph launch call (joins `graph_ann_replay`).
  launch_id JOINID(slice.id),
  -- Slice id of the GPU work.
  id JOINID(slice.id),
  -- 0-based position on the path.
  position LONG,
  -- Kernel / memcpy / memset name.
  name STRING,
  -- Start of the work.
  ts TIMESTAMP,
  -- Duration of the work.
  dur DURATION,
  -- End of the work.
  end_ts TIMESTAMP,
  -- Gap before the item: from its predecessor's end (for the first item, the
  -- path's start) to its start; 0 when it started earlier.
  wait_dur DURATION,
  -- The part of the path the item covers: `end_ts - max(ts, release)`.
  share_dur DURATION,
  -- Lane the work is drawn on.
  lane_id LONG,
  -- Hardware stream.
  stream LONG,
  -- Annotation name (`debug.name`), NULL if none.
  scope STRING,
  -- `edges` (recorded dependency edges) or `stream order` (none recorded).
  edges_source STRING
) AS
SELECT
  launch_id,
  id,
  ROW_NUMBER() OVER (PARTITION BY launch_id ORDER BY end_ts, ts, id) - 1 AS position,
  name,
  ts,
  dur,
  end_ts,
  MAX(0, ts - release_ts) AS wait_dur,
  end_ts - MAX(ts, release_ts) AS share_dur,
  lane_id,
  stream,
  scope,
  edges_source
FROM (
  SELECT
    w.launch_id,
    w.id,
    s.name,
    w.ts,
    w.dur,
    w.end_ts,
    COALESCE(LAG(w.end_ts) OVER (PARTITION BY w.launch_id ORDER BY w.end_ts, w.ts, w.id), r.start_ts) AS release_ts,
    w.lane_id,
    w.stream,
    w.scope,
    r.edges_source
  FROM _graph_ann_cp_item_state AS p
  JOIN _graph_ann_cp_work AS w USING (id)
  JOIN _graph_ann_cp_replay AS r ON r.launch_id = w.launch_id
  JOIN slice AS s ON s.id = w.id
  WHERE p.on_path
)
ORDER BY launch_id, position;

-- Per replay and value of `key` (a column of `_graph_ann_cp_work`): its work, the
-- shares of its path items and its least slack.
CREATE PERFETTO MACRO _graph_ann_cp_shares_by(
  -- The column the work is grouped by (`scope`, `lane_id`).
  key ColumnName
)
RETURNS TableOrSubquery AS
(
SELECT
  w.launch_id,
  w.$key,
  COUNT(*) AS work_count,
  SUM(p.on_path) AS path_count,
  COALESCE(SUM(i.share_dur), 0) AS share_dur,
  CAST(COALESCE(SUM(i.share_dur), 0) AS DOUBLE) / NULLIF(r.end_ts - r.start_ts, 0) AS share_fraction,
  MIN(p.slack_dur) AS slack_dur,
  r.edges_source
FROM _graph_ann_cp_work AS w
JOIN _graph_ann_cp_item_state AS p USING (id)
JOIN _graph_ann_cp_replay AS r ON r.launch_id = w.launch_id
LEFT JOIN graph_ann_critical_path_item AS i ON i.id = w.id
GROUP BY w.launch_id, w.$key
ORDER BY w.launch_id, share_dur DESC, slack_dur
);

-- Per replay and scope: its share of the critical path and its slack.
CREATE PERFETTO TABLE graph_ann_critical_path_scope(
  -- Slice id of the CPU graph launch call.
  launch_id JOINID(slice.id),
  -- Annotation name, NULL for work without one.
  scope STRING,
  -- Number of the scope's work items in the replay.
  work_count LONG,
  -- Number of them on the path.
  path_count LONG,
  -- Sum of the shares of its path items.
  share_dur DURATION,
  -- `share_dur` over the path's duration.
  share_fraction DOUBLE,
  -- Least slack of its work: how much later it could end before the replay
  -- ends later (0: it bounds the replay).
  slack_dur DURATION,
  -- `edges` or `stream order`.
  edges_source STRING
) AS
SELECT * FROM _graph_ann_cp_shares_by!(scope);

-- Per replay and lane: its share of the critical path and its slack.
CREATE PERFETTO TABLE graph_ann_critical_path_lane(
  -- Slice id of the CPU graph launch call.
  launch_id JOINID(slice.id),
  -- Lane id.
  lane_id LONG,
  -- Number of the lane's work items in the replay.
  work_count LONG,
  -- Number of them on the path.
  path_count LONG,
  -- Sum of the shares of its path items.
  share_dur DURATION,
  -- `share_dur` over the path's duration.
  share_fraction DOUBLE,
  -- Least slack of its work (0: it bounds the replay).
  slack_dur DURATION,
  -- `edges` or `stream order`.
  edges_source STRING
) AS
SELECT * FROM _graph_ann_cp_shares_by!(lane_id);

-- One row per replay: its critical path in brief and the scope that bounds it.
CREATE PERFETTO TABLE graph_ann_critical_path(
  -- Slice id of the CPU graph launch call (joins `graph_ann_replay`).
  launch_id JOINID(slice.id),
  -- Group of a merged trace (`graph_ann_group`; 0 for a trace that is not a merge).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Executable graph id, where known.
  graph_id LONG,
  -- 0-based replay index of that graph (`debug.replay`), where the join set it.
  replay LONG,
  -- `edges` (recorded dependency edges) or `stream order` (none recorded).
  edges_source STRING,
  -- Start of the path: the launch call's start, or the end of the earlier
  -- work the replay queued behind (`graph_ann_replay.queued_dur`).
  ts TIMESTAMP,
  -- End of the path: the replay's last end.
  end_ts TIMESTAMP,
  -- `end_ts - ts`: the shares and waits of the path's items added up.
  dur DURATION,
  -- Number of path items.
  item_count LONG,
  -- Sum of the waits (the first one is the launch-to-first-kernel gap).
  wait_dur DURATION,
  -- The first wait: from the path's start to the first path item (the
  -- launch overhead where the first item is the replay's first work).
  launch_wait_dur DURATION,
  -- The scope with the largest share of the path (ties: by name).
  bounding_scope STRING,
  -- Its share.
  bounding_share_dur DURATION,
  -- The least slack of the scopes with no work on the path: how much later the
  -- closest of them could end before it bounds the replay (NULL when every
  -- scope has work on the path).
  off_path_slack_dur DURATION
) AS
SELECT
  r.launch_id,
  g.group_id,
  g.device,
  g.graph_id,
  g.replay,
  r.edges_source,
  r.start_ts AS ts,
  r.end_ts,
  r.end_ts - r.start_ts AS dur,
  a.item_count,
  a.wait_dur,
  a.launch_wait_dur,
  b.scope AS bounding_scope,
  b.share_dur AS bounding_share_dur,
  o.off_path_slack_dur
FROM _graph_ann_cp_replay AS r
JOIN graph_ann_replay AS g USING (launch_id)
JOIN (
  SELECT
    launch_id,
    COUNT(*) AS item_count,
    SUM(wait_dur) AS wait_dur,
    MAX(CASE WHEN position = 0 THEN wait_dur END) AS launch_wait_dur
  FROM graph_ann_critical_path_item
  GROUP BY launch_id
) AS a USING (launch_id)
LEFT JOIN (
  SELECT launch_id, MIN(slack_dur) AS off_path_slack_dur
  FROM graph_ann_critical_path_scope
  WHERE path_count = 0
  GROUP BY launch_id
) AS o USING (launch_id)
LEFT JOIN (
  SELECT launch_id, scope, share_dur
  FROM (
    SELECT
      launch_id,
      scope,
      share_dur,
      ROW_NUMBER() OVER (PARTITION BY launch_id ORDER BY share_dur DESC, scope) AS k
    FROM graph_ann_critical_path_scope
  )
  WHERE k = 1
) AS b USING (launch_id)
ORDER BY g.group_id, g.device, r.start_ts;

-- Per graph and scope across replays: how often the scope bounds the replay,
-- its mean share of the critical path and its slack.
CREATE PERFETTO TABLE graph_ann_critical_path_scope_summary(
  -- Group of a merged trace (`graph_ann_group`; 0 for a trace that is not a merge).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Executable graph id, where known.
  graph_id LONG,
  -- Annotation name, NULL for work without one.
  scope STRING,
  -- `edges` or `stream order` (a graph whose replays mix both has a row for each).
  edges_source STRING,
  -- Replays of the graph with work of the scope.
  replay_count LONG,
  -- Of those, the replays it bounds (the largest share of the path).
  bound_count LONG,
  -- Mean share of the path.
  mean_share_dur DOUBLE,
  -- Mean share of the path as a fraction of the path's duration.
  mean_share_fraction DOUBLE,
  -- Least slack over the replays (0: on the path of at least one replay).
  min_slack_dur DURATION,
  -- Mean slack over the replays.
  mean_slack_dur DOUBLE
) AS
SELECT
  c.group_id,
  c.device,
  c.graph_id,
  s.scope,
  s.edges_source,
  COUNT(*) AS replay_count,
  SUM(c.bounding_scope IS s.scope) AS bound_count,
  AVG(s.share_dur) AS mean_share_dur,
  AVG(s.share_fraction) AS mean_share_fraction,
  MIN(s.slack_dur) AS min_slack_dur,
  AVG(s.slack_dur) AS mean_slack_dur
FROM graph_ann_critical_path_scope AS s
JOIN graph_ann_critical_path AS c USING (launch_id)
GROUP BY c.group_id, c.device, c.graph_id, s.scope, s.edges_source
ORDER BY c.group_id, c.device, c.graph_id, mean_share_dur DESC, s.scope;
