"""Helpers shared by the tests: fakes, synthetic traces, independent expectations."""
