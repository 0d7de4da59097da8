"""Every code block of the README runs (a doc test), and every ``pga.<name>`` it names exists.

- ``python`` blocks run as scripts in a fresh folder (the package on the path), as written,
  on the install they say they need: a block preceded by ``<!-- readme-test: gpu -->`` needs
  CUDA and the ``gpu`` extra and runs only with ``-m gpu`` on a CUDA machine; every other
  block claims to work without a GPU and without torch, so it runs in every test run with
  ``torch`` made unimportable (as on the core install): the quickstart's offline branch
  included.
- ``bash`` blocks run command by command (``&&`` and lines split): ``perfetto-graph-ann``
  and ``python3`` are this interpreter; ``pip install`` and the test suite itself are left
  out with the reason (tests never install anything, and the suite does not run itself).
- ``text`` and unlabelled blocks are output, not code.
- A block preceded by ``<!-- readme-test: skip REASON -->`` is skipped with that reason.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

import perfetto_graph_ann as pga

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
BLOCK = re.compile(r"(?:<!-- readme-test: (?:skip (?P<skip>[^>]*?)|(?P<gpu>gpu)) -->\s*\n)?"
                   r"^```(?P<lang>\w*)\n(?P<body>.*?)^```$", re.S | re.M)
#: Runs a script with ``torch`` unimportable, as on an install without the gpu extra:
#: ``import torch`` raises ModuleNotFoundError and ``importlib.util.find_spec("torch")`` is None.
NO_TORCH = """import runpy, sys
sys.modules["torch"] = None
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
BLOCK_TIMEOUT_S = 600


def _blocks() -> List[Tuple[str, str, str, int, bool]]:
    """(lang, body, skip reason or '', line, needs a GPU) per python / bash block."""
    text = README.read_text(encoding="utf-8")
    out = []
    for m in BLOCK.finditer(text):
        if m.group("lang") in ("python", "bash"):
            line = text.count("\n", 0, m.start("body")) + 1
            out.append((m.group("lang"), m.group("body"), m.group("skip") or "", line, bool(m.group("gpu"))))
    return out


BLOCKS = _blocks()


def _env(tmp_path: Optional[Path] = None) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               PYTHONUNBUFFERED="1", PERFETTO_GRAPH_ANN_ALLOW_DOWNLOAD="0")  # never the network
    if tmp_path is not None:  # torch.profiler makes torch's inductor cache folder, by default in /tmp
        env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "torchinductor")
    env.pop("PERFETTO_GRAPH_ANN_TP_SHELL", None)
    return env


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _commands(body: str) -> List[str]:
    """Shell commands of a bash block: one per line and per ``&&``, comments dropped."""
    out = []
    for line in body.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            out += [c.strip() for c in line.split("&&") if c.strip()]
    return out


def _left_out(cmd: str) -> str:
    """Why a command is not run by the test suite, or ''."""
    words = shlex.split(cmd)
    if "pip" in words and "install" in words:
        return "installs packages (tests never install anything)"
    if words[:3] == ["python3", "-m", "pytest"] or words[:1] == ["pytest"]:
        return "runs the test suite itself"
    return ""


def _as_this_python(cmd: str) -> str:
    exe = shlex.quote(sys.executable)
    cmd = re.sub(r"^perfetto-graph-ann\b", f"{exe} -m perfetto_graph_ann", cmd)
    return re.sub(r"^python3\b", exe, cmd)


def _need_engine(line: int) -> None:
    from support.engine_support import native_reason, portable_reason

    portable, native = portable_reason(), native_reason()
    if portable and native:
        pytest.skip(f"README line {line}: runs SQL and no trace processor is usable here ({portable}; {native})")


def test_readme_has_python_and_bash_blocks():
    langs = [b[0] for b in BLOCKS]
    assert "python" in langs and "bash" in langs


def _without_torch(script: Path, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    runner = cwd / "no_torch_runner.py"
    runner.write_text(NO_TORCH, encoding="utf-8")
    return subprocess.run([sys.executable, str(runner), str(script)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=BLOCK_TIMEOUT_S, stdin=subprocess.DEVNULL)


@pytest.mark.timeout(BLOCK_TIMEOUT_S * 2)
@pytest.mark.parametrize("lang,body,skip,line,gpu", [
    pytest.param(*b, marks=[pytest.mark.gpu] if b[4] else []) for b in BLOCKS], ids=[f"{b[0]}-line{b[3]}" for b in BLOCKS])
def test_readme_block_runs(lang, body, skip, line, gpu, tmp_path):
    if skip:
        pytest.skip(f"README line {line}: {skip}")
    if lang == "python":
        if re.search(r"pga\.(lane_summary|open_trace|query_many|replays|collectives|overlap|scope_summary)\b", body):
            _need_engine(line)
        script = tmp_path / "block.py"
        script.write_text(body, encoding="utf-8")
        if gpu:  # marked: needs CUDA and torch (the gpu extra); -m gpu on a CUDA machine
            if not _cuda():
                pytest.skip(f"README line {line}: needs a CUDA GPU (torch.cuda.is_available() is False here)")
            r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                               text=True, timeout=BLOCK_TIMEOUT_S, stdin=subprocess.DEVNULL)
        else:  # claims to work without a GPU: it must, without torch at all
            r = _without_torch(script, tmp_path, _env(tmp_path))
        assert r.returncode == 0, f"README line {line}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        return
    ran, left = 0, []
    script = []
    for cmd in _commands(body):
        why = _left_out(cmd)
        if why:
            left.append(f"{cmd!r}: {why}")
            continue
        script.append(_as_this_python(cmd))
    if script:
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(script)], cwd=tmp_path, env=_env(tmp_path),
                           capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, f"README line {line}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        ran = len(script)
    if not ran:
        pytest.skip(f"README line {line}: nothing to run: " + "; ".join(left))


def test_quickstart_offline_path_writes_the_trace(tmp_path):
    """The quickstart without a GPU, and without torch (the core install): it exports the
    shipped recording and queries it."""
    _need_engine(0)
    body = next(b[1] for b in BLOCKS if b[0] == "python" and "pga.graph(g)" in b[1])
    script = tmp_path / "q.py"
    script.write_text(body, encoding="utf-8")
    r = _without_torch(script, tmp_path, _env(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "no CUDA: exporting the shipped recording seed_block_annotated.trace.json.gz" in r.stdout
    assert (tmp_path / "run.pftrace").stat().st_size > 0
    for lane in ("62 attention", "61 mlp"):
        assert lane in r.stdout, r.stdout


def test_blocks_that_need_a_gpu_are_marked():
    """A python block that uses CUDA without asking ``torch.cuda.is_available()`` first is
    marked ``<!-- readme-test: gpu -->`` (so the CPU run cannot pass by skipping it), and the
    quickstart is not: it claims to run anywhere."""
    for lang, body, skip, line, gpu in BLOCKS:
        if lang != "python" or skip:
            continue
        uses_cuda = re.search(r"\bcuda\b", body) is not None
        asks = "torch.cuda.is_available()" in body
        assert gpu == (uses_cuda and not asks), f"README line {line}: gpu marker {gpu}, uses CUDA {uses_cuda}"
    assert any(b[4] for b in BLOCKS) and not next(b for b in BLOCKS if "pga.graph(g)" in b[1])[4]


def test_every_pga_name_in_the_readme_exists():
    names = set(re.findall(r"\bpga\.([A-Za-z_]\w*)", README.read_text(encoding="utf-8")))
    assert {"merge", "export", "trace_handler"} <= names
    missing = sorted(n for n in names if n not in pga.__all__)  # public names only, none deprecated
    assert not missing, f"README names pga.{missing} but the package exports no such name"
    metrics = set(re.findall(r"\bpga\.metrics\.([A-Za-z_]\w*)", README.read_text(encoding="utf-8")))
    assert metrics and not metrics - set(pga.metrics.__all__), sorted(metrics - set(pga.metrics.__all__))
