"""Kernel names from both sides of the join, made comparable.

Kineto writes demangled names (``void at::native::foo<4, ...>(int, ...)``); capture
records carry what ``cuFuncGetName`` returns, usually the mangled symbol
(``_ZN2at6native3fooILi4E...``). We demangle with libstdc++'s ``__cxa_demangle``
(the demangler Kineto itself uses) through ctypes when the library is present, and
also derive a *base name* (qualified name without return type, template arguments
and parameters) that is stable across demangler versions (``4096u`` vs ``4096ul``).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import re
from typing import Optional

__all__ = ["base_name", "demangle", "demangler_available", "full_name"]

_WS = re.compile(r"\s+")
_TRAILING_QUALIFIERS = re.compile(r"(\s+(const|volatile|&&|&|noexcept))+$")


@functools.lru_cache(maxsize=1)
def _cxa_demangle():
    """libstdc++'s ``__cxa_demangle`` and libc's ``free``, or None where unavailable. The usual
    library names first: ``ctypes.util.find_library`` runs ``ldconfig`` (or a compiler) in a
    subprocess, so it is only asked where none of them loads."""
    for name in ("libstdc++.so.6", "libc++.so.1", "libc++abi.dylib", None):
        if name is None:
            name = ctypes.util.find_library("stdc++")
            if not name:
                continue
        try:
            lib = ctypes.CDLL(name)
            fn = lib.__cxa_demangle
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        try:
            try:
                libc = ctypes.CDLL("libc.so.6")
            except OSError:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            free = libc.free
            free.argtypes = [ctypes.c_void_p]
            free.restype = None
        except (OSError, AttributeError):
            continue
        return fn, free
    return None


def demangler_available() -> bool:
    """True when names can be demangled exactly (libstdc++ or libc++ found)."""
    return _cxa_demangle() is not None


@functools.lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """Demangle an Itanium C++ symbol; other names (and failures) come back unchanged."""
    if not name.startswith("_Z"):
        return name
    found = _cxa_demangle()
    if found is None:
        return name
    fn, free = found
    status = ctypes.c_int(0)
    ptr = fn(name.encode("utf-8", "replace"), None, None, ctypes.byref(status))
    if not ptr or status.value != 0:
        return name
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        free(ptr)


def _strip_balanced(text: str, open_c: str, close_c: str) -> str:
    """Remove every balanced ``open_c ... close_c`` group (nested ones included)."""
    out = []
    depth = 0
    for ch in text:
        if ch == open_c:
            depth += 1
        elif ch == close_c and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _mangled_base(name: str) -> Optional[str]:
    """Qualified name from the nested-name prefix of a mangled symbol, without a demangler.

    Handles ``_Z[L]N <len><id>... E`` and ``_Z[L]<len><id>``; template arguments and
    parameters are ignored (they are what differs across demangler versions anyway).
    """
    i = 2
    if name[i:i + 1] == "L":
        i += 1
    nested = name[i:i + 1] == "N"
    if nested:
        i += 1
        while i < len(name) and name[i] in "rVK":  # cv-qualifiers of member functions
            i += 1
    parts = []
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        n = int(name[i:j])
        ident = name[j:j + n]
        parts.append("(anonymous namespace)" if ident.startswith("_GLOBAL__N") else ident)
        i = j + n
        if not nested:
            break
    return "::".join(parts) if parts else None


@functools.lru_cache(maxsize=4096)
def base_name(name: Optional[str]) -> str:
    """Qualified function name only: no return type, template arguments or parameters.

    ``void at::native::(anonymous namespace)::k<4, F>(int, F)`` -> ``at::native::(anonymous namespace)::k``;
    a mangled symbol gives the same result with or without a demangler.
    """
    if not name:
        return ""
    text = demangle(name)
    if text.startswith("_Z"):  # no demangler: read the mangled prefix
        return _mangled_base(text) or text
    text = text.replace("(anonymous namespace)", "\x00anon\x00")
    text = _strip_balanced(text, "<", ">")
    text = _strip_balanced(text, "(", ")")
    text = _WS.sub(" ", text).strip()
    text = _TRAILING_QUALIFIERS.sub("", text)
    if text.startswith("void "):  # kernels return void; other names keep their words
        text = text[5:]
    return text.replace("\x00anon\x00", "(anonymous namespace)")


@functools.lru_cache(maxsize=4096)
def full_name(name: Optional[str]) -> str:
    """Demangled name with whitespace normalised, for the strict comparison."""
    if not name:
        return ""
    return _WS.sub(" ", demangle(name)).strip()
