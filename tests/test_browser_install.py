"""The browser test's Chromium install (tests/browser/test_perfetto_ui.py) on a fake ``apt-get``:
a step refused for apt's lock is tried again, another failure is reported at once, and a
Chromium that another apt run installed meanwhile ends the wait."""
from __future__ import annotations

import os
import stat

import pytest

from browser import test_perfetto_ui as ui

pytestmark = pytest.mark.timeout(60)

FAKE_APT = """#!/bin/sh
echo "$*" >> "{log}"
n=$(cat "{count}" 2>/dev/null || echo 0)
echo $((n + 1)) > "{count}"
if [ "$n" -lt "{locked}" ]; then
  echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 1 (apt-get)" >&2; exit 100
fi
{tail}
"""


def _fake_apt(tmp_path, monkeypatch, locked: int, tail: str = "exit 0") -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    apt = bin_dir / "apt-get"
    apt.write_text(FAKE_APT.format(log=log, count=tmp_path / "count", locked=locked, tail=tail))
    apt.chmod(apt.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(ui, "APT_RETRY_S", 0)
    return str(log)


def test_a_step_refused_for_the_lock_is_tried_again(tmp_path, monkeypatch):
    log = _fake_apt(tmp_path, monkeypatch, locked=2)
    monkeypatch.setattr(ui, "_on_path", lambda: None)
    assert ui._apt_install() == ""
    calls = open(log).read().splitlines()
    assert [c.split()[-1] for c in calls[:3]] == ["update"] * 3 and "install" in calls[3] and len(calls) == 4


def test_another_failure_is_reported_at_once(tmp_path, monkeypatch):
    log = _fake_apt(tmp_path, monkeypatch, locked=0, tail='echo "E: Unable to locate package chromium" >&2; exit 100')
    monkeypatch.setattr(ui, "_on_path", lambda: None)
    why = ui._apt_install()
    assert "update exited 100" in why and "Unable to locate package" in why
    assert len(open(log).read().splitlines()) == 1


def test_a_chromium_installed_by_another_apt_run_ends_the_wait(tmp_path, monkeypatch):
    log = _fake_apt(tmp_path, monkeypatch, locked=99)
    monkeypatch.setattr(ui, "_on_path", lambda: "/usr/bin/chromium")
    assert ui._apt_install() == ""
    assert len(open(log).read().splitlines()) == 1


def test_the_wait_has_an_end(tmp_path, monkeypatch):
    _fake_apt(tmp_path, monkeypatch, locked=10 ** 6)
    monkeypatch.setattr(ui, "_on_path", lambda: None)
    monkeypatch.setattr(ui, "APT_TIMEOUT_S", 1)
    why = ui._apt_install()
    assert why.endswith(("locks still held after 1 s", "ran past 1 s")), why
