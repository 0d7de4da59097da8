--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Private: which GPU kernels are collectives (NCCL), one macro for
-- `graph_ann.collectives` and `graph_ann.overlap`.

-- Whether a kernel is a collective: it carries `Collective name` (`debug.*`,
-- else `args.*`) or is named like an NCCL kernel (`nccl*`). The name is tested
-- first, so NCCL kernels need no argument lookup.
CREATE PERFETTO MACRO _graph_ann_is_collective(
  -- The kernel's argument set.
  arg_set_id Expr,
  -- The kernel's name.
  name Expr
)
RETURNS Expr AS
(
  $name GLOB 'nccl*'
  OR COALESCE(EXTRACT_ARG($arg_set_id, 'debug.Collective name'), EXTRACT_ARG($arg_set_id, 'args.Collective name')) IS NOT NULL
);
