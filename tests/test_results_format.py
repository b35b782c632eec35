"""The results format: results written before it had a version still report and render as they
did (the fixture tests/fixtures/results-v0, written by the code of that time, and the snapshot
of what `ab report`, `compare` and `campaign report` made of it then), every writer stamps the
current version, and a newer version is refused in one line naming it."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import results_snapshot
from cli import run_cli

from compile_ahead.output.format_version import FORMAT_KEY, FORMAT_VERSION

FIXTURE = Path(__file__).parent / "fixtures" / "results-v0"
EXPECTED = FIXTURE.with_name("results-v0.expected.json")
OUTPUT_MARKER = ".compile-ahead-output"


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A copy of the fixture (the commands write their reports into it)."""
    return Path(shutil.copytree(FIXTURE, tmp_path / "results"))


def test_version_0_results_report_and_render_as_they_did(results):
    assert results_snapshot.collect(results) == json.loads(EXPECTED.read_text())


def test_the_fixture_is_version_0_and_small():
    assert sum(p.stat().st_size for p in FIXTURE.rglob("*") if p.is_file()) < 500_000
    exp = json.loads((FIXTURE / "ab-compile" / "experiment.json").read_text())
    assert FORMAT_KEY not in exp


def _version(path: Path) -> object:
    return json.loads(path.read_text()).get(FORMAT_KEY)


def test_rewritten_reports_carry_the_current_version(results):
    report = results / "report"
    assert run_cli("ab", "report", results / "ab-compile", "--no-plot").returncode == 0
    done = run_cli("campaign", "report", results / "campaign.sqlite", "--out", report, "--no-plot")
    assert done.returncode == 0, done.stderr
    assert _version(results / "ab-compile" / "compile_ab.json") == FORMAT_VERSION
    assert _version(report / "campaign.json") == FORMAT_VERSION
    assert _version(report / "cell00-tiny_16" / "experiment.json") == FORMAT_VERSION


def _newer(path: Path) -> None:
    data = json.loads(path.read_text())
    path.write_text(json.dumps(data | {FORMAT_KEY: FORMAT_VERSION + 1}))


NEWER = f"results format version {FORMAT_VERSION + 1} is newer than this compile-ahead reads"


@pytest.mark.parametrize(
    ("argv", "file"),
    [
        (("ab", "report", "ab-compile", "--no-plot"), "ab-compile/experiment.json"),
        (("compare", "ab-schedule"), "ab-schedule/experiment.json"),
        (("compare", "profile"), "profile/report.json"),
        (("compare", "campaign-report"), "campaign-report/campaign.json"),
    ],
)
def test_a_newer_version_is_refused_in_one_line(results, argv, file):
    _newer(results / file)
    done = run_cli(*argv, cwd=results)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"compile-ahead: error: {file}: {NEWER} (up to {FORMAT_VERSION}); read it with a newer "
        "compile-ahead"
    ]


def test_a_store_of_a_newer_version_is_refused_in_one_line(results):
    store = results / "campaign.sqlite"
    with sqlite3.connect(store) as conn:
        conn.execute("INSERT INTO meta VALUES (?, ?)", (FORMAT_KEY, str(FORMAT_VERSION + 1)))
    conn.close()
    for argv in (("campaign", "report", store, "--out", results / "r"), ("compare", store)):
        done = run_cli(*argv)
        assert done.returncode == 2
        assert NEWER in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_profile_directory_without_the_output_marker_opens(results):
    """Reading never needs the marker that lets a later profile-compile replace a directory."""
    profile = results / "profile"
    (profile / OUTPUT_MARKER).unlink()
    done = run_cli("compare", profile)
    assert done.returncode == 0, done.stderr
    assert "Passes" in (profile / "compare.html").read_text()
    assert not (profile / OUTPUT_MARKER).exists()  # read-only use adds none


def test_runs_of_two_versions_pool_into_the_current_one(results, tmp_path):
    """`ab report A B --out` pools a run written before the version with one written after."""
    newer = tmp_path / "newer"
    shutil.copytree(results / "ab-compile", newer)
    exp = json.loads((newer / "experiment.json").read_text())
    (newer / "experiment.json").write_text(json.dumps({FORMAT_KEY: FORMAT_VERSION, **exp}))
    pooled = tmp_path / "pooled"
    done = run_cli("ab", "report", results / "ab-compile", newer, "--out", pooled, "--no-plot")
    assert done.returncode == 0, done.stderr
    assert _version(pooled / "experiment.json") == FORMAT_VERSION
