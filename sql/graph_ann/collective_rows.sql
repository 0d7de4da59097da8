--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Private: the collective kernels and the columns of their rows (sizes,
-- type, bandwidths), for `graph_ann.collectives` and the report's summary.

INCLUDE PERFETTO MODULE graph_ann.gpu_work;

-- Kernels that are collectives (`_graph_ann_work.class` 1: see
-- `_graph_ann_is_collective`).
CREATE PERFETTO TABLE _graph_ann_collective_kernel(
  -- Slice id.
  id LONG,
  -- Start.
  ts TIMESTAMP,
  -- Duration.
  dur DURATION,
  -- Group (`graph_ann_group`).
  group_id LONG,
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
SELECT
  id, ts, dur, group_id, device, lane_id, track_id, name, is_graphed, arg_set_id,
  COALESCE(EXTRACT_ARG(arg_set_id, 'debug.Collective name'), EXTRACT_ARG(arg_set_id, 'args.Collective name')) AS collective
FROM _graph_ann_work
WHERE class = 1;

-- Size in bytes of one element of each torch dtype, by the name torch's
-- eager traces write in `dtype` (c10::ScalarType names).
CREATE PERFETTO TABLE _graph_ann_dtype_size(
  -- dtype name as written by torch.profiler (e.g. `Float`, `BFloat16`).
  dtype STRING,
  -- Bytes per element.
  element_size LONG
) AS
WITH
  sizes(dtype, element_size) AS (
    VALUES
      ('Byte', 1), ('Char', 1), ('Bool', 1), ('QInt8', 1), ('QUInt8', 1),
      ('QUInt4x2', 1), ('QUInt2x4', 1), ('Float8_e5m2', 1), ('Float8_e4m3fn', 1),
      ('Float8_e5m2fnuz', 1), ('Float8_e4m3fnuz', 1), ('Float8_e8m0fnu', 1),
      ('UInt8', 1), ('Int8', 1),
      ('Short', 2), ('Half', 2), ('BFloat16', 2), ('UInt16', 2), ('Int16', 2),
      ('Int', 4), ('Float', 4), ('QInt32', 4), ('ComplexHalf', 4), ('UInt32', 4),
      ('Int32', 4),
      ('Long', 8), ('Double', 8), ('ComplexFloat', 8), ('UInt64', 8), ('Int64', 8),
      ('ComplexDouble', 16)
  )
SELECT dtype, element_size FROM sizes;

-- Collective type of a collective or kernel name: `allreduce`, `allgather`,
-- `reducescatter`, `alltoall`, `broadcast`, `reduce`, `sendrecv`, or `other`.
-- Case and underscores are ignored, so `all_reduce`, `_allgather_base` and
-- `ncclDevKernel_AllReduce_Sum_f32_RING_LL` are recognised.
CREATE PERFETTO FUNCTION _graph_ann_collective_type(
  -- Collective name (torch's `Collective name`) or NCCL kernel name.
  name STRING
)
-- Normalised collective type, NULL for a NULL name.
RETURNS STRING AS
SELECT
  CASE
    WHEN $name IS NULL THEN NULL
    WHEN REPLACE(LOWER($name), '_', '') GLOB '*allreduce*' THEN 'allreduce'
    WHEN REPLACE(LOWER($name), '_', '') GLOB '*allgather*' THEN 'allgather'
    WHEN REPLACE(LOWER($name), '_', '') GLOB '*reducescatter*' THEN 'reducescatter'
    WHEN REPLACE(LOWER($name), '_', '') GLOB '*alltoall*' THEN 'alltoall'
    WHEN REPLACE(LOWER($name), '_', '') GLOB '*broadcast*' THEN 'broadcast'
    WHEN REPLACE(LOWER($name), '_', '') GLOB '*reduce*' THEN 'reduce'
    WHEN REPLACE(LOWER($name), '_', '') GLOB '*sendrecv*'
      OR REPLACE(LOWER($name), '_', '') GLOB '*send*'
      OR REPLACE(LOWER($name), '_', '') GLOB '*recv*' THEN 'sendrecv'
    ELSE 'other'
  END;

-- Bus bandwidth factor of nccl-tests for a collective type and group size n.
CREATE PERFETTO FUNCTION _graph_ann_busbw_factor(
  -- Normalised collective type (see `_graph_ann_collective_type`).
  collective_type STRING,
  -- Number of ranks in the group.
  n LONG
)
-- The factor, NULL when the type is unknown or n is missing / not positive.
RETURNS DOUBLE AS
SELECT
  CASE
    WHEN $n IS NULL OR $n <= 0 THEN NULL
    WHEN $collective_type = 'allreduce' THEN 2.0 * ($n - 1) / $n
    WHEN $collective_type IN ('allgather', 'reducescatter', 'alltoall') THEN 1.0 * ($n - 1) / $n
    WHEN $collective_type IN ('broadcast', 'reduce', 'sendrecv') THEN 1.0
    ELSE NULL
  END;

-- The collective type of every distinct collective / kernel name among the
-- collective kernels (the type function runs once per name, not per kernel).
CREATE PERFETTO TABLE _graph_ann_collective_name_type(
  -- `Collective name`, else the kernel name.
  type_key STRING,
  -- Normalised collective type.
  collective_type STRING
) AS
SELECT type_key, _graph_ann_collective_type(type_key) AS collective_type
FROM (SELECT DISTINCT COALESCE(collective, name) AS type_key FROM _graph_ann_collective_kernel);

-- The rows of `graph_ann_collective` (its columns, unordered) for the
-- collective kernels `kernels` (rows of `_graph_ann_collective_kernel`): the
-- whole table, or the first few in some order (the report's summary), whose
-- other columns are then read for those rows only.
CREATE PERFETTO MACRO _graph_ann_collective_rows(
  -- Rows of `_graph_ann_collective_kernel`.
  kernels TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  WITH
    coll AS (
      SELECT
        w.id,
        w.ts,
        w.dur,
        w.group_id,
        w.device,
        w.lane_id,
        w.track_id,
        w.name,
        w.is_graphed,
        w.collective,
        COALESCE(w.collective, w.name) AS type_key,
        COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.dtype'), EXTRACT_ARG(w.arg_set_id, 'args.dtype')) AS dtype,
        COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.In msg nelems'), EXTRACT_ARG(w.arg_set_id, 'args.In msg nelems')) AS in_nelems,
        COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.Out msg nelems'), EXTRACT_ARG(w.arg_set_id, 'args.Out msg nelems')) AS out_nelems,
        COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.Group size'), EXTRACT_ARG(w.arg_set_id, 'args.Group size')) AS group_size,
        COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.Process Group Name'), EXTRACT_ARG(w.arg_set_id, 'args.Process Group Name')) AS pg_name,
        COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.Process Group Description'), EXTRACT_ARG(w.arg_set_id, 'args.Process Group Description')) AS pg_desc,
        COALESCE(EXTRACT_ARG(w.arg_set_id, 'debug.Process Group Ranks'), EXTRACT_ARG(w.arg_set_id, 'args.Process Group Ranks')) AS pg_ranks
      FROM $kernels AS w
    ),
    sized AS (
      SELECT
        c.*,
        c.collective IS NOT NULL AS has_metadata,
        nt.collective_type,
        d.element_size,
        c.in_nelems * d.element_size AS in_bytes,
        c.out_nelems * d.element_size AS out_bytes,
        MAX(COALESCE(c.in_nelems, c.out_nelems), COALESCE(c.out_nelems, c.in_nelems))
          * d.element_size AS msg_bytes
      FROM coll AS c
      JOIN _graph_ann_collective_name_type AS nt USING (type_key)
      LEFT JOIN _graph_ann_dtype_size AS d USING (dtype)
    ),
    factors AS (
      SELECT collective_type, group_size, _graph_ann_busbw_factor(collective_type, group_size) AS busbw_factor
      FROM (SELECT DISTINCT collective_type, group_size FROM sized)
    )
  SELECT
    id,
    ts,
    dur,
    group_id,
    device,
    lane_id,
    n.name AS lane_name,
    sized.name,
    is_graphed,
    has_metadata,
    collective,
    collective_type,
    dtype,
    element_size,
    in_nelems,
    out_nelems,
    in_bytes,
    out_bytes,
    msg_bytes,
    group_size,
    pg_name,
    pg_desc,
    pg_ranks,
    CAST(msg_bytes AS DOUBLE) / NULLIF(dur, 0) AS algbw_gbps,
    f.busbw_factor,
    CAST(msg_bytes AS DOUBLE) / NULLIF(dur, 0) * f.busbw_factor AS busbw_gbps
  FROM sized
  LEFT JOIN factors AS f USING (collective_type, group_size)
  -- A join, not a scalar subquery per row (a lookup per kernel).
  LEFT JOIN _graph_ann_track_name AS n USING (track_id)
);
