"""Interning of event names, categories and debug annotation names on one packet sequence.

Each string gets a small integer id (iid) the first time it is used; the packet that uses a
new iid carries its definition in ``interned_data`` (this is how Perfetto keeps repeated
kernel names and arg keys out of every event). One sequence, never cleared, so an iid stays
valid for the whole trace.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

__all__ = ["ANNOTATION_NAMES", "CATEGORIES", "Interner", "KINDS", "NAMES", "STRING_VALUES"]

#: InternedData fields: kind -> field number.
CATEGORIES = 1
NAMES = 2
ANNOTATION_NAMES = 3
STRING_VALUES = 29  #: debug_annotation_string_values (InternedString: iid 1, str 2)
KINDS = (CATEGORIES, NAMES, ANNOTATION_NAMES, STRING_VALUES)


class Interner:
    """Hands out iids per kind and remembers which ones the next packet must define."""

    __slots__ = ("_tables", "pending")

    def __init__(self) -> None:
        self._tables: Dict[int, Dict[str, int]] = {k: {} for k in KINDS}
        #: (kind, iid, string) defined since the last :meth:`take_pending`.
        self.pending: List[Tuple[int, int, str]] = []

    def iid(self, kind: int, text: str) -> int:
        table = self._tables[kind]
        i = table.get(text)
        if i is None:
            i = table[text] = len(table) + 1
            self.pending.append((kind, i, text))
        return i

    def take_pending(self) -> List[Tuple[int, int, str]]:
        """The new definitions, ordered by kind then by iid (the protobuf field order)."""
        p = self.pending
        if not p:
            return p
        self.pending = []
        if len(p) > 1:
            p.sort(key=lambda t: t[0])  # stable: iids stay ascending within a kind
        return p

    def table(self, kind: int) -> Dict[str, int]:
        """The live string -> iid dict of ``kind`` (read-only use: a fast lookup before :meth:`iid`)."""
        return self._tables[kind]

    def size(self, kind: int) -> int:
        return len(self._tables[kind])
