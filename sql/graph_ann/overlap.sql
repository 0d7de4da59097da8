--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Compute / communication overlap per GPU: compute, communication, memory,
-- overlapped and exposed communication, idle time.

INCLUDE PERFETTO MODULE graph_ann.gpu_work;

-- One device's span and the length of the union of each class's work, of
-- communication and compute together, and of all work. For each slice, in
-- start order, the window gives the latest end of the earlier slices of each
-- class (`p0`, `p1`, `p2`; the smallest integer when there is none, so that
-- no COALESCE is needed per use); the latest end of the earlier communication
-- or compute is the larger of `p0` and `p1`, of any work the largest of the
-- three. The slice adds its piece `MAX(0, end - MAX(start, latest earlier
-- end))` to each union it belongs to (the rule of `graph_ann.intervals`).
-- The class is `_graph_ann_work`'s (the report reads that table anyway; a
-- narrow table of this module's own cost the report 0.55 s at 1M kernels). Called
-- per device: the trace processor filters the rows natively and the window
-- needs no partitions.
CREATE PERFETTO FUNCTION _graph_ann_device_unions(
  -- Group (`graph_ann_group`).
  group_id LONG,
  -- GPU index.
  device LONG
)
-- One row of lengths.
RETURNS TABLE(
  -- Start of the device's first GPU work.
  ts LONG,
  -- End of its last GPU work.
  end_ts LONG,
  -- Union of all work.
  busy_dur LONG,
  -- Union of compute.
  compute_dur LONG,
  -- Union of communication.
  comm_dur LONG,
  -- Union of memory work.
  memory_dur LONG,
  -- Union of communication and compute.
  comm_or_compute_dur LONG
) AS
SELECT
  MIN(ts) AS ts,
  MAX(end_ts) AS end_ts,
  SUM(MAX(0, end_ts - MAX(ts, p0, p1, p2))) AS busy_dur,
  SUM(CASE class WHEN 0 THEN MAX(0, end_ts - MAX(ts, p0)) ELSE 0 END) AS compute_dur,
  SUM(CASE class WHEN 1 THEN MAX(0, end_ts - MAX(ts, p1)) ELSE 0 END) AS comm_dur,
  SUM(CASE class WHEN 2 THEN MAX(0, end_ts - MAX(ts, p2)) ELSE 0 END) AS memory_dur,
  SUM(CASE WHEN class < 2 THEN MAX(0, end_ts - MAX(ts, p0, p1)) ELSE 0 END) AS comm_or_compute_dur
FROM (
  SELECT
    ts,
    end_ts,
    class,
    IFNULL(MAX(CASE class WHEN 0 THEN end_ts END) OVER w, -9223372036854775808) AS p0,
    IFNULL(MAX(CASE class WHEN 1 THEN end_ts END) OVER w, -9223372036854775808) AS p1,
    IFNULL(MAX(CASE class WHEN 2 THEN end_ts END) OVER w, -9223372036854775808) AS p2
  FROM (SELECT ts, ts + dur AS end_ts, class FROM _graph_ann_work WHERE group_id = $group_id AND device = $device)
  WINDOW w AS (ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
);

-- One row per GPU (of each group): compute, communication and memory time,
-- how much of the communication compute hides, and idle time.
CREATE PERFETTO TABLE graph_ann_overlap(
  -- Group of a merged trace (`graph_ann_group`; 0 for a trace that is not a merge).
  group_id LONG,
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
SELECT
  d.group_id,
  d.device,
  ts,
  end_ts - ts AS dur,
  busy_dur,
  compute_dur,
  comm_dur,
  memory_dur,
  comm_dur + compute_dur - comm_or_compute_dur AS overlapped_comm_dur,
  comm_or_compute_dur - compute_dur AS exposed_comm_dur,
  CAST(comm_dur + compute_dur - comm_or_compute_dur AS DOUBLE) / NULLIF(comm_dur, 0) AS comm_overlap_fraction,
  end_ts - ts - busy_dur AS idle_dur
FROM (SELECT group_id, device FROM _graph_ann_work GROUP BY group_id, device) AS d
JOIN _graph_ann_device_unions(d.group_id, d.device)
ORDER BY d.group_id, d.device;
