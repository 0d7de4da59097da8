"""The trace processor's SQL error text, as one line a user reads as an error, not a crash.

Trace processor reports SQL errors as a "stack trace" of the statement and of every module
it included (``Traceback (most recent call last):``, then ``File "stdin" line 1 col 8``,
the source line and a caret per frame, then the message). That reads like a Python crash;
this keeps what matters: the message and where (the innermost frame).
"""
from __future__ import annotations

import re

__all__ = ["sql_error_line"]

_TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)" line (?P<line>\d+) col (?P<col>\d+)')
_CARET = re.compile(r"^\s*[\^~]+\s*$")


def sql_error_line(text: str, sql: str, limit: int = 160) -> str:
    """One line: the engine's message, then where it happened and (clipped) the query."""
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    where = ""
    if lines and lines[0].strip() == _TRACEBACK:
        frames = [(i, m) for i, ln in enumerate(lines) if (m := _FRAME.match(ln))]
        carets = [i for i, ln in enumerate(lines) if _CARET.match(ln)]
        last = max([i for i, _ in frames] + carets, default=0)
        message_lines = lines[last + 1:]
        if frames and frames[-1][0] + 1 < len(lines) and frames[-1][0] + 1 not in carets and not message_lines:
            message_lines = lines[frames[-1][0] + 2:]
        if frames:
            m = frames[-1][1]
            place = "the query" if m["file"] == "stdin" else f"module {m['file']}"
            where = f"line {m['line']}, column {m['col']} of {place}"
        lines = message_lines or lines[1:]
    message = " ".join(ln.strip() for ln in lines) or "unknown error"
    query = _clip(sql, limit)
    return f"{message} ({where}: {query})" if where else f"{message} (query: {query})"


def _clip(sql: str, limit: int) -> str:
    sql = " ".join((sql or "").split())
    return sql if len(sql) <= limit else sql[: limit - 3] + "..."
