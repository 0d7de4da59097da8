"""The README stays true: its two commands, its CLI reference, its screenshot.

``PGA_UPDATE_README=1 python3 -m pytest tests/test_demo_readme.py`` regenerates the CLI
reference block from the real ``--help`` output (100 columns).
"""
from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import pytest

from perfetto_graph_ann.cli.main import COMMANDS, build_parser

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
START, END = "<!-- cli-reference:start -->", "<!-- cli-reference:end -->"
SETUP = [
    "python3 -m pip install '.[portable]' && perfetto-graph-ann demo --out demo_out",
    "python3 -m pip install -e '.[dev,test-torch]' && python3 -m pytest -n auto --dist loadgroup",
]


def _subparsers(parser: argparse.ArgumentParser):
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def _help_texts(monkeypatch) -> dict:
    monkeypatch.setenv("COLUMNS", "100")
    parser = build_parser()
    texts = {"": parser.format_help()}
    for name, sub in _subparsers(parser).items():
        texts[name] = sub.format_help()
    return texts


def _reference(texts: dict) -> str:
    parts = []
    for name in ("",) + COMMANDS:
        title = f"perfetto-graph-ann {name}".strip()
        parts.append(f"### `{title}`\n\n```text\n{texts[name].rstrip()}\n```\n")
    return "\n".join(parts)


def test_first_two_lines_are_the_setup_commands():
    lines = README.read_text().splitlines()
    assert lines[0] == "```bash"
    for line, expected in zip(lines[1:3], SETUP):
        assert line.split("#")[0].rstrip() == expected
    ci = (REPO / ".ci" / "run").read_text()
    # the last command: .ci/run's exit status is pytest's (set -e stops it at a failed install)
    assert [ln for ln in ci.splitlines() if ln.strip()][-1] == SETUP[1]


def test_cli_reference_covers_every_command_and_option(monkeypatch):
    texts = _help_texts(monkeypatch)
    text = README.read_text()
    if os.environ.get("PGA_UPDATE_README") == "1":
        head, rest = text.split(START, 1)
        _, tail = rest.split(END, 1)
        text = f"{head}{START}\n{_reference(texts)}{END}{tail}"
        README.write_text(text)
    block = text.split(START, 1)[1].split(END, 1)[0]
    parser = build_parser()
    for name, sub in _subparsers(parser).items():
        section = block.split(f"### `perfetto-graph-ann {name}`", 1)
        assert len(section) == 2, f"README lacks the section of {name}"
        body = section[1].split("### `", 1)[0]
        for action in sub._actions:
            for opt in action.option_strings:
                assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", body), f"{name}: {opt} missing"
            if not action.option_strings and action.dest != "help":
                assert (action.metavar or action.dest) in body, f"{name}: {action.dest} missing"
        if sub.description:
            assert sub.description.split()[0] in body, f"{name}: description missing"


def test_readme_images_exist():
    for rel in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README.read_text()):
        assert (REPO / rel).is_file(), rel


@pytest.mark.parametrize("link", ["docs/design.md", "BENCHMARKS.md"])
def test_readme_links_exist(link):
    assert f"]({link})" in README.read_text()
    assert (REPO / link).is_file()
