--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Private: which GPU kernels are collectives (NCCL), one macro for
-- `graph_ann.collectives` and `graph_ann.overlap`.

-- Whether any slice carries `Collective name` as `debug.*` / `args.*` at all:
-- where none does (graphed NCCL kernels carry no metadata; a .pftrace has no
-- `args.*`), `_graph_ann_is_collective` skips that lookup for every kernel.
CREATE PERFETTO TABLE _graph_ann_collective_arg_keys(
  -- Some slice has `debug.Collective name`.
  debug_key BOOL,
  -- Some slice has `args.Collective name`.
  args_key BOOL
) AS
SELECT
  EXISTS (SELECT 1 FROM args WHERE key = 'debug.Collective name') AS debug_key,
  EXISTS (SELECT 1 FROM args WHERE key = 'args.Collective name') AS args_key;

-- Whether a kernel is a collective: it carries `Collective name` (`debug.*`,
-- else `args.*`) or is named like an NCCL kernel (`nccl*`). The name is tested
-- first, so NCCL kernels need no argument lookup, nor any kernel a key no
-- slice has.
CREATE PERFETTO MACRO _graph_ann_is_collective(
  -- The kernel's argument set.
  arg_set_id Expr,
  -- The kernel's name.
  name Expr
)
RETURNS Expr AS
(
  $name GLOB 'nccl*'
  OR COALESCE(
    CASE WHEN (SELECT debug_key FROM _graph_ann_collective_arg_keys) THEN EXTRACT_ARG($arg_set_id, 'debug.Collective name') END,
    CASE WHEN (SELECT args_key FROM _graph_ann_collective_arg_keys) THEN EXTRACT_ARG($arg_set_id, 'args.Collective name') END
  ) IS NOT NULL
);
