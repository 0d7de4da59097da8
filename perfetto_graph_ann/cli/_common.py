"""What several subcommands share: option choices, loading annotation files, writing output.

Heavy imports stay inside the functions, so building the parser (``--help``) stays fast.
"""
from __future__ import annotations

import sys
from typing import Optional, Sequence

#: ``--engine`` choices: ``query.engine.config.ENGINES``, repeated because importing the
#: engine package costs ~0.3 s (tests/test_package.py checks they agree).
ENGINES = ("auto", "native", "portable")


def load_annotation_files(paths: Sequence[str]):
    """Merge the annotations of several files (sidecars or capture records)."""
    from ..capture.sidecar import load_annotation_files as load

    return load(paths)


def write_output(text: str, output: Optional[str]) -> None:
    """Write ``text`` to ``output`` (atomically, UTF-8) or, when it is None, to stdout."""
    if output:
        from ..util.atomic import atomic_write_bytes

        atomic_write_bytes(output, text.encode("utf-8"))
    else:
        sys.stdout.write(text)
