"""`perfetto-graph-ann convert` (not implemented yet: owned by its issue)."""
from __future__ import annotations

import argparse


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("convert", help="(not implemented yet)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError("convert")
