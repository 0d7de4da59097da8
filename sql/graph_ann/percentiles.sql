--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Private helper: nearest-rank percentiles, defined once for `graph_ann.lanes`
-- and `graph_ann.scopes`.

-- The 1-based rank of the p-th percentile of n values sorted ascending:
-- ceil(p * n / 100), by integer division (nearest rank).
CREATE PERFETTO MACRO _graph_ann_nearest_rank(
  -- The percentile, 0..100.
  p Expr,
  -- The number of values.
  n Expr
)
-- The rank, 1..n (0 for no values).
RETURNS Expr AS
((($p) * ($n) + 99) / 100);
