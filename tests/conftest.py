"""Shared test fixtures: the real H200 recordings (packaged copy, identical to shared/)."""
from __future__ import annotations

from pathlib import Path

import pytest

from perfetto_graph_ann._resources import demo_data_dir

FIXTURES = demo_data_dir()
TRACES = sorted(p.name[: -len(".trace.json.gz")] for p in FIXTURES.glob("*.trace.json.gz"))


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


def fixture_trace(name: str) -> Path:
    return FIXTURES / f"{name}.trace.json.gz"


def fixture_capture(name: str) -> Path:
    return FIXTURES / f"{name}.capture.json"
