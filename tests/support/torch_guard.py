"""Run code in a fresh interpreter and report every attempt it makes to import torch.

``'torch' not in sys.modules`` alone cannot fail on a machine without torch: an optional
``try: import torch`` finds nothing there and leaves no trace. Here a finder placed first on
``sys.meta_path`` records each lookup of ``torch`` or a submodule (``import``,
``importlib.import_module``, ``importlib.util.find_spec`` alike) and refuses it, so the check
fails the same way with or without torch installed, and never loads the real one.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

ROOT = Path(__file__).resolve().parents[2]

_PRELUDE = r'''
import sys

class _TorchImportRecorder:
    """Records and refuses every lookup of torch (a test sentinel, not the real module)."""
    attempts = []

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torch" or fullname.startswith("torch."):
            self.attempts.append(fullname)
            raise ModuleNotFoundError(f"No module named {fullname!r} (refused by tests/support/torch_guard.py)",
                                      name=fullname)
        return None

_recorder = _TorchImportRecorder()
sys.meta_path.insert(0, _recorder)
'''

_EPILOGUE = r'''
import json as _json
print("\n" + _json.dumps({"attempts": _recorder.attempts, "in_modules": "torch" in sys.modules}))
'''


def torch_import_attempts(code: str) -> Tuple[List[str], bool]:
    """(torch modules ``code`` tried to import, whether ``torch`` ended up in sys.modules).

    ``code`` runs in a fresh interpreter with this checkout first on the path; it must
    succeed (an exception fails the caller with its stderr)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", _PRELUDE + code + "\n" + _EPILOGUE], capture_output=True,
                         text=True, env=env, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["attempts"], result["in_modules"]


def assert_torch_free(code: str) -> None:
    """``code`` neither imports torch nor tries to (not even a guarded ``try: import torch``)."""
    attempts, in_modules = torch_import_attempts(code)
    assert attempts == [], f"tried to import {attempts}"
    assert not in_modules, "torch is in sys.modules"
