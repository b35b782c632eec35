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
from pathlib import Path

import pytest
from campaign_helpers import campaign_command, run
from cli import COMPILE_AHEAD
from compare_fixtures import PAIRS, synthetic_experiment

CLI = list(COMPILE_AHEAD)
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
def sleep_store(sleep_campaign_store) -> Path:
    """A campaign store of sleeping trials, run by the public command (conftest.py's)."""
    return sleep_campaign_store


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


# -- every measure an endpoint reads, whatever its name ----------------------------------------
BATCH_PAIRS = 4
# A batch-2 run report: every field a schedule endpoint reads, the batch's fields included.
RUN_REPORT = {
    "model": "tiny", "synthetic": True, "device": "CPU", "ladder": [64, 128],
    "foreground_compile_s": 9.0, "prefill_compile_s": 3.0, "first_token_s": 4.0,
    "critical_path_s": 30.0, "decode_s": 20.0, "kv_bytes_definition": "reserved: one rung",
    "rungs": [{"capacity": 64, "tokens": 10, "decode_s": 1.0, "tok_s": 10.0},
              {"capacity": 128, "tokens": 10, "decode_s": 1.0, "tok_s": 9.5}],
    "boundaries": [{"from": 64, "to": 128, "compile_s": 7.0, "decode_left_s": 9.0,
                    "ready": True, "ready_margin_s": 2.0, "wait_s": 0.1, "migration_s": 0.01,
                    "bytes_copied": 0}],
    "kv_reserved_avg_bytes": 1 << 20, "kv_reserved_peak_bytes": 2 << 20,
    "kv_committed_avg_bytes": 1 << 19, "kv_committed_peak_bytes": 1 << 20,
    "graphs_resident_max": 2, "peak_rss_bytes": 100 << 20,
    "batch": 2, "batch_steps": 40, "step_s_mean": 0.05, "step_s_median": 0.05,
    "tokens_generated": 80, "tokens_per_s": 40.0,
    "kv_reserved_avg_bytes_per_sequence": 1 << 19, "kv_reserved_peak_bytes_per_sequence": 1 << 20,
    "kv_committed_avg_bytes_per_sequence": 1 << 18,
    "kv_committed_peak_bytes_per_sequence": 1 << 19,
    "sequences": [{"sequence": 0, "prompt_len": 8, "tokens_generated": 40, "stop_reason": "eos",
                   "first_token_s": 4.0}],
}  # fmt: skip
# A compile trial's result with per-compile records, counters and a pass profile.
COMPILE_RESULT = {
    "openvino_version": "synthetic", "device": "CPU", "import_s": 0.2,
    "rungs": [{"capacity": 16, "compile_s": 1.0, "read_s": 0.01,
               "extension_counters": {"itt_compile_model_s": 0.9},
               "compiles": [{"wall_s": 1.0, "cpu_s": 1.5, "instructions": 1e9, "cycles": 2e9,
                             "peak_rss_bytes": 50 << 20, "transformations_s": 0.4,
                             "pass_self_s": {"M": {"p": 0.1}},
                             "extension_counters": {"itt_compile_model_s": 0.9}}]}],
    "total_compile_s": 1.0, "total_read_s": 0.01, "total_transformations_s": 0.4,
    "max_rss_bytes": 60 << 20, "trial_wall_s": 2.0,
}  # fmt: skip
# A serving report (an `ab serve` trial's result), the fields its endpoints read.
SERVE_RESULT = {
    "policy": "ahead", "simulated": False, "model": "tiny", "synthetic": True,
    "requests_metrics": {
        "requests": {"total": 2, "finished": 2, "refused": 0},
        "ttft_s": {"n": 2, "mean": 0.3, "p50": 0.3, "p90": 0.38, "p99": 0.398},
        "tpot_s": {"n": 2, "mean": 0.01, "p50": 0.01, "p90": 0.012, "p99": 0.013},
        "goodput_per_s": 1.5, "output_tokens_per_s": 40.0,
    },
    "engine": {"time_to_ready_s": 0.5, "peak_rss_bytes": 100 << 20,
               "compile_s": {"request_path": 0.2, "background": 0.4}},
    "requests": [{"id": "a", "arrival_s": 0.0, "ttft_s": 0.2, "tokens": [1, 2]},
                 {"id": "b", "arrival_s": 0.5, "ttft_s": 0.4, "tokens": [3]}],
}  # fmt: skip


def _batch_experiment(out: Path) -> Path:
    """experiment.json + trials.jsonl of an `ab schedule --batch 2` run of BATCH_PAIRS pairs
    (its trials' run reports as RUN_REPORT, values drawn from the trial's index)."""
    from compile_ahead.profiling.trials.design import make_plan
    from compile_ahead.profiling.trials.experiment import save_experiment
    from compile_ahead.profiling.trials.runner import TrialRecord

    plan = make_plan(["i1", "i2"], BATCH_PAIRS, 0)
    records = []
    for slot in plan.slots:
        arm, wobble = plan.arms[slot.arm], 1.0 + 0.01 * slot.index
        result = json.loads(json.dumps(RUN_REPORT)) | {"schedule": arm}
        for key in ("critical_path_s", "step_s_mean", "tokens_per_s", "decode_s"):
            result[key] *= wobble * (0.9 if arm == "i2" else 1.0)
        records.append(
            TrialRecord(slot.index, slot.block, slot.position, arm, False, 0, 1.0,
                        float(slot.index), str(out / f"trial-{slot.index:03d}.json"), result)
        )  # fmt: skip
    arms = [{"name": a, "command": ["fake", a, "{out}"], "schedule": a} for a in plan.arms]
    exp = {"kind": "schedule", "arms": arms, "pairs": BATCH_PAIRS, "warmup": 0,
           "ladder": [64, 128], "model": "tiny", "prompt_len": 8, "decode_tokens": 40,
           "batch": 2, "prompt_lens": [6, 10]}  # fmt: skip
    out.mkdir(parents=True)
    save_experiment(out, exp, records)
    return out


def _set_result_field(log: Path, line: int, key: str, value: str) -> None:
    """Line ``line`` of a trial log with its result's ``key`` set to ``value`` (raw JSON)."""
    lines = log.read_text().splitlines()
    record = json.loads(lines[line - 1])
    record["result"][key] = "@@"
    lines[line - 1] = json.dumps(record).replace('"@@"', value)
    log.write_text("\n".join(lines) + "\n")


def _endpoint_counts(path: Path) -> dict[str, int]:
    """endpoint key -> the pairs its comparison used, from a schedule report's JSON."""
    data = strict_json(path)
    assert isinstance(data, dict)
    return {
        e["key"]: e["comparisons"]["i2"]["n"]
        for e in data["endpoints"]
        if e["comparisons"].get("i2") is not None
    }


@pytest.mark.parametrize("value", ['"fast"', "[0.05, 0.06]", "true", "NaN"])
@pytest.mark.parametrize(
    "key", ["step_s_mean", "kv_reserved_peak_bytes_per_sequence", "graphs_resident_max"]
)
def test_a_batch_measure_that_is_not_a_number_is_named_and_the_report_partial(key, value, tmp_path):
    """The batch fields name no unit suffix (step_s_mean, ..._bytes_per_sequence), nor does a
    count: a string, list, flag or NaN there is still an invalid trial, named, left out of
    every statistic (the step-time endpoint included, never one pair short alone)."""
    out = _batch_experiment(tmp_path / "ab")
    log = out / "trials.jsonl"
    _set_result_field(log, 3, key, value)
    done = _cli("ab", "report", str(out), "--no-plot")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    named = [line for line in done.stderr.splitlines() if f"{log}:3:" in line]
    assert len(named) == 1 and "invalid trial" in named[0], done.stderr
    assert f"result.{key} is not" in named[0], named[0]
    partial = out / "schedule_ab_partial.md"
    assert f"PARTIAL: {2 * BATCH_PAIRS - 1} of {2 * BATCH_PAIRS} trials completed" in (
        partial.read_text()
    )
    counts = _endpoint_counts(out / "schedule_ab_partial.json")
    assert {"step_time", "batch_tok_s", "critical_path"} <= set(counts), counts
    assert set(counts.values()) == {BATCH_PAIRS - 1}, counts  # one pair out of every endpoint


def test_a_complete_batch_experiment_is_not_partial(tmp_path):
    """The run report's text and flags (kv_bytes_definition, a sequence's stop_reason, a
    boundary's ready) are not measures: a valid batch experiment reports whole."""
    out = _batch_experiment(tmp_path / "ab")
    done = _cli("ab", "report", str(out), "--no-plot")
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr
    counts = _endpoint_counts(out / "schedule_ab.json")
    assert counts["step_time"] == BATCH_PAIRS and set(counts.values()) == {BATCH_PAIRS}


def _numeric_leaves(node: object, path: tuple = ()) -> list[tuple]:
    """The path of every number below ``node`` (keys and list indices)."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _numeric_leaves(v, (*path, k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _numeric_leaves(v, (*path, i))]
    return [path] if isinstance(node, int | float) and not isinstance(node, bool) else []


def _replaced(result: dict, path: tuple, value: object) -> dict:
    copy = json.loads(json.dumps(result))
    node = copy
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return copy


def _reads(endpoint, result: dict) -> object:
    try:
        return endpoint.get(result)
    except (TypeError, ValueError) as err:  # a reader that fails on it reads it too
        return err


def _kind_endpoints():
    from compile_ahead.profiling.trials.analysis import Endpoint
    from compile_ahead.profiling.trials.compile_kind.endpoints import compile_endpoints
    from compile_ahead.profiling.trials.compile_kind.passes import PassKey, SelfTimes
    from compile_ahead.profiling.trials.schedule_kind.endpoints import schedule_endpoints
    from compile_ahead.profiling.trials.serve_kind.endpoints import serve_endpoints

    per_pass = SelfTimes("min").getter(PassKey("M", "p"))
    compile_eps = compile_endpoints((16,), pass_profile=True, counters=True)
    return [
        ("schedule", schedule_endpoints((64, 128), batch=2), RUN_REPORT),
        ("compile", [*compile_eps, Endpoint("p", "p", "ms", "lower", per_pass)], COMPILE_RESULT),
        ("serve", serve_endpoints(cold_s=1.0), SERVE_RESULT),
    ]


@pytest.mark.parametrize(
    ("kind", "endpoints", "result"), _kind_endpoints(), ids=["schedule", "compile", "serve"]
)
def test_every_field_an_endpoint_reads_is_a_checked_measure(kind, endpoints, result):
    """For every endpoint of a kind: each number it reads, replaced by text, a list or a flag,
    makes the trial invalid where it is read, so no endpoint can lose a pair without a word.
    (An endpoint the sample result gives no value is a new one: add its field above.)"""
    from compile_ahead.profiling.results_format.record_values import record_problem

    record = {"wall_s": 1.0, "started_unix": 0.0}
    assert record_problem(record | {"result": result}) is None
    for endpoint in endpoints:
        assert endpoint.get(result) is not None, f"{kind}: {endpoint.key} reads nothing here"
        for path in _numeric_leaves(result):
            for bad in ("x", [1.0], True):
                changed = _replaced(result, path, bad)
                if _reads(endpoint, changed) != endpoint.get(result):
                    problem = record_problem(record | {"result": changed})
                    assert problem is not None, f"{endpoint.key} reads {path} = {bad!r} unchecked"
