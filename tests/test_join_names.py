"""Kernel names: capture records' mangled names against Kineto's demangled ones."""
from __future__ import annotations

import pytest

from support.join_expect import kernels, load_capture, load_json
from perfetto_graph_ann.join import names
from perfetto_graph_ann.join.names import _mangled_base, base_name, demangle, full_name

FIXTURES = ("seed_block_annotated", "two_branch")


@pytest.mark.parametrize("name", FIXTURES)
def test_demangled_capture_names_are_kineto_names(name):
    if not names.demangler_available():
        pytest.skip("no libstdc++/libc++ __cxa_demangle on this machine; base-name test covers the fallback")
    kineto = {e["name"] for _, e in kernels(load_json(name))}
    for n in load_capture(name)["nodes"]:
        assert full_name(n["kernel"]) in kineto, n["kernel"]


@pytest.mark.parametrize("name", FIXTURES)
def test_base_names_agree_with_and_without_demangler(name):
    kineto_bases = {base_name(e["name"]) for _, e in kernels(load_json(name))}
    for n in load_capture(name)["nodes"]:
        k = n["kernel"]
        assert base_name(k) in kineto_bases
        if k.startswith("_Z"):
            assert _mangled_base(k) == base_name(k)  # the no-demangler path gives the same key


def test_nccl_name_demangles_like_kineto():
    kineto = next(e["name"] for _, e in kernels(load_json("allreduce_graph_rank0")) if e["name"].startswith("nccl"))
    mangled = "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"
    if names.demangler_available():
        assert demangle(mangled) == kineto
    assert base_name(mangled) == base_name(kineto) == "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    # a demangler that spells the template argument differently still gives the same base name
    other = mangled.replace("ILm", "ILj")
    assert full_name(other) != full_name(mangled)  # the full names tell the two spellings apart
    assert base_name(other) == base_name(kineto)


@pytest.mark.parametrize("text,expected", [
    ("void at::native::(anonymous namespace)::k<4, F<int> >(int, F<int>)", "at::native::(anonymous namespace)::k"),
    ("void ns::C<int>::run(float) const", "ns::C::run"),
    ("plain_kernel", "plain_kernel"),
    ("Memcpy DtoD (Device -> Device)", "Memcpy DtoD"),
    ("_ZN2at6native3fooILi4EEEvi", "at::native::foo"),
    ("_ZN12_GLOBAL__N_13barEv", "(anonymous namespace)::bar"),
])
def test_base_name_cases(text, expected):
    assert base_name(text) == expected
    if text.startswith("_Z"):
        assert _mangled_base(text) == expected


def test_not_mangled_passes_through():
    assert demangle("sm80_xmma_gemm") == "sm80_xmma_gemm"
    assert demangle("_Zgarbage") == "_Zgarbage"


def test_demangler_loads_by_its_usual_name_before_asking_find_library(monkeypatch):
    """``find_library`` runs a subprocess: it is asked only when no usual name loads, and the
    demangler is found either way."""
    import ctypes
    import ctypes.util

    real_cdll, asked = ctypes.CDLL, []
    monkeypatch.setattr(ctypes.util, "find_library", lambda n: asked.append(n) or {"stdc++": "libstdc++.so.6",
                                                                                  "c": "libc.so.6"}.get(n))
    names._cxa_demangle.cache_clear()
    try:
        assert names.demangler_available() and asked == []

        def no_usual(name, *a, **k):  # as where only find_library knows the library's file
            if name in ("libstdc++.so.6", "libc++.so.1", "libc++abi.dylib") and not asked:
                raise OSError(name)
            return real_cdll(name, *a, **k)
        monkeypatch.setattr(ctypes, "CDLL", no_usual)
        names._cxa_demangle.cache_clear()
        assert names.demangler_available() and asked == ["stdc++"]
    finally:
        names._cxa_demangle.cache_clear()
