--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Compute / communication overlap per GPU and idle gaps per lane.
--
-- Each GPU work slice is one of: communication (a collective kernel, see
-- `graph_ann_collective`), compute (any other kernel) or memory (memcpy,
-- memset). Times are lengths of unions of intervals, so concurrent work on
-- several lanes is counted once:
--  * overlapped communication = |comm ∩ compute|, computed with SPAN_JOIN on
--    each class's disjoint covered pieces (unions likewise with SPAN_OUTER_JOIN);
--  * exposed communication = |comm| - overlapped communication, the
--    communication time no compute hides;
--  * idle = the device's span (first work start to last work end) minus the
--    time any work runs.

INCLUDE PERFETTO MODULE graph_ann.gpu_work;
INCLUDE PERFETTO MODULE graph_ann.intervals;
INCLUDE PERFETTO MODULE graph_ann.lanes;
INCLUDE PERFETTO MODULE graph_ann.collectives;

-- GPU work classified as communication (1), compute (0) or memory (2).
CREATE PERFETTO TABLE _graph_ann_work_class(
  -- Slice id.
  id LONG,
  -- GPU index.
  device LONG,
  -- Start.
  ts TIMESTAMP,
  -- Duration.
  dur DURATION,
  -- 0 compute, 1 communication, 2 memory.
  class LONG
) AS
SELECT
  w.id,
  w.device,
  w.ts,
  w.dur,
  CASE
    WHEN c.id IS NOT NULL THEN 1
    WHEN w.category = 'kernel' THEN 0
    ELSE 2
  END AS class
FROM _graph_ann_work AS w
LEFT JOIN _graph_ann_collective_kernel AS c USING (id);

-- Each class's time per device split into disjoint covered pieces (see
-- `_graph_ann_intervals_cover`), pieces of zero length left out.
CREATE PERFETTO TABLE _graph_ann_class_cover(
  -- GPU index.
  device LONG,
  -- 0 compute, 1 communication, 2 memory.
  class LONG,
  -- Start of a covered piece.
  ts TIMESTAMP,
  -- Length of the piece.
  dur DURATION
) AS
SELECT grp AS device, sub_grp AS class, cover_ts AS ts, cover_dur AS dur
FROM _graph_ann_intervals_cover!(
  (SELECT device AS grp, class AS sub_grp, ts, dur FROM _graph_ann_work_class)
)
WHERE cover_dur > 0;

-- Covered pieces of communication (disjoint per device), for the span joins.
CREATE PERFETTO TABLE _graph_ann_comm_cover(
  -- GPU index.
  device LONG,
  -- Start of a piece.
  ts TIMESTAMP,
  -- Length of the piece.
  dur DURATION
) AS
SELECT device, ts, dur FROM _graph_ann_class_cover WHERE class = 1;

-- Covered pieces of compute (disjoint per device), for the span joins.
CREATE PERFETTO TABLE _graph_ann_compute_cover(
  -- GPU index.
  device LONG,
  -- Start of a piece.
  ts TIMESTAMP,
  -- Length of the piece.
  dur DURATION
) AS
SELECT device, ts, dur FROM _graph_ann_class_cover WHERE class = 0;

-- Covered pieces of memcpy / memset work (disjoint per device), for the span joins.
CREATE PERFETTO TABLE _graph_ann_memory_cover(
  -- GPU index.
  device LONG,
  -- Start of a piece.
  ts TIMESTAMP,
  -- Length of the piece.
  dur DURATION
) AS
SELECT device, ts, dur FROM _graph_ann_class_cover WHERE class = 2;

-- Communication during which compute runs: the intersection of the two
-- classes' pieces, per device (SPAN_JOIN of disjoint intervals).
CREATE VIRTUAL TABLE _graph_ann_comm_x_compute
USING SPAN_JOIN(_graph_ann_comm_cover PARTITIONED device, _graph_ann_compute_cover PARTITIONED device);

-- Time communication or compute runs: the union of the two classes' pieces.
CREATE VIRTUAL TABLE _graph_ann_comm_or_compute
USING SPAN_OUTER_JOIN(_graph_ann_comm_cover PARTITIONED device, _graph_ann_compute_cover PARTITIONED device);

-- Time any GPU work runs: the union of all three classes' pieces.
CREATE VIRTUAL TABLE _graph_ann_any_work
USING SPAN_OUTER_JOIN(_graph_ann_comm_or_compute PARTITIONED device, _graph_ann_memory_cover PARTITIONED device);

-- One row per GPU: compute, communication and memory time, how much of the
-- communication compute hides, and idle time.
CREATE PERFETTO TABLE graph_ann_overlap(
  -- GPU index.
  device LONG,
  -- Start of the device's first GPU work.
  ts TIMESTAMP,
  -- The device's span: first work start to last work end.
  dur DURATION,
  -- Time any GPU work runs (union of all work).
  busy_dur DURATION,
  -- Time compute kernels run (union).
  compute_dur DURATION,
  -- Time collective kernels run (union).
  comm_dur DURATION,
  -- Time memcpy / memset work runs (union).
  memory_dur DURATION,
  -- Communication time during which compute also runs.
  overlapped_comm_dur DURATION,
  -- Communication time with no compute running.
  exposed_comm_dur DURATION,
  -- `overlapped_comm_dur` over `comm_dur`; NULL without communication.
  comm_overlap_fraction DOUBLE,
  -- Time in the span with no GPU work at all: `dur - busy_dur`.
  idle_dur DURATION
) AS
WITH
  -- The device's span from the per-lane first starts and last ends (the same
  -- as over all work, without another pass over it).
  span AS (
    SELECT device, MIN(first_ts) AS ts, MAX(end_ts) - MIN(first_ts) AS dur
    FROM _graph_ann_lane_stats
    GROUP BY device
  ),
  per_class AS (
    SELECT
      device,
      SUM(CASE WHEN class = 0 THEN dur ELSE 0 END) AS compute_dur,
      SUM(CASE WHEN class = 1 THEN dur ELSE 0 END) AS comm_dur,
      SUM(CASE WHEN class = 2 THEN dur ELSE 0 END) AS memory_dur
    FROM _graph_ann_class_cover
    GROUP BY device
  ),
  overlapped AS (
    SELECT device, SUM(dur) AS dur FROM _graph_ann_comm_x_compute GROUP BY device
  ),
  busy AS (
    SELECT device, SUM(dur) AS dur FROM _graph_ann_any_work GROUP BY device
  ),
  totals AS (
    SELECT
      s.device,
      s.ts,
      s.dur,
      COALESCE(b.dur, 0) AS busy_dur,
      COALESCE(p.compute_dur, 0) AS compute_dur,
      COALESCE(p.comm_dur, 0) AS comm_dur,
      COALESCE(p.memory_dur, 0) AS memory_dur,
      COALESCE(o.dur, 0) AS overlapped_comm_dur
    FROM span AS s
    LEFT JOIN per_class AS p USING (device)
    LEFT JOIN overlapped AS o USING (device)
    LEFT JOIN busy AS b USING (device)
  )
SELECT
  device,
  ts,
  dur,
  busy_dur,
  compute_dur,
  comm_dur,
  memory_dur,
  overlapped_comm_dur,
  comm_dur - overlapped_comm_dur AS exposed_comm_dur,
  CAST(overlapped_comm_dur AS DOUBLE) / NULLIF(comm_dur, 0) AS comm_overlap_fraction,
  dur - busy_dur AS idle_dur
FROM totals
ORDER BY device;

-- One row per idle gap of each lane: a time between two of the lane's busy
-- intervals (see `graph_ann_lane`) when nothing runs on the lane.
CREATE PERFETTO TABLE graph_ann_lane_gap(
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Start of the gap (end of the busy interval before it).
  ts TIMESTAMP,
  -- Length of the gap.
  dur DURATION
) AS
SELECT device, lane_id, gap_ts AS ts, gap_dur AS dur
FROM _graph_ann_lane_cover
WHERE gap_dur > 0
ORDER BY device, lane_id, ts;

-- Idle gaps per lane, summarised: between the lane's first work start and
-- last work end, how long and how often the lane has nothing running.
CREATE PERFETTO TABLE graph_ann_lane_idle(
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Lane name.
  lane_name STRING,
  -- The lane's span: first work start to last work end.
  span_dur DURATION,
  -- Busy time (union of the lane's work).
  busy_dur DURATION,
  -- Idle time within the span: `span_dur - busy_dur`, the sum of the gaps.
  idle_dur DURATION,
  -- Number of gaps.
  gap_count LONG,
  -- Longest gap; 0 when none.
  max_gap_dur DURATION,
  -- Mean gap; NULL when none.
  mean_gap_dur DOUBLE
) AS
WITH
  gaps AS (
    SELECT
      device,
      lane_id,
      COUNT(*) AS gap_count,
      SUM(dur) AS idle_dur,
      MAX(dur) AS max_gap_dur,
      AVG(dur) AS mean_gap_dur
    FROM graph_ann_lane_gap
    GROUP BY device, lane_id
  )
SELECT
  l.device,
  l.lane_id,
  l.lane_name,
  l.end_ts - l.first_ts AS span_dur,
  l.busy_dur,
  l.end_ts - l.first_ts - l.busy_dur AS idle_dur,
  COALESCE(g.gap_count, 0) AS gap_count,
  COALESCE(g.max_gap_dur, 0) AS max_gap_dur,
  g.mean_gap_dur
FROM graph_ann_lane AS l
LEFT JOIN gaps AS g USING (device, lane_id)
ORDER BY l.device, l.lane_id;
