"""``perfetto-graph-ann run [options] -- COMMAND ...``: run any Python program instrumented.

Zero code in the program, as ``opentelemetry-instrument`` / ``ddtrace-run`` do: every CUDA
graph captured in it, or in the Python processes it starts, is annotated (framework runners,
``torch.compile(mode="reduce-overhead")``, ``make_graphed_callables`` included), and each
process saves its annotations as ``<out>/<host>_<pid>.pga`` after every profiler stop and at
exit. Point the program's own ``torch.profiler`` output at the same folder (e.g.
``tensorboard_trace_handler(DIR)``) and ``convert`` / ``merge`` / ``fleet`` find each trace's
sidecar beside it.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

__all__ = ["FRESH_COMPILE", "build_env", "is_site_dir", "register", "run"]

#: Set by ``--fresh-compile`` (where unset): inductor's caches off, and vLLM's cache of compiled
#: graphs, so that compiled code is generated, and recorded, in the program.
FRESH_COMPILE = ("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "VLLM_DISABLE_COMPILE_CACHE")


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "run",
        help="run a Python program with every CUDA graph it captures annotated (zero code)",
        description="Run COMMAND (e.g. python serve.py ...) with instrumentation installed at interpreter "
        "start in it and in every Python process it starts: every CUDA graph captured is annotated as "
        "pga.graph does, and each process saves its annotations to --out as <host>_<pid>.pga after each "
        "profiler stop and at exit. Settings are checked before COMMAND starts.",
        usage="%(prog)s [options] -- COMMAND [ARGS ...]",
    )
    p.add_argument("--out", default="pga_out", metavar="DIR",
                   help="folder for each process's sidecar (default: pga_out); point the program's torch.profiler "
                   "traces there too, so that convert / merge / fleet find them together")
    p.add_argument("--modules", action="store_true",
                   help="a scope per nn.Module call during capture, named by its module path")
    p.add_argument("--max-depth", type=int, default=None, metavar="N",
                   help="with --modules: deepest module path level scoped (the root is 0)")
    p.add_argument("--include", action="append", default=[], metavar="PATTERN",
                   help="with --modules: scope only modules whose path or class matches (fnmatch; repeatable)")
    p.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                   help="with --modules: never scope modules whose path or class matches (repeatable)")
    p.add_argument("--fresh-compile", action="store_true",
                   help="with --modules: compile afresh rather than load compiled code from caches "
                   "(TORCHINDUCTOR_FORCE_DISABLE_CACHES=1, VLLM_DISABLE_COMPILE_CACHE=1 unless set), once "
                   "for a cache filled without module scopes: the compile records it leaves give later warm "
                   "starts the module paths of torch.compile'd kernels")
    p.add_argument("--no-calibrate", action="store_true", help="no calibration replays are recorded")
    p.add_argument("--no-collectives", action="store_true", help="leave torch.distributed unwrapped")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="the program and its arguments, after --")
    p.set_defaults(func=run)
    return p


def build_env(args: argparse.Namespace, environ=None) -> dict:
    """The program's environment: ``PYTHONPATH`` led by the bootstrap folder, the settings in
    ``PERFETTO_GRAPH_ANN_RUN``. Raises :class:`..errors.InputError` / ``OutputError`` for bad settings."""
    from .. import settings
    from ..capture.bootstrap import SITE_DIR, RunConfig
    from ..capture.instrument import check_out_dir, check_settings
    from ..capture.modules import ModuleScopes
    from ..errors import InputError

    fresh = getattr(args, "fresh_compile", False)  # a Namespace built by a caller may lack it
    if (args.max_depth is not None or args.include or args.exclude or fresh) and not args.modules:
        raise InputError(None, "--max-depth, --include, --exclude and --fresh-compile need --modules")
    if args.modules:
        ModuleScopes(args.max_depth, tuple(args.include), tuple(args.exclude))  # checks them
    out = check_out_dir(args.out)
    cfg = RunConfig(out=out, modules=args.modules, max_depth=args.max_depth, include=tuple(args.include),
                    exclude=tuple(args.exclude), calibrate=not args.no_calibrate,
                    annotate_collectives=not args.no_collectives)
    env = settings.environment() if environ is None else dict(environ)
    check_settings(env.get, modules=bool(args.modules))
    paths = [SITE_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != SITE_DIR]
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if pkg_root not in paths and not is_site_dir(pkg_root):
        paths.append(pkg_root)  # a checkout: the package must import in the program too
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[settings.RUN.name] = cfg.to_env()
    if fresh:
        for name in FRESH_COMPILE:
            env.setdefault(name, "1")
    return env



def is_site_dir(path: str, site_dirs=None) -> bool:
    """Whether ``path`` is an installation's site-packages: never put on the program's
    PYTHONPATH, where a program run by another Python would import this one's packages."""
    import site

    if site_dirs is None:
        site_dirs = [*site.getsitepackages(), site.getusersitepackages()]
    real = os.path.realpath(path)
    return any(real == os.path.realpath(d) for d in site_dirs)


def run(args: argparse.Namespace) -> int:
    from ..errors import InputError

    cmd = list(args.program)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise InputError(None, "no command to run: perfetto-graph-ann run [options] -- python program.py ...")
    exe = shutil.which(cmd[0])
    if exe is None:
        raise InputError(cmd[0], "command not found")
    env = build_env(args)
    print(f"perfetto-graph-ann run: annotating every CUDA graph of {cmd[0]} and its Python children; "
          f"sidecars in {args.out}", file=sys.stderr)
    sys.stderr.flush()
    sys.stdout.flush()
    os.execve(exe, cmd, env)  # the program replaces this process: its signals and exit code are its own
    return 0  # pragma: no cover
