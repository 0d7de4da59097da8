"""What a file's name says it holds, for the choices made by name (JSON or protobuf output,
how to open an input)."""
from __future__ import annotations

import os

from ..errors import PathLike

#: Names that mean (annotated) Chrome JSON rather than a Perfetto protobuf trace.
JSON_SUFFIXES = (".json", ".json.gz")


def is_json_name(path: PathLike) -> bool:
    """Whether ``path`` names a Chrome JSON file (``.json`` / ``.json.gz``, any case)."""
    return os.fspath(path).lower().endswith(JSON_SUFFIXES)


def is_gzip_name(path: PathLike) -> bool:
    """Whether ``path``'s name asks for gzip (``.gz``, any case): outputs are compressed by name."""
    return os.fspath(path).lower().endswith(".gz")
