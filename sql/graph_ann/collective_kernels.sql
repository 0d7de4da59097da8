--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Private helper of `graph_ann.collectives` and `graph_ann.overlap`: the rule
-- that says which GPU kernels are collectives (NCCL), as a macro, so that both
-- modules apply the same rule within their own pass over the work (overlap
-- classifies every slice while building its class table, with no join back to
-- a table of collectives). Needs no other module: the rule reads only a
-- slice's name and arguments.

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
