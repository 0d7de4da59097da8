--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Collective kernels (NCCL) with their message sizes and bandwidths
-- (nccl-tests' algbw / busbw).

INCLUDE PERFETTO MODULE graph_ann.collective_rows;

-- One row per collective kernel: GPU work carrying collective metadata
-- (eager, or graphed with restored metadata) or named like an NCCL kernel.
CREATE PERFETTO TABLE graph_ann_collective(
  -- Slice id of the kernel.
  id ID(slice.id),
  -- Start of the kernel.
  ts TIMESTAMP,
  -- Duration of the kernel.
  dur DURATION,
  -- Group of a merged trace (`graph_ann_group`; 0 for a trace that is not a merge).
  group_id LONG,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Lane name.
  lane_name STRING,
  -- Kernel name.
  name STRING,
  -- Whether the kernel is graphed (launched by a graph launch).
  is_graphed BOOL,
  -- Whether the kernel carries the collective metadata (`Collective name`).
  has_metadata BOOL,
  -- Collective name as recorded (`Collective name`, e.g. `allreduce`), NULL without metadata.
  collective STRING,
  -- Normalised type used for the bus bandwidth (from `collective`, else the kernel name).
  collective_type STRING,
  -- dtype as recorded (e.g. `Float`).
  dtype STRING,
  -- Bytes per element of `dtype`, NULL for an unknown dtype.
  element_size LONG,
  -- Input elements (`In msg nelems`).
  in_nelems LONG,
  -- Output elements (`Out msg nelems`).
  out_nelems LONG,
  -- Input bytes.
  in_bytes LONG,
  -- Output bytes.
  out_bytes LONG,
  -- Message size S used for the bandwidths: max(in, out) bytes.
  msg_bytes LONG,
  -- Number of ranks (`Group size`).
  group_size LONG,
  -- Process group name (`Process Group Name`).
  pg_name STRING,
  -- Process group description (`Process Group Description`, e.g. `default_pg`).
  pg_desc STRING,
  -- Global ranks of the group as recorded (`Process Group Ranks`, e.g. `[0, 1]`).
  pg_ranks STRING,
  -- Algorithm bandwidth S / dur in GB/s (1e9 bytes/s); NULL when unknown or dur = 0.
  algbw_gbps DOUBLE,
  -- nccl-tests bus bandwidth factor for the type and group size.
  busbw_factor DOUBLE,
  -- Bus bandwidth algbw x factor in GB/s.
  busbw_gbps DOUBLE
) AS
SELECT *
FROM _graph_ann_collective_rows!(_graph_ann_collective_kernel)
ORDER BY group_id, device, ts, id;
