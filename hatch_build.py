"""Build hook: compiles the optional capture fast path, ``perfetto_graph_ann/capture/_fastpath.c``
(with ``_recorder.c``, ``_marks.c``, ``_replays.c`` and ``_errors.c``), the writer's
packet hot path, ``perfetto_graph_ann/write/perfetto/_encode.c``, its plan loop,
``perfetto_graph_ann/write/perfetto/_plan.c``, the reader's first-pass loop,
``perfetto_graph_ann/read/_scan.c``, and the join's per-replay loops, ``perfetto_graph_ann/join/_rows.c``
(the last three share ``perfetto_graph_ann/read/_slots.h``).

Where a C compiler and Python's headers are found, the wheel gets the extension (and a
platform tag); where not, the build goes on with a warning and the package captures with
its pure-Python path (same behaviour, more capture overhead: BENCHMARKS.md), writes with
the pure-Python encoder and plan loop (the same bytes, slower), scans with the Python loop (the same events)
and joins with the Python loops (the same placements). An editable
install compiles it next to the source, as ``build_ext --inplace`` would.

``PERFETTO_GRAPH_ANN_NO_EXTENSION=1`` skips them all. ``python hatch_build.py`` compiles them in
place for the running interpreter (e.g. a cp312 build to carry to the GPU machine).
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from typing import Any, Dict, Optional, Tuple

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script: only compile_extension is needed
    BuildHookInterface = object  # type: ignore[assignment,misc]

ROOT = os.path.dirname(os.path.abspath(__file__))
PACKAGE_DIR = "perfetto_graph_ann/capture"
#: every translation unit of the extension (they share ``_fastpath.h``)
SOURCES = (f"{PACKAGE_DIR}/_fastpath.c", f"{PACKAGE_DIR}/_recorder.c", f"{PACKAGE_DIR}/_marks.c",
           f"{PACKAGE_DIR}/_replays.c", f"{PACKAGE_DIR}/_nodewatch.c", f"{PACKAGE_DIR}/_modcall.c",
           f"{PACKAGE_DIR}/_owners.c", f"{PACKAGE_DIR}/_errors.c")
WRITER_DIR = "perfetto_graph_ann/write/perfetto"
#: (package folder, module name, translation units) of each extension
READER_DIR = "perfetto_graph_ann/read"
JOIN_DIR = "perfetto_graph_ann/join"
EXTENSIONS = ((PACKAGE_DIR, "_fastpath", SOURCES), (WRITER_DIR, "_encode", (f"{WRITER_DIR}/_encode.c",)),
              (WRITER_DIR, "_plan", (f"{WRITER_DIR}/_plan.c",)), (READER_DIR, "_scan", (f"{READER_DIR}/_scan.c",)),
              (JOIN_DIR, "_rows", (f"{JOIN_DIR}/_rows.c",)))


def _settings() -> Any:
    """``perfetto_graph_ann.settings`` from this source tree (the package being built is not
    installed yet; the module imports nothing but ``errors``), for its switch parser."""
    sys.path.insert(0, ROOT)
    try:
        from perfetto_graph_ann import settings
    finally:
        sys.path.remove(ROOT)
    return settings


def skip_requested() -> Optional[str]:
    """The variable's name when ``PERFETTO_GRAPH_ANN_NO_EXTENSION`` (a switch, read like every
    switch of the package) asks to skip the compile, else None."""
    settings = _settings()
    return settings.NO_EXTENSION.name if settings.switch(settings.NO_EXTENSION) else None


def extension_name(module: str = "_fastpath") -> str:
    return module + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")


def compile_extension(out_path: str, root: str = ROOT, sources: Tuple[str, ...] = SOURCES) -> Optional[str]:
    """Compile the extension of ``sources`` to ``out_path`` (written whole or not at all); None, or why not."""
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        return f"Python.h not found in {include} (install the Python development headers)"
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if shutil.which(cc[0]) is None:
        return f"no C compiler ({cc[0]} not found)"
    tmp = f"{out_path}.tmp{os.getpid()}"
    cmd = [*cc, "-O2", "-DNDEBUG", "-fPIC", "-shared", "-Wall", "-Werror=implicit-function-declaration", "-I", include,
           *(os.path.join(root, src) for src in sources), "-o", tmp]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            return f"{' '.join(cmd)} failed: {res.stderr.strip()[-500:]}"
        os.replace(tmp, out_path)
        return None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class CustomBuildHook(BuildHookInterface):
    """Adds the compiled ``_fastpath``, ``_encode``, ``_plan``, ``_scan`` and ``_rows`` to wheels (standard and editable) when they build."""

    def initialize(self, version: str, build_data: Dict[str, Any]) -> None:
        self._tmp: Optional[str] = None
        if self.target_name != "wheel":
            return
        skip = skip_requested()
        if skip:
            self.app.display_info(f"{skip} set: the capture fast path and the writer's are not compiled")
            return
        for folder, module, sources in EXTENSIONS:
            name = extension_name(module)
            if version == "editable":
                out = os.path.join(self.root, folder, name)
            else:
                if self._tmp is None:
                    self._tmp = tempfile.mkdtemp(prefix="pga-ext-")
                out = os.path.join(self._tmp, name)
            why = compile_extension(out, self.root, sources)
            if why is not None:
                self.app.display_warning(f"perfetto_graph_ann: {module} not compiled, using pure Python: {why}")
                continue
            if version != "editable":
                build_data["force_include"][out] = f"{folder}/{name}"
            build_data["pure_python"] = False
            build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: Dict[str, Any], artifact_path: str) -> None:
        if getattr(self, "_tmp", None):
            shutil.rmtree(self._tmp, ignore_errors=True)


if __name__ == "__main__":
    for folder, module, sources in EXTENSIONS:
        target = os.path.join(ROOT, folder, extension_name(module))
        problem = compile_extension(target, ROOT, sources)
        if problem:
            sys.exit(f"hatch_build.py: {problem}")
        print(target)
