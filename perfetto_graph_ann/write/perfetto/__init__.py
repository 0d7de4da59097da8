"""Perfetto TrackEvent writer: tracks, interning, flows, overlap policy, packet encoding."""
from .writer import WriterConfig, WriteStats, write_perfetto

__all__ = ["WriterConfig", "WriteStats", "write_perfetto"]
