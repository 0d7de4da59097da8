--
-- Copyright 2026 The perfetto_graph_ann developers.
-- Licensed under the Apache License, Version 2.0.
--
-- Private helper: the union of intervals (busy time, idle gaps), in one place
-- for `graph_ann.lane_busy`, `graph_ann.replays`, `graph_ann.replay_lane_busy`,
-- `graph_ann.overlap` and `graph_ann.lane_idle`.
--
-- The rule. Take a group's intervals (a lane's, a replay's, a device's) in
-- start order; for interval i with start `ts` and end `end_ts`, let `p` be the
-- latest end of the intervals before it (`_graph_ann_prev_end`; NULL for the
-- first, read as `ts`). Every earlier interval starts at or before `ts`, so
-- whatever of [ts, p] exists is covered already, and interval i adds the piece
-- [MAX(ts, p), end_ts] to the union (nothing when `end_ts <= MAX(ts, p)`). The
-- pieces are disjoint: their lengths (`_graph_ann_union_piece`) add up to the
-- length of the union, with overlap counted once, and the pieces clipped to a
-- span (`_graph_ann_union_piece_in`) to the union's time inside it. Over
-- intervals with a positive duration, `ts > p` means nothing runs in
-- [p, ts]: an idle gap. With no negative duration, the union's length is
-- also its span (first start to last end) less the sum of `ts - p` over the
-- intervals with `ts > p` (zero-length ones included). Ties in start order
-- change neither sums nor gaps.
--
-- The callers apply the rule within table functions called once per group,
-- selecting the group with `=`: the trace processor then filters the group's
-- rows natively and the window needs no partition (docs/design.md, "SQL
-- package"). A group with a NULL device or lane matches nothing there.

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
