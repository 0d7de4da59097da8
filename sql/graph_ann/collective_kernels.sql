--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Private helper of `graph_ann.collectives` and `graph_ann.overlap`: which GPU
-- kernels are collectives (NCCL). A module of its own so that the overlap
-- module, which only needs to know which kernels communicate, does not build
-- the collectives' sizes and bandwidths.

INCLUDE PERFETTO MODULE graph_ann.gpu_work;

-- Kernels that are collectives: those carrying `Collective name` or named
-- like an NCCL kernel (only these get their other arguments read).
CREATE PERFETTO TABLE _graph_ann_collective_kernel(
  -- Slice id.
  id LONG,
  -- Start.
  ts TIMESTAMP,
  -- Duration.
  dur DURATION,
  -- GPU index.
  device LONG,
  -- Lane id.
  lane_id LONG,
  -- Track of the slice.
  track_id LONG,
  -- Kernel name.
  name STRING,
  -- Whether graphed.
  is_graphed BOOL,
  -- Argument set.
  arg_set_id ARGSETID,
  -- `Collective name` as recorded, NULL without metadata.
  collective STRING
) AS
SELECT id, ts, dur, device, lane_id, track_id, name, is_graphed, arg_set_id, collective
FROM (
  SELECT
    id, ts, dur, device, lane_id, track_id, name, is_graphed, arg_set_id,
    COALESCE(EXTRACT_ARG(arg_set_id, 'debug.Collective name'), EXTRACT_ARG(arg_set_id, 'args.Collective name')) AS collective
  FROM _graph_ann_work
  WHERE category = 'kernel'
)
WHERE collective IS NOT NULL OR name GLOB 'nccl*';
