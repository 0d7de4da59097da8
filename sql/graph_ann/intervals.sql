--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Private: the union of intervals (busy time, idle gaps), one rule for every
-- module that measures busy or idle time.

-- The latest end of the intervals before the current row in start order (NULL
-- for the first row): a window over the rows of the query it is used in.
CREATE PERFETTO MACRO _graph_ann_prev_end(
  -- The intervals' start column (the window's order).
  ts Expr,
  -- The end of the current interval, or NULL for a row that is not one of the
  -- intervals (e.g. another class of work in the same pass).
  end_ts Expr
)
RETURNS Expr AS
(MAX($end_ts) OVER (ORDER BY $ts ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING));

-- As `_graph_ann_prev_end`, for several groups in one window: the rows before
-- the current one in its group only.
CREATE PERFETTO MACRO _graph_ann_prev_end_by(
  -- The group (the window's partition).
  grp Expr,
  -- The intervals' start column (the window's order).
  ts Expr,
  -- The end of the current interval.
  end_ts Expr
)
RETURNS Expr AS
(MAX($end_ts) OVER (PARTITION BY $grp ORDER BY $ts ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING));

-- The length an interval adds to the union of the intervals before it: the
-- piece [MAX(ts, prev_end_ts), end_ts], or 0.
CREATE PERFETTO MACRO _graph_ann_union_piece(
  -- Start of the interval.
  ts Expr,
  -- End of the interval.
  end_ts Expr,
  -- `_graph_ann_prev_end` (or `_by`) of the interval; NULL: none before it.
  prev_end_ts Expr
)
RETURNS Expr AS
(MAX(0, $end_ts - MAX($ts, COALESCE($prev_end_ts, $ts))));

-- The length of that piece inside the span [span_ts, span_end_ts]; NULL when
-- the span is NULL.
CREATE PERFETTO MACRO _graph_ann_union_piece_in(
  -- Start of the interval.
  ts Expr,
  -- End of the interval.
  end_ts Expr,
  -- `_graph_ann_prev_end` of the interval; NULL: none before it.
  prev_end_ts Expr,
  -- Start of the span.
  span_ts Expr,
  -- End of the span.
  span_end_ts Expr
)
RETURNS Expr AS
(MAX(0, MIN($end_ts, $span_end_ts) - MAX($ts, COALESCE($prev_end_ts, $ts), $span_ts)));

-- The union of each replay's work in `work` (columns launch_id, ts, dur), one
-- window pass in start order partitioned by replay (the rule above). One row
-- per launch_id: (launch_id, busy_dur).
CREATE PERFETTO MACRO _graph_ann_union_per_replay(
  -- Graphed work: launch_id, ts, dur.
  work TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  SELECT launch_id, SUM(_graph_ann_union_piece!(ts, ts + dur, prev_end_ts)) AS busy_dur
  FROM (
    SELECT launch_id, ts, dur, _graph_ann_prev_end_by!(launch_id, ts, ts + dur) AS prev_end_ts
    FROM $work
  )
  GROUP BY launch_id
);
