"""settings: one parser per kind of value, the table the README shows, and no environment
read anywhere else in the package."""
from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set

import pytest

from perfetto_graph_ann import settings
from perfetto_graph_ann.errors import GraphAnnError, SettingError

from conftest import fixture_trace

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "perfetto_graph_ann"
TRUE = ["1", "true", "TRUE", "True", "yes", "Yes", "on", "ON", " on "]
FALSE = ["0", "false", "False", "no", "NO", "off", "Off", " 0\n"]


def _env(**values: str):
    return values.get


@pytest.mark.parametrize("word", TRUE)
def test_switch_on_words(word):
    assert settings.parse_switch("X", word) is True
    assert settings.switch(settings.VERIFY_SCOPES, _env(PERFETTO_GRAPH_ANN_VERIFY_SCOPES=word)) is True


@pytest.mark.parametrize("word", FALSE)
def test_switch_off_words(word):
    assert settings.parse_switch("X", word) is False
    assert settings.switch(settings.ALLOW_DOWNLOAD, _env(PERFETTO_GRAPH_ANN_ALLOW_DOWNLOAD=word)) is False


@pytest.mark.parametrize("word", ["2", "enabled", "y", "n", "tru", "-1", "on off"])
def test_an_unknown_switch_value_is_an_error_naming_the_variable(word):
    with pytest.raises(SettingError) as ei:
        settings.switch(settings.VERIFY_SCOPES, _env(PERFETTO_GRAPH_ANN_VERIFY_SCOPES=word))
    assert str(ei.value).startswith(f"PERFETTO_GRAPH_ANN_VERIFY_SCOPES={word!r}: expected one of")
    assert isinstance(ei.value, GraphAnnError) and ei.value.exit_code == 2


@pytest.mark.parametrize("s", [s for s in settings.SETTINGS if s.kind == "switch"], ids=lambda s: s.name)
def test_unset_or_blank_switch_is_its_default(s):
    assert settings.switch(s, _env()) is s.default
    assert settings.switch(s, _env(**{s.name: ""})) is s.default
    assert settings.switch(s, _env(**{s.name: "  "})) is s.default


def test_deprecated_alias_is_read_after_the_name():
    p = settings.PROGRESS
    assert p.aliases == ("PGA_PROGRESS",)
    assert settings.switch(p, _env(PGA_PROGRESS="0")) is False
    assert settings.switch(p, _env(PGA_PROGRESS="0", PERFETTO_GRAPH_ANN_PROGRESS="1")) is True
    with pytest.raises(SettingError, match="^PGA_PROGRESS='maybe'"):
        settings.switch(p, _env(PGA_PROGRESS="maybe"))


@pytest.mark.parametrize("raw,want", [("", 512), ("0", 0), ("2048", 2048), (" 7 ", 7), ("off", None), ("NEVER", None),
                                      ("None", None)])
def test_count_or_off(raw, want):
    assert settings.count_or_off(settings.MARKERS_FROM, _env(PERFETTO_GRAPH_ANN_MARKERS_FROM=raw)) == want


@pytest.mark.parametrize("raw", ["-1", "many", "1.5", "true"])
def test_count_or_off_rejects_nonsense(raw):
    with pytest.raises(SettingError, match=f"^PERFETTO_GRAPH_ANN_MARKERS_FROM={raw!r}: expected a node count"):
        settings.count_or_off(settings.MARKERS_FROM, _env(PERFETTO_GRAPH_ANN_MARKERS_FROM=raw))


def test_text_is_none_when_unset_or_empty():
    assert settings.text(settings.NODE, _env()) is None
    assert settings.text(settings.NODE, _env(PERFETTO_GRAPH_ANN_NODE="")) is None
    assert settings.text(settings.NODE, _env(PERFETTO_GRAPH_ANN_NODE="/x/node")) == "/x/node"


def test_the_default_reader_is_the_process_environment(monkeypatch):
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_UI_DIR", "/some/ui")
    assert settings.text(settings.UI_DIR) == "/some/ui"
    monkeypatch.delenv("PERFETTO_GRAPH_ANN_UI_DIR")
    assert settings.text(settings.UI_DIR) is None


# ---- the table ---------------------------------------------------------------------------

def test_every_setting_constant_is_in_the_table_once():
    defined = [v for k, v in vars(settings).items() if isinstance(v, settings.Setting)]
    assert sorted(s.name for s in defined) == sorted(s.name for s in settings.SETTINGS)
    names = [n for s in settings.SETTINGS for n in (s.name, *s.aliases)]
    assert len(names) == len(set(names))
    for s in settings.SETTINGS:
        assert s.kind in ("switch", "path", "path or off", "count or off", "milliseconds or off", "seconds or off",
                          "address", "JSON"), s
        assert s.meaning and "|" not in s.meaning, s


def test_readme_shows_the_table():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start, end = "<!-- settings-table:start -->\n", "<!-- settings-table:end -->"
    assert readme.count(start) == 1 and readme.count(end) == 1
    shown = readme[readme.index(start) + len(start): readme.index(end)]
    assert shown == settings.markdown_table(), (
        "README's environment table differs from perfetto_graph_ann/settings.py: replace it with "
        "python3 -c 'from perfetto_graph_ann.settings import markdown_table; print(markdown_table(), end=\"\")'")
    for s in settings.SETTINGS:
        assert f"| `{s.name}` |" in shown


# ---- nothing else reads the environment --------------------------------------------------

def _package_sources() -> Dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in sorted(PACKAGE.rglob("*.py"))
            if not p.name.endswith("_pb2.py")}


def _environment_reads(tree: ast.Module) -> List[int]:
    """Lines that read the environment through ``os`` (writes for child processes are allowed:
    ``os.environ.update(...)``, ``os.environ[k] = v``, ``del os.environ[k]``)."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(a.name in ("environ", "environb", "getenv", "getenvb") for a in node.names):
                lines.append(node.lineno)
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os"
                and node.attr in ("environ", "environb", "getenv", "getenvb")):
            continue
        up = parents.get(node)
        if isinstance(up, ast.Attribute) and up.attr == "update" and isinstance(parents.get(up), ast.Call):
            continue
        if isinstance(up, ast.Subscript) and isinstance(up.ctx, (ast.Store, ast.Del)):
            continue
        lines.append(node.lineno)
    return lines


def test_no_module_but_settings_reads_the_environment():
    offenders = {}
    for path, tree in _package_sources().items():
        if path.name == "settings.py" and path.parent == PACKAGE:
            continue
        lines = _environment_reads(tree)
        if lines:
            offenders[str(path.relative_to(REPO))] = lines
    assert offenders == {}, f"read the environment through perfetto_graph_ann.settings: {offenders}"


def test_the_checker_sees_reads():
    tree = ast.parse("import os\na = os.environ.get('X')\nb = os.environ['Y']\nos.getenv('Z')\n"
                     "os.environ.update(A='1')\nos.environ['B'] = '2'\nfrom os import environ\n")
    assert sorted(_environment_reads(tree)) == [2, 3, 4, 7]


def test_no_module_but_settings_spells_a_variable_name():
    names: Set[str] = {n for s in settings.SETTINGS for n in (s.name, *s.aliases)}
    found = []
    for path, tree in _package_sources().items():
        if path.name == "settings.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value}")
    assert found == []


def test_every_setting_is_read_somewhere():
    """Each table entry is used through ``settings.<CONSTANT>`` by the package or the build hook."""
    constants = {k for k, v in vars(settings).items() if isinstance(v, settings.Setting)}
    used: Set[str] = set()
    sources = dict(_package_sources())
    sources[REPO / "hatch_build.py"] = ast.parse((REPO / "hatch_build.py").read_text(encoding="utf-8"))
    for path, tree in sources.items():
        if path.name == "settings.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "settings":
                used.add(node.attr)
    assert constants - used == set()


# ---- the readers, end to end -------------------------------------------------------------

def test_allow_download_takes_every_switch_word(monkeypatch):
    from perfetto_graph_ann.query.engine import EngineConfig

    monkeypatch.setenv("PERFETTO_GRAPH_ANN_ALLOW_DOWNLOAD", "off")
    assert EngineConfig().download_allowed() is False
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_ALLOW_DOWNLOAD", "Yes")
    assert EngineConfig().download_allowed() is True
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_ALLOW_DOWNLOAD", "sometimes")
    with pytest.raises(SettingError, match="PERFETTO_GRAPH_ANN_ALLOW_DOWNLOAD"):
        EngineConfig().download_allowed()
    assert EngineConfig(allow_download=True).download_allowed() is True  # the config wins, env not read


def test_verify_scopes_accepts_off_and_on(monkeypatch):
    from perfetto_graph_ann.capture import session as S

    for word, want in (("off", False), ("ON", True), ("no", False), ("yes", True)):
        monkeypatch.setenv("PERFETTO_GRAPH_ANN_VERIFY_SCOPES", word)
        assert S.verify_from_env() is want, word
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_VERIFY_SCOPES", "2")
    with pytest.raises(SettingError, match="PERFETTO_GRAPH_ANN_VERIFY_SCOPES"):
        S.verify_from_env()


def test_progress_switch_and_its_deprecated_alias(monkeypatch):
    from perfetto_graph_ann.util.progress import wanted

    class Tty:
        def isatty(self):
            return True

    monkeypatch.delenv("PGA_PROGRESS", raising=False)
    monkeypatch.delenv("PERFETTO_GRAPH_ANN_PROGRESS", raising=False)
    assert wanted(stream=Tty()) is True
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_PROGRESS", "off")
    assert wanted(stream=Tty()) is False
    monkeypatch.delenv("PERFETTO_GRAPH_ANN_PROGRESS")
    monkeypatch.setenv("PGA_PROGRESS", "0")
    assert wanted(stream=Tty()) is False


def test_a_bad_value_stops_the_cli_with_exit_2_and_writes_nothing(monkeypatch, tmp_path, capsys):
    from perfetto_graph_ann.cli.main import main

    monkeypatch.setenv("PERFETTO_GRAPH_ANN_PROGRESS", "loud")
    out = tmp_path / "x.pftrace"
    assert main(["convert", str(fixture_trace("two_branch")), "-o", str(out)]) == 2
    assert "PERFETTO_GRAPH_ANN_PROGRESS='loud'" in capsys.readouterr().err
    assert not out.exists()


def _import_fastpath(value: str) -> subprocess.CompletedProcess:
    code = "from perfetto_graph_ann.capture import fastpath as f; print(f.ENABLED, f.module_built())"
    env = dict(os.environ, PERFETTO_GRAPH_ANN_PURE_PYTHON=value,
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_pure_python_is_read_at_import_with_the_same_words():
    off = _import_fastpath("off")  # "off" once meant "set" here: now it means the compiled path stays on
    assert off.returncode == 0, off.stderr
    enabled, built = off.stdout.split()
    assert enabled == built
    on = _import_fastpath("TRUE")
    assert on.returncode == 0 and on.stdout.split()[0] == "False", on.stderr
    bad = _import_fastpath("perhaps")
    assert bad.returncode != 0 and "PERFETTO_GRAPH_ANN_PURE_PYTHON='perhaps'" in bad.stderr


def test_build_hook_reads_its_switch_through_settings(monkeypatch):
    spec = importlib.util.spec_from_file_location("_pga_hatch_build", REPO / "hatch_build.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    monkeypatch.delenv("PERFETTO_GRAPH_ANN_NO_EXTENSION", raising=False)
    assert hook.skip_requested() is None
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_NO_EXTENSION", "false")  # was read as "skip" before
    assert hook.skip_requested() is None
    monkeypatch.setenv("PERFETTO_GRAPH_ANN_NO_EXTENSION", "1")
    assert hook.skip_requested() == "PERFETTO_GRAPH_ANN_NO_EXTENSION"


def test_settings_is_ground_floor():
    """settings imports nothing of the package but errors (the build hook loads it from the source tree)."""
    tree = ast.parse((PACKAGE / "settings.py").read_text(encoding="utf-8"))
    relative = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level]
    assert relative == ["errors"]
