"""A campaign store's identity covers what defines each arm, not only the spec's text: a
resume after a config file's content or an arm's env value changed is refused in one line that
names the change, with the store untouched. Names that reached a store print escaped."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from campaign_helpers import campaign_command, connect, run

from compile_ahead.shown_text import hidden_character

SPEC = """
[campaign]
name = "identity"
kind = "compile"
pairs = 1
warmup = 0
arms = ["A=current", "B=current,config=CONFIG,env.CA_CAMPAIGN_TEST=1"]

[axes]
model = ["tiny"]
ladder = ["32,64"]
"""
CONFIG = {"CPU": {"NUM_STREAMS": "1"}}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished campaign (one block) whose arm B reads cfg.json; its directory."""
    work = tmp_path_factory.mktemp("identity")
    (work / "cfg.json").write_text(json.dumps(CONFIG))
    (work / "c.toml").write_text(_spec(work))
    proc = run(campaign_command("run", "c.toml", "--store", "s.sqlite"), work)
    assert proc.returncode == 0, proc.stderr
    return work


def _spec(work: Path) -> str:
    return SPEC.replace("CONFIG", str(work / "cfg.json"))


def _dump(store: Path) -> list[str]:
    with connect(store) as conn:
        return list(conn.iterdump())


def _refused_resume(work: Path) -> str:
    before = _dump(work / "s.sqlite")
    proc = run(campaign_command("run", "c.toml", "--store", "s.sqlite"), work)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert _dump(work / "s.sqlite") == before
    return lines[0]


@pytest.mark.slow
def test_a_resume_refuses_a_config_file_whose_content_changed(made: Path) -> None:
    changed = {"CPU": {"NUM_STREAMS": "2", "INFERENCE_PRECISION_HINT": "f32"}}
    (made / "cfg.json").write_text(json.dumps(changed))
    try:
        line = _refused_resume(made)
    finally:
        (made / "cfg.json").write_text(json.dumps(CONFIG))
    assert (
        f"s.sqlite: arm B: config {made / 'cfg.json'} changed since the store was made "
        "(NUM_STREAMS 1 -> 2, INFERENCE_PRECISION_HINT added f32)"
    ) in line
    again = run(campaign_command("run", "c.toml", "--store", "s.sqlite"), made)
    assert again.returncode == 0 and "0 to run" in again.stderr, again.stderr


@pytest.mark.slow
def test_a_resume_refuses_an_arm_whose_env_value_changed(made: Path) -> None:
    spec = made / "c.toml"
    spec.write_text(_spec(made).replace("CA_CAMPAIGN_TEST=1", "CA_CAMPAIGN_TEST=2"))
    try:
        line = _refused_resume(made)
    finally:
        spec.write_text(_spec(made))
    assert "arm B: env changed since the store was made (CA_CAMPAIGN_TEST 1 -> 2)" in line


@pytest.mark.slow
def test_names_a_store_holds_print_escaped(made: Path, tmp_path: Path) -> None:
    """A store whose names hold control and bidi characters (written by another tool, or
    before names were checked): status and report show them escaped, one line each."""
    store = tmp_path / "odd.sqlite"
    shutil.copy(made / "s.sqlite", store)
    evil = "evil\nname\x1b[31m\u202e"
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'name'", (evil,))
        conn.execute("UPDATE cells SET label = label || ?", ("\u2066\r",))
    status = run(campaign_command("status", str(store)), tmp_path)
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[0].startswith("campaign evil\\nname\\x1b[31m\\u202e (")
    report = run(campaign_command("report", str(store), "--out", "r", "--no-plot"), tmp_path)
    assert report.returncode == 0, report.stderr
    md = (tmp_path / "r" / "campaign.md").read_text()
    assert md.splitlines()[0] == "### Campaign evil\\nname\\x1b[31m\\u202e (compile)"
    for text in (status.stdout, md, report.stdout):
        assert hidden_character(text.replace("\n", "")) is None
