"""Numbers in trial records are checked where they are read, through the public commands: a
trial whose record holds something that is not a finite number (a string, NaN, Infinity,
1e999) is invalid, named by its file and line (or store row) and left out of every statistic;
huge finite values (1e308) never crash the statistics nor show as a ratio of 0.000; no JSON
output holds NaN or Infinity, and no p-value is below what the pair count allows."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from campaign_helpers import campaign_command, run, sleep_spec
from compare_fixtures import PAIRS, synthetic_experiment

CLI = [sys.executable, "-m", "compile_ahead.commands"]
BAD_VALUES = ['"abc"', "NaN", "Infinity", "-Infinity", "1e999"]


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=600)


def _no_constant(text: str) -> float:
    raise AssertionError(f"{text} in a JSON output")


def strict_json(path: Path) -> object:
    """A JSON output read back refusing NaN, Infinity and numbers past the float range."""

    def finite(text: str) -> float:
        value = float(text)
        assert value not in (float("inf"), float("-inf")), f"{text} in {path}"
        return value

    return json.loads(path.read_text(), parse_constant=_no_constant, parse_float=finite)


def summaries(node: object) -> list[dict]:
    """Every paired summary (a dict with a sign-flip p) in a report's JSON."""
    found = []
    if isinstance(node, dict):
        if "sign_flip_p" in node:
            found.append(node)
        for value in node.values():
            found += summaries(value)
    elif isinstance(node, list):
        for value in node:
            found += summaries(value)
    return found


def _experiment_with(tmp_path: Path, line: int, value: str, fields=("compile_s",)) -> Path:
    """A synthetic compile A/B whose trial log's line ``line`` holds ``value`` (raw JSON) for
    its compile wall (the default endpoint) and, in ``fields``, the rung's other measures."""
    out = synthetic_experiment(tmp_path / "ab", aa=False)
    log = out / "trials.jsonl"
    lines = log.read_text().splitlines()
    record = json.loads(lines[line - 1])
    for key in fields:
        record["result"]["rungs"][0][key] = "@@"
    record["result"]["total_compile_s"] = "@@"
    lines[line - 1] = json.dumps(record).replace('"@@"', value)
    log.write_text("\n".join(lines) + "\n")
    return out


def _report_json(out: Path) -> dict:
    (path,) = [p for p in out.glob("compile_ab*.json")]
    return strict_json(path)  # type: ignore[return-value]


@pytest.mark.parametrize("value", BAD_VALUES)
def test_a_trial_that_is_not_a_finite_number_is_invalid_named_and_left_out(value, tmp_path):
    out = _experiment_with(tmp_path, 3, value)
    done = _cli("ab", "report", str(out), "--no-plot")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    named = [line for line in done.stderr.splitlines() if f"{out / 'trials.jsonl'}:3:" in line]
    assert len(named) == 1 and "invalid trial" in named[0], done.stderr
    data = _report_json(out)
    counted = {s["n"] for s in summaries(data)}
    assert counted == {PAIRS - 1}, counted  # the invalid trial's pair is in no statistic
    for s in summaries(data):
        assert s["sign_flip_p"] >= s["min_possible_p"]
    page = _cli("compare", str(out))
    assert page.returncode == 0 and "Traceback" not in page.stderr, page.stderr
    assert f"{out / 'trials.jsonl'}:3" in (out / "compare.html").read_text()


def test_huge_finite_values_never_crash_the_statistics_nor_show_a_ratio_of_zero(tmp_path):
    out = _experiment_with(tmp_path, 1, "1e308", fields=("compile_s",))
    done = _cli("ab", "report", str(out), "--no-plot")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    data = _report_json(out)
    assert summaries(data), data.keys()
    for s in summaries(data):
        assert s["sign_flip_p"] >= s["min_possible_p"], s
        assert s["geomean_ratio"] is None or s["geomean_ratio"] > 0
    markdown = next(out.glob("compile_ab*.md")).read_text()
    assert "ratio 0.000" not in markdown and "inf" not in markdown.lower().replace("info", "")
    page = _cli("compare", str(out))
    assert page.returncode == 0 and "Traceback" not in page.stderr, page.stderr


@pytest.fixture(scope="module")
def sleep_store(tmp_path_factory) -> Path:
    """A campaign store of sleeping trials, run by the public command."""
    root = tmp_path_factory.mktemp("numbers")
    spec = sleep_spec(root / "c.toml", 0.0)
    store = root / "c.sqlite"
    done = run(campaign_command("run", str(spec), "--store", str(store), "--quiet"), root)
    assert done.returncode == 0, done.stderr
    return store


@pytest.mark.parametrize("value", ["NaN", "1e999", '"abc"'])
def test_a_store_row_that_is_not_a_finite_number_is_named_and_left_out(
    value, sleep_store, tmp_path
):
    store = tmp_path / "c.sqlite"
    shutil.copyfile(sleep_store, store)
    with sqlite3.connect(store) as conn:
        row, result = conn.execute(
            "SELECT id, result FROM trials WHERE warmup = 0 AND result IS NOT NULL ORDER BY id"
        ).fetchone()
        bad = json.loads(result) | {"critical_path_s": "@@"}
        text = json.dumps(bad).replace('"@@"', value)
        conn.execute("UPDATE trials SET result = ? WHERE id = ?", (text, row))
    report = tmp_path / "report"
    done = run(campaign_command("report", str(store), "--out", str(report), "--no-plot"), tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert f"trials row {row} " in done.stderr and "invalid trial" in done.stderr, done.stderr
    for path in report.rglob("*.json"):
        for s in summaries(strict_json(path)):
            assert s["sign_flip_p"] >= s["min_possible_p"], (path, s)
    page = _cli("compare", str(store))
    assert page.returncode == 0 and "Traceback" not in page.stderr, page.stderr


@pytest.mark.parametrize(
    ("control", "treatment"),
    [
        ([1e308, 1.0, 2.0], [1.0, 1e308, 2.5]),
        ([1e308, 1e308], [-1e308, 1e308]),
        ([1e-300] * 3, [1e300] * 3),
    ],
)
def test_paired_statistics_of_huge_values_are_finite_or_left_out(control, treatment):
    from compile_ahead.profiling.trials.stats import NonFiniteStatistic, paired_summary

    try:
        summary = paired_summary(control, treatment).to_dict()
    except NonFiniteStatistic:
        return  # left out of the report as past the float range, never a crash
    json.dumps(summary, allow_nan=False)
    assert summary["sign_flip_p"] >= summary["min_possible_p"]
