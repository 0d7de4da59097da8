--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Per-lane metrics: how busy each lane of each GPU is and how its work is
-- distributed.
--
-- Definitions used below:
--  * busy time: the length of the union of the lane's work intervals, so work
--    that overlaps on a lane (lanes that gather several hardware streams) is
--    counted once;
--  * profiled span: from the first instant any slice of the trace (CPU or GPU)
--    starts to the last instant one ends, over slices with `dur >= 0`;
--  * replays' span (per device): from the start of the first graph replay's
--    GPU work to the end of the last one's (see `graph_ann.replays`);
--  * percentiles are nearest-rank: the p-th percentile of n durations sorted
--    ascending is the one at 1-based rank ceil(p * n / 100).

INCLUDE PERFETTO MODULE graph_ann.gpu_work;

-- The profiled span: first start and last end over all slices with `dur >= 0`.
CREATE PERFETTO TABLE _graph_ann_profiled_span(
  -- First instant a slice of the trace covers.
  ts TIMESTAMP,
  -- Length of the span.
  dur DURATION
) AS
SELECT ts, end_ts - ts AS dur
FROM (
  SELECT
    -- The first start by the trace processor's own filter and order (slices are
    -- kept sorted by start): 0.07 s instead of 0.10 s at 1M kernels.
    (SELECT ts FROM slice WHERE dur >= 0 ORDER BY ts LIMIT 1) AS ts,
    (SELECT MAX(ts + dur) FROM slice WHERE dur >= 0) AS end_ts
);

-- The one pass over all GPU work that the lane statistics, the top kernels and
-- the replays' span share: per (device, lane, name, category, graphed or not),
-- counts and extremes. Each of the three is then a small aggregate of these
-- groups (1M kernels: 0.58 s for this pass instead of 0.49 + 0.22 + 0.14 s for
-- three passes over the work). Only what needs the groups is aggregated here
-- (each aggregate costs about 0.03 s per 1M rows in v52 wasm); a lane's other
-- extremes come from `_graph_ann_lane_extremes`.
CREATE PERFETTO TABLE _graph_ann_lane_group(
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Kernel / memcpy / memset name.
  name STRING,
  -- Kineto category.
  category STRING,
  -- Whether a graph launch launched the work.
  is_graphed BOOL,
  -- Number of work slices.
  work_count LONG,
  -- Sum of the durations.
  total_dur DURATION,
  -- Longest duration.
  max_dur DURATION,
  -- Last end.
  end_ts TIMESTAMP,
  -- Smallest track id.
  track_id LONG
) AS
SELECT
  device,
  lane_id,
  name,
  category,
  is_graphed,
  COUNT(*) AS work_count,
  SUM(dur) AS total_dur,
  MAX(dur) AS max_dur,
  MAX(ts + dur) AS end_ts,
  MIN(track_id) AS track_id
FROM _graph_ann_work
GROUP BY device, lane_id, name, category, is_graphed;

-- One lane's first and last start, shortest duration, largest track id and
-- smallest and largest depth: each the first row of the lane's work in one order, which the
-- trace processor filters and sorts natively (1M kernels, v52 wasm: 0.01 s
-- for all lanes instead of about 0.15 s for five more aggregates over all
-- work). A NULL device or lane matches nothing here (`=`); such work has no
-- row in `graph_ann_lane` (the percentiles are joined with `=` too).
CREATE PERFETTO FUNCTION _graph_ann_lane_extremes(
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG
)
-- One row.
RETURNS TABLE(
  -- First start.
  first_ts LONG,
  -- Last start.
  last_ts LONG,
  -- Shortest duration.
  min_dur LONG,
  -- Largest track id.
  max_track_id LONG,
  -- Smallest depth.
  min_depth LONG,
  -- Largest depth.
  max_depth LONG
) AS
SELECT
  (SELECT ts FROM _graph_ann_work WHERE device = $device AND lane_id = $lane_id ORDER BY ts LIMIT 1) AS first_ts,
  (SELECT ts FROM _graph_ann_work WHERE device = $device AND lane_id = $lane_id ORDER BY ts DESC LIMIT 1) AS last_ts,
  (SELECT dur FROM _graph_ann_work WHERE device = $device AND lane_id = $lane_id ORDER BY dur LIMIT 1) AS min_dur,
  (SELECT track_id FROM _graph_ann_work WHERE device = $device AND lane_id = $lane_id ORDER BY track_id DESC LIMIT 1)
    AS max_track_id,
  (SELECT depth FROM _graph_ann_work WHERE device = $device AND lane_id = $lane_id ORDER BY depth LIMIT 1) AS min_depth,
  (SELECT depth FROM _graph_ann_work WHERE device = $device AND lane_id = $lane_id ORDER BY depth DESC LIMIT 1)
    AS max_depth;

-- Per device: the span of the graph replays (first start to last end of the
-- GPU work launched by graph launches); no row for a device without replays.
CREATE PERFETTO TABLE _graph_ann_replays_span(
  -- GPU index.
  device LONG,
  -- Start of the first replay's first GPU work.
  ts TIMESTAMP,
  -- Length of the span.
  dur DURATION
) AS
SELECT
  device,
  (SELECT ts FROM _graph_ann_work AS w WHERE w.device = g.device AND w.is_graphed = 1 ORDER BY ts LIMIT 1) AS ts,
  MAX(end_ts)
    - (SELECT ts FROM _graph_ann_work AS w WHERE w.device = g.device AND w.is_graphed = 1 ORDER BY ts LIMIT 1) AS dur
FROM _graph_ann_lane_group AS g
WHERE is_graphed
GROUP BY device;

-- Per lane: counts and simple statistics of its work, and whether the lane's
-- work intervals are disjoint by construction ("flat"): all on one track, at
-- one depth, none with a negative duration, on a laminar track (see
-- `_graph_ann_track_name`). A flat lane's busy time is the sum of its
-- durations, with no window pass over its work; writers such as ours keep a
-- lane on one track unless its work overlaps (then extra same-named tracks).
CREATE PERFETTO TABLE _graph_ann_lane_stats(
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- One of the lane's tracks (for its name).
  track_id LONG,
  -- Number of work slices.
  work_count LONG,
  -- Of those, kernels.
  kernel_count LONG,
  -- Sum of the durations.
  total_dur DURATION,
  -- Mean duration.
  mean_dur DOUBLE,
  -- Shortest duration.
  min_dur DURATION,
  -- Longest duration.
  max_dur DURATION,
  -- First start.
  first_ts TIMESTAMP,
  -- Last start.
  last_ts TIMESTAMP,
  -- Last end.
  end_ts TIMESTAMP,
  -- Whether the lane's work intervals are disjoint by construction (see above).
  flat BOOL
) AS
SELECT
  s.device,
  s.lane_id,
  s.track_id,
  s.work_count,
  s.kernel_count,
  s.total_dur,
  s.mean_dur,
  x.min_dur,
  s.max_dur,
  x.first_ts,
  x.last_ts,
  s.end_ts,
  s.track_id = x.max_track_id AND x.min_depth = x.max_depth AND x.min_dur >= 0
    AND (SELECT n.laminar FROM _graph_ann_track_name AS n WHERE n.track_id = s.track_id) AS flat
FROM (
  -- The mean as total / count is what AVG(dur) gives for integers (SQLite
  -- sums them exactly, then divides as doubles).
  SELECT
    device,
    lane_id,
    MIN(track_id) AS track_id,
    SUM(work_count) AS work_count,
    SUM(CASE WHEN category = 'kernel' THEN work_count ELSE 0 END) AS kernel_count,
    SUM(total_dur) AS total_dur,
    CAST(SUM(total_dur) AS DOUBLE) / SUM(work_count) AS mean_dur,
    MAX(max_dur) AS max_dur,
    MAX(end_ts) AS end_ts
  FROM _graph_ann_lane_group
  GROUP BY device, lane_id
) AS s
JOIN _graph_ann_lane_extremes(s.device, s.lane_id) AS x;

-- The k-th shortest (0-based) work duration of a lane. Used for percentiles:
-- the trace processor filters and sorts the lane natively, which is much faster
-- than a window function over all work (v52 wasm: 0.04 s vs 1.7 s at 1M kernels).
CREATE PERFETTO FUNCTION _graph_ann_lane_nth_dur(
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- 0-based rank in ascending duration order.
  k LONG
)
-- The duration, NULL when the lane has k or fewer slices.
RETURNS LONG AS
SELECT dur
FROM _graph_ann_work
WHERE device = $device AND lane_id = $lane_id
ORDER BY dur
LIMIT 1 OFFSET $k;

-- Per lane: nearest-rank percentiles of the work durations (the duration at
-- 1-based rank ceil(p * n / 100) in ascending order; ceil via integer division).
CREATE PERFETTO TABLE _graph_ann_lane_pct(
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Median.
  p50_dur DURATION,
  -- 90th percentile.
  p90_dur DURATION,
  -- 99th percentile.
  p99_dur DURATION
) AS
SELECT
  device,
  lane_id,
  _graph_ann_lane_nth_dur(device, lane_id, (50 * work_count + 99) / 100 - 1) AS p50_dur,
  _graph_ann_lane_nth_dur(device, lane_id, (90 * work_count + 99) / 100 - 1) AS p90_dur,
  _graph_ann_lane_nth_dur(device, lane_id, (99 * work_count + 99) / 100 - 1) AS p99_dur
FROM _graph_ann_lane_stats;

-- The union of one lane's work, overall and clipped to a span: one window
-- pass over the lane's work in start order (the union rule: see `graph_ann.gpu_work`).
-- A function called per lane rather than one window partitioned by lane: the
-- trace processor filters the lane's rows natively, and the window needs no
-- partitions nor the aggregate a sort (v52 wasm, 1M kernels: 0.34 s instead
-- of 0.58 s for a lane of 400k).
CREATE PERFETTO FUNCTION _graph_ann_lane_union(
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Start of the span to clip to (NULL: no span).
  span_ts LONG,
  -- End of that span.
  span_end_ts LONG
)
-- One row: the union's length, and its length inside the span (NULL without a span).
RETURNS TABLE(
  -- Length of the union of the lane's work.
  busy_dur LONG,
  -- Of that, the time inside the span.
  span_busy_dur LONG
) AS
SELECT
  SUM(MAX(0, ts + dur - MAX(ts, prev_end_ts))) AS busy_dur,
  SUM(MAX(0, MIN(ts + dur, $span_end_ts) - MAX(ts, prev_end_ts, $span_ts))) AS span_busy_dur
FROM (
  SELECT
    ts,
    dur,
    COALESCE(
      MAX(ts + dur) OVER (ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
      ts
    ) AS prev_end_ts
  FROM _graph_ann_work
  WHERE device = $device AND lane_id = $lane_id
);

-- The sum of one lane's work durations clipped to a span: the busy time
-- inside the span of a flat lane (see `_graph_ann_lane_stats`), whose work
-- intervals are disjoint.
CREATE PERFETTO FUNCTION _graph_ann_lane_clipped_dur(
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Start of the span.
  span_ts LONG,
  -- End of the span.
  span_end_ts LONG
)
-- The sum, NULL when the span is NULL.
RETURNS LONG AS
SELECT SUM(MAX(0, MIN(ts + dur, $span_end_ts) - MAX(ts, $span_ts)))
FROM _graph_ann_work
WHERE device = $device AND lane_id = $lane_id;

-- The lanes that are not flat but whose union comes from at most two layers
-- (see `_graph_ann_lane_layers`) and that lie in their device's replays' span
-- (or whose device has none), each with a key for the SPAN_JOIN below.
CREATE PERFETTO TABLE _graph_ann_lane_layered(
  -- Key of the lane (partition of the SPAN_JOIN).
  lane_key LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- The lane's first track.
  track_a LONG,
  -- Its last track.
  track_b LONG,
  -- Whether the device has replays (else the busy time in their span is NULL).
  has_span BOOL
) AS
SELECT
  ROW_NUMBER() OVER (ORDER BY s.device, s.lane_id) AS lane_key,
  s.device,
  s.lane_id,
  y.track_a,
  y.track_b,
  r.ts IS NOT NULL AS has_span
FROM _graph_ann_lane_stats AS s
LEFT JOIN _graph_ann_replays_span AS r USING (device)
JOIN _graph_ann_lane_layers(s.device, s.lane_id) AS y
WHERE NOT s.flat AND (r.ts IS NULL OR (r.ts <= s.first_ts AND s.end_ts <= r.ts + r.dur));

-- The first layer (depth-0 work on the first track) of each such lane.
CREATE PERFETTO TABLE _graph_ann_lane_layer_a(
  -- Key of the lane.
  lane_key LONG,
  -- Start.
  ts TIMESTAMP,
  -- Duration.
  dur DURATION
) AS
SELECT k.lane_key, w.ts, w.dur
FROM _graph_ann_lane_layered AS k
JOIN _graph_ann_lane_layer(k.device, k.lane_id, k.track_a) AS w;

-- The second layer (depth-0 work on the last track) of such lanes on two tracks.
CREATE PERFETTO TABLE _graph_ann_lane_layer_b(
  -- Key of the lane.
  lane_key LONG,
  -- Start.
  ts TIMESTAMP,
  -- Duration.
  dur DURATION
) AS
SELECT k.lane_key, w.ts, w.dur
FROM _graph_ann_lane_layered AS k
JOIN _graph_ann_lane_layer(k.device, k.lane_id, k.track_b) AS w
WHERE k.track_b != k.track_a;

-- The two layers' intersection, lane by lane (each layer's intervals are
-- disjoint, as SPAN_JOIN requires; it sorts its inputs by partition and start
-- itself).
CREATE VIRTUAL TABLE _graph_ann_lane_layer_ab
USING SPAN_JOIN(_graph_ann_lane_layer_a PARTITIONED lane_key, _graph_ann_lane_layer_b PARTITIONED lane_key);

-- Per lane: busy time overall and inside the device's replays' span. A flat
-- lane's (see `_graph_ann_lane_stats`) is the sum of its durations, plain or
-- clipped to the span (no clipping needed, and no pass over its work, when
-- the lane's first start and last end lie in the span: its durations are not
-- negative, so every interval lies in the span); a layered lane's (see
-- `_graph_ann_lane_layered`) is |A| + |B| - |A intersect B|, all of it in the
-- span; any other lane's is the union of its work.
CREATE PERFETTO TABLE _graph_ann_lane_busy(
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Length of the union of the lane's work.
  busy_dur DURATION,
  -- Of that, the time inside the replays' span; NULL if the device has no replays.
  replay_busy_dur DURATION
) AS
SELECT
  s.device,
  s.lane_id,
  s.total_dur AS busy_dur,
  CASE
    WHEN r.ts <= s.first_ts AND s.end_ts <= r.ts + r.dur THEN s.total_dur
    ELSE _graph_ann_lane_clipped_dur(s.device, s.lane_id, r.ts, r.ts + r.dur)
  END AS replay_busy_dur
FROM _graph_ann_lane_stats AS s
LEFT JOIN _graph_ann_replays_span AS r USING (device)
WHERE s.flat
UNION ALL
SELECT k.device, k.lane_id, b.busy_dur, CASE WHEN k.has_span THEN b.busy_dur END AS replay_busy_dur
FROM _graph_ann_lane_layered AS k
JOIN (
  -- The lane's total duration less that of its work below depth 0 (within
  -- depth-0 work) is |A| + |B| (zero-length work adds nothing).
  SELECT
    k.lane_key,
    s.total_dur
      - COALESCE((
        SELECT SUM(dur) FROM _graph_ann_work
        WHERE device = k.device AND lane_id = k.lane_id AND depth > 0
      ), 0)
      - COALESCE(ab.dur, 0) AS busy_dur
  FROM _graph_ann_lane_layered AS k
  JOIN _graph_ann_lane_stats AS s USING (device, lane_id)
  LEFT JOIN (
    SELECT lane_key, SUM(dur) AS dur FROM _graph_ann_lane_layer_ab GROUP BY lane_key
  ) AS ab USING (lane_key)
) AS b USING (lane_key)
UNION ALL
SELECT s.device, s.lane_id, u.busy_dur, u.span_busy_dur AS replay_busy_dur
FROM _graph_ann_lane_stats AS s
LEFT JOIN _graph_ann_replays_span AS r USING (device)
JOIN _graph_ann_lane_union(s.device, s.lane_id, r.ts, r.ts + r.dur) AS u
WHERE NOT s.flat
  AND NOT EXISTS (
    SELECT 1 FROM _graph_ann_lane_layered AS k WHERE k.device = s.device AND k.lane_id = s.lane_id
  );

-- One row per lane of each GPU: work count, busy time, utilization and the
-- distribution of work durations.
CREATE PERFETTO TABLE graph_ann_lane(
  -- GPU index.
  device LONG,
  -- Lane id (the `debug.stream` of its slices: a CUDA stream or an annotated lane).
  lane_id LONG,
  -- Lane name (its track's name, e.g. `62 attention`).
  lane_name STRING,
  -- Number of GPU work slices (kernels, memcpys, memsets) on the lane.
  work_count LONG,
  -- Of those, kernels.
  kernel_count LONG,
  -- Sum of the durations (overlapping work counted once per slice).
  total_dur DURATION,
  -- Time the lane is busy: length of the union of its work intervals.
  busy_dur DURATION,
  -- `busy_dur` over the profiled span.
  utilization DOUBLE,
  -- Busy time inside the device's replays' span, over that span; NULL without replays.
  replay_utilization DOUBLE,
  -- Mean work duration.
  mean_dur DOUBLE,
  -- Median work duration (nearest rank).
  p50_dur DURATION,
  -- 90th percentile of the work duration (nearest rank).
  p90_dur DURATION,
  -- 99th percentile of the work duration (nearest rank).
  p99_dur DURATION,
  -- Shortest work duration.
  min_dur DURATION,
  -- Longest work duration.
  max_dur DURATION,
  -- Start of the lane's first work.
  first_ts TIMESTAMP,
  -- Start of the lane's last work.
  last_ts TIMESTAMP,
  -- End of the lane's work (latest `ts + dur`).
  end_ts TIMESTAMP
) AS
SELECT
  s.device,
  s.lane_id,
  (SELECT n.name FROM _graph_ann_track_name AS n WHERE n.track_id = s.track_id) AS lane_name,
  s.work_count,
  s.kernel_count,
  s.total_dur,
  COALESCE(b.busy_dur, 0) AS busy_dur,
  CAST(COALESCE(b.busy_dur, 0) AS DOUBLE) / (SELECT dur FROM _graph_ann_profiled_span) AS utilization,
  CAST(COALESCE(b.replay_busy_dur, 0) AS DOUBLE) / NULLIF(r.dur, 0) AS replay_utilization,
  s.mean_dur,
  p.p50_dur,
  p.p90_dur,
  p.p99_dur,
  s.min_dur,
  s.max_dur,
  s.first_ts,
  s.last_ts,
  s.end_ts
FROM _graph_ann_lane_stats AS s
JOIN _graph_ann_lane_pct AS p USING (device, lane_id)
LEFT JOIN _graph_ann_lane_busy AS b USING (device, lane_id)
LEFT JOIN _graph_ann_replays_span AS r USING (device)
ORDER BY s.device, s.lane_id;

-- Kernels per lane by total time: one row per (device, lane, kernel name),
-- ranked within the lane by total duration (1 = most time; ties by name).
-- Keep `rank <= N` for a lane's top N.
CREATE PERFETTO TABLE graph_ann_lane_top_kernels(
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Lane name.
  lane_name STRING,
  -- Kernel name.
  name STRING,
  -- Rank within the lane by `total_dur` (1 = most), ties broken by name.
  rank LONG,
  -- Number of launches of this kernel on the lane.
  count LONG,
  -- Sum of its durations.
  total_dur DURATION,
  -- Mean duration.
  mean_dur DOUBLE,
  -- Longest duration.
  max_dur DURATION,
  -- `total_dur` over the sum of the durations of all kernels on the lane.
  share DOUBLE
) AS
WITH
  per_kernel AS (
    SELECT
      device,
      lane_id,
      MIN(track_id) AS track_id,
      name,
      SUM(work_count) AS count,
      SUM(total_dur) AS total_dur,
      CAST(SUM(total_dur) AS DOUBLE) / SUM(work_count) AS mean_dur,
      MAX(max_dur) AS max_dur
    FROM _graph_ann_lane_group
    WHERE category = 'kernel'
    GROUP BY device, lane_id, name
  )
SELECT
  device,
  lane_id,
  (SELECT n.name FROM _graph_ann_track_name AS n WHERE n.track_id = k.track_id) AS lane_name,
  name,
  ROW_NUMBER() OVER (PARTITION BY device, lane_id ORDER BY total_dur DESC, name) AS rank,
  count,
  total_dur,
  mean_dur,
  max_dur,
  CAST(total_dur AS DOUBLE) / SUM(total_dur) OVER (PARTITION BY device, lane_id) AS share
FROM per_kernel AS k
ORDER BY device, lane_id, rank;
