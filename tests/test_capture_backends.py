"""Backend choice from machine facts: which backend, and why not the others."""
from __future__ import annotations

import pytest

from perfetto_graph_ann.capture import backends as B

H200 = B.EnvFacts(torch_version="2.11.0+cu130", cuda_available=True, torch_native=None, driver_version=13000,
                  cuda_bindings=True, runtime_ids=True, libcupti="/x/libcupti.so.13", cupti_python=True)


def test_h200_as_measured_picks_cupti():
    info = B.choose_backend(H200)
    assert info.backend == B.CUPTI and info.calibration
    assert info.reasons[B.CUPTI] == "chosen"
    assert "2.11.0+cu130 < 2.15" in info.reasons[B.TORCH]
    assert "driver 13.0 < 13.1" in info.reasons[B.CUDA_RUNTIME]


def test_new_driver_old_torch_picks_runtime_ids():
    f = B.EnvFacts(**{**H200.__dict__, "driver_version": 13010})
    info = B.choose_backend(f)
    assert info.backend == B.CUDA_RUNTIME
    assert info.reasons[B.CUPTI] == "not needed: cuda-runtime is preferred"


def test_torch_215_with_native_annotations_defers_to_torch():
    f = B.EnvFacts(**{**H200.__dict__, "torch_version": "2.15.0", "torch_native": True, "driver_version": 13020})
    info = B.choose_backend(f)
    assert info.backend == B.TORCH and not info.calibration  # torch's Kineto writes graph node ids itself


def test_torch_215_on_old_driver_falls_back_to_cupti():
    f = B.EnvFacts(**{**H200.__dict__, "torch_version": "2.15.1", "torch_native": False})
    info = B.choose_backend(f)
    assert info.backend == B.CUPTI and "is_available() is False" in info.reasons[B.TORCH]


@pytest.mark.parametrize("facts,reason", [
    (B.EnvFacts(), "torch is not installed"),
    (B.EnvFacts(torch_version="2.11.0", cuda_available=False), "no CUDA device"),
    (B.EnvFacts(torch_version="2.11.0", cuda_available=True, driver_version=12080), "cuda-bindings is not installed"),
])
def test_nothing_usable(facts, reason):
    info = B.choose_backend(facts)
    assert info.backend is None and reason in info.reasons[B.CUPTI] and not info.calibration


def test_no_libcupti_no_calibration():
    f = B.EnvFacts(**{**H200.__dict__, "libcupti": None})
    info = B.choose_backend(f)
    assert info.backend is None and "libcupti not found" in info.reasons[B.CUPTI]
    f = B.EnvFacts(**{**H200.__dict__, "cupti_python": False})
    assert B.choose_backend(f).calibration is False


def test_this_machine_reports_a_reason_for_every_backend():
    info = B.backend_info()
    assert set(info["reasons"]) == set(B.BACKENDS)
    assert isinstance(B.is_available(), bool)


def test_cupti_out_parameter_calls_return_the_value_or_name_the_call():
    """The CUPTI backend's integer out-parameter calls (node id, exec id) through one helper:
    the written value on success, a CaptureError naming the call and its code otherwise."""
    import ctypes

    from perfetto_graph_ann.capture.backends.cupti import _out
    from perfetto_graph_ann.errors import CaptureError

    seen = []

    def writes(handle, out):
        seen.append(handle)
        ctypes.cast(out, ctypes.POINTER(ctypes.c_uint64))[0] = (7 << 32) | 5
        return 0

    assert _out(writes, 0x1234, ctypes.c_uint64, "cuptiGetGraphNodeId") == (7 << 32) | 5
    assert seen == [0x1234]
    with pytest.raises(CaptureError, match="cuptiGetGraphExecId failed with CUPTI error 17"):
        _out(lambda handle, out: 17, 1, ctypes.c_uint32, "cuptiGetGraphExecId")
