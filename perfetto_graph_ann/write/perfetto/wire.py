"""Protobuf wire-format primitives for the hot path (varints, tags, length-delimited fields).

Only what the TrackEvent packet encoder needs. Field order and encodings follow what the
``perfetto.protos`` classes serialize (ascending field numbers, unpacked repeated fields);
tests compare the two byte for byte.
"""
from __future__ import annotations

import struct
import sys
from array import array
from typing import Dict, Sequence

from ...formats import varint as _plain_varint

__all__ = ["field_bytes", "fixed64_fields", "small_varint", "utf8", "varint", "varint_field"]

_pack_double = struct.Struct("<d").pack
_pack_fixed64 = struct.Struct("<Q").pack

_VARINT_CACHE: Dict[int, bytes] = {}
#: bytes((i,)) for i < 256: one-byte varints and lengths without building a new object.
_ONE_BYTE = [bytes((i,)) for i in range(256)]
_TWO_BYTES = [bytes(((i & 0x7F) | 0x80, i >> 7)) for i in range(0x80, 0x4000)]
#: The low 14 bits of a longer varint (both bytes with the continuation bit): 3-5 byte values
#: are two table lookups and one concatenation instead of a loop over 7-bit groups.
_LOW14 = [bytes(((i & 0x7F) | 0x80, (i >> 7) | 0x80)) for i in range(0x4000)]


def varint(value: int) -> bytes:
    """Unsigned LEB128; negative int64 values use their 64-bit two's complement (10 bytes)."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if 0x80 <= value < 0x4000:
        return _TWO_BYTES[value - 0x80]
    if 0x4000 <= value < 0x200000:
        return _LOW14[value & 0x3FFF] + _ONE_BYTE[value >> 14]
    if 0x200000 <= value < 0x10000000:
        return _LOW14[value & 0x3FFF] + _TWO_BYTES[(value >> 14) - 0x80]
    if 0x10000000 <= value < 0x800000000:  # 5 bytes: large ids (correlations of long runs)
        return _LOW14[value & 0x3FFF] + _LOW14[(value >> 14) & 0x3FFF] + _ONE_BYTE[value >> 28]
    if value < 0:
        value += 1 << 64
    return _plain_varint(value)


def small_varint(value: int) -> bytes:
    """:func:`varint` with a cache for the small ids (tags, iids, track uuids) that repeat."""
    b = _VARINT_CACHE.get(value)
    if b is None:
        b = varint(value)
        if len(_VARINT_CACHE) < 65536:
            _VARINT_CACHE[value] = b
    return b


def field_bytes(field: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): tag, length, payload."""
    return varint((field << 3) | 2) + varint(len(payload)) + payload


def varint_field(field: int, value: int) -> bytes:
    """A varint field (wire type 0): tag, value (a negative int32 / int64 as 10 bytes)."""
    return varint(field << 3) + varint(value)


def fixed64_fields(tag: bytes, values: Sequence[int]) -> bytes:
    """Each of ``values`` as a fixed64 field of the two-byte ``tag``, one after another (a
    launch's flows to its graph's kernels: hundreds). Many are laid out at once, not a
    packed field per value; values a fixed64 cannot hold raise as ``struct`` does."""
    n = len(values)
    if n == 1:
        return tag + _pack_fixed64(values[0])
    if n < 16 or sys.byteorder != "little":
        return b"".join([tag + _pack_fixed64(v) for v in values])
    try:
        words = array("Q", values).tobytes()
    except (OverflowError, TypeError):
        return b"".join([tag + _pack_fixed64(v) for v in values])  # struct's error for the bad one
    out = bytearray(10 * n)
    out[0::10] = tag[:1] * n
    out[1::10] = tag[1:2] * n
    for k in range(8):
        out[2 + k::10] = words[k::8]
    return bytes(out)


def utf8(text: str) -> bytes:
    """UTF-8 bytes of ``text``; lone surrogates (possible in JSON) become U+FFFD."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")
