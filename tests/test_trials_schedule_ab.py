"""`compile-ahead ab schedule` with a fake `run` command that writes the runtime's report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from fake_schedule_run import FAKE_RUN

from compile_ahead.commands.main import build_parser
from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.trials.pooling import pool_experiments
from compile_ahead.profiling.trials.schedule_kind import arms as schedule_arms
from compile_ahead.profiling.trials.schedule_kind import tallies as schedule_tallies
from compile_ahead.runtime.ladder.reporting.report import BoundaryRecord
from compile_ahead.runtime.ladder.settings.capacities import Ladder


@pytest.fixture
def command(tmp_path: Path) -> str:
    script = tmp_path / "fake_run.py"
    script.write_text(FAKE_RUN)
    return f"{sys.executable} {script} {{schedule}} {{ladder}} {{out}}"


def run_ab(argv: list[str]) -> int:
    parser = build_parser()  # the one `compile-ahead` CLI
    args = parser.parse_args(argv)
    return args.func(args)


def test_schedule_ab_with_fake_runs(tmp_path: Path, command: str) -> None:
    out = tmp_path / "res"
    code = run_ab(
        ["ab", "schedule", "--model", "tiny", "--arms", "i1,i2,bad", "--ladder", "64,128,256",
         "--prompt-len", "16", "--pairs", "6", "--warmup", "0", "--command", command,
         "--out", str(out), "--quiet", "--no-plot"]
    )  # fmt: skip
    assert code == 0
    data = json.loads((out / "schedule_ab.json").read_text())
    assert data["design"]["kind"] == "Williams" and data["design"]["carryover_balanced"]
    fg = next(e for e in data["endpoints"] if e["key"] == "foreground_compile")
    i2 = fg["comparisons"]["i2"]
    assert i2["mean_diff"] == pytest.approx(-16.0, abs=0.5) and i2["wins"] == 6
    # Without the prefill graph both arms compile alike: i2 compiles one rung of three.
    graphs = next(e for e in data["endpoints"] if e["key"] == "foreground_decode_graphs")
    assert graphs["comparisons"]["i2"]["geomean_ratio"] == pytest.approx(1 / 3, abs=0.02)
    tallies = {t["label"]: t["per_arm"] for t in data["tallies"]}
    assert tallies["Boundaries ready in time"]["i2"] == "12 / 12 ready"
    agreement = tallies["Boundary top-1 agreement with i1"]
    assert agreement["i2"].startswith("12 / 12 boundaries (48 / 48 steps top-1 equal)")
    assert agreement["bad"].startswith("6 / 12 boundaries (42 / 48 steps top-1 equal)")
    keys = {e["key"] for e in data["endpoints"]}
    assert {"tok_s_64", "tok_s_256", "kv_reserved_avg", "kv_committed_avg", "peak_rss"} <= keys
    md = (out / "schedule_ab.md").read_text()
    assert "tiny [SYNTHETIC weights]" in md
    assert "| Foreground compile wall |" in md and "Paired effect (i2 − i1)" in md


def test_readiness_counts_late_successors(tmp_path: Path, command: str) -> None:
    out = tmp_path / "res"
    run_ab(["ab", "schedule", "--model", "tiny", "--arms", "i2,late", "--ladder", "64,128",
            "--prompt-len", "8", "--pairs", "2", "--warmup", "0", "--command", command,
            "--out", str(out), "--quiet", "--no-plot"])  # fmt: skip
    data = json.loads((out / "schedule_ab.json").read_text())
    ready = next(t for t in data["tallies"] if t["label"] == "Boundaries ready in time")
    assert ready["per_arm"] == {"i2": "2 / 2 ready", "late": "0 / 2 ready"}
    wait = next(e for e in data["endpoints"] if e["key"] == "boundary_wait")
    assert wait["comparisons"]["late"]["mean_diff"] == pytest.approx(0.5)


def test_default_command_runs_compile_ahead_run() -> None:
    cmd = schedule_arms.run_command("i2", "qwen2.5-0.5b", Ladder((1024, 2048)), 128, 1920)
    assert cmd[1:4] == ("-m", "compile_ahead.commands", "run")
    assert cmd[cmd.index("--schedule") + 1] == "i2" and cmd[cmd.index("--report") + 1] == "{out}"
    assert cmd[cmd.index("--decode-tokens") + 1] == "1920"
    assert cmd[cmd.index("--ladder") + 1] == "1024,2048"


def test_run_flags_reach_every_trial(tmp_path: Path) -> None:
    """The run's own flags (weights dtype, compile properties, prefill) reach each trial's
    `compile-ahead run`, and its report shows they took effect."""
    out = tmp_path / "ab"
    argv = ["ab", "schedule", "--model", "tiny", "--ladder", "32,64", "--arms", "i1,i2"]
    argv += ["--prompt-len", "20", "--decode-tokens", "4", "--pairs", "1", "--warmup", "0"]
    argv += ["--synthetic-dtype", "f32", "--ov-config", "PERFORMANCE_HINT=LATENCY"]
    argv += ["--prefill-shape", "static", "--prefill-chunk", "8", "--quiet", "--no-plot"]
    argv += ["--out", str(out)]
    assert run_ab(argv) == 0
    exp = json.loads((out / "experiment.json").read_text())
    for arm in exp["arms"]:
        cmd = arm["command"]
        assert cmd[cmd.index("--synthetic-dtype") + 1] == "f32"
        assert cmd[cmd.index("--ov-config") + 1] == "PERFORMANCE_HINT=LATENCY"
    runs = [json.loads(r.read_text()) for r in sorted(out.glob("trial-*.json"))]
    assert len(runs) == 2
    for run in runs:
        assert run["prefill"]["path"] == "static" and run["prefill"]["chunk"] == 8
        assert run["ov_config"] == {"PERFORMANCE_HINT": "LATENCY"}
        assert run["synthetic"] and run["weight_format"] == "f32"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--arms", "i1"], "at least two schedules"),
        (["--arms", "i1,i1"], "once"),
        (["--arms", "i1,I 2"], "not a schedule name"),
        (["--arms", "i1,i2", "--prompt-len", "100", "--decode-tokens", "50"], "exceeds"),
        (["--arms", "i1,i2", "--prompt-len", "8", "--command", "true"], "must contain {out}"),
        (["--arms", "i1,i2", "--prompt-len", "128"], "--prompt-len 128 must be in 1..127"),
        (["--arms", "i1,i2", "--ov-config", "NO_SUCH_KEY=1"], "NO_SUCH_KEY"),
        (["--arms", "i1,npuw-b0", "--ov-config", "PERFORMANCE_HINT=LATENCY"], "upstream arm"),
    ],
)
def test_bad_schedule_arguments(argv: list[str], message: str) -> None:
    with pytest.raises(CompileAheadError, match=message):
        run_ab(["ab", "schedule", "--model", "tiny", "--ladder", "64,128", *argv])


def test_npuw_arms_need_the_upstream_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    from compile_ahead.profiling.trials.schedule_kind import baselines

    monkeypatch.setattr(baselines, "UPSTREAM_MODULE", "compile_ahead.runtime.no_such_module")
    with pytest.raises(CompileAheadError, match="upstream baselines need"):
        run_ab(["ab", "baselines", "--model", "tiny"])


def test_agreement_from_boundary_records_with_top1_lists() -> None:
    control = {"boundaries": [{"from": 1, "to": 2, "top1": [5, 6, 7], "logits_digest": "x"}]}
    same = {"boundaries": [{"from": 1, "to": 2, "top1": [5, 6, 7], "logits_digest": "x"}]}
    other = {"boundaries": [{"from": 1, "to": 2, "top1": [5, 9, 7], "logits_digest": "y"}]}
    assert schedule_tallies.agreement_counts(control, same) == (1, 1, 3, 3, 1, 1)
    assert schedule_tallies.agreement_counts(control, other) == (0, 1, 2, 3, 0, 1)
    assert schedule_tallies.agreement_counts(control, {}) == (0, 0, 0, 0, 0, 0)


def test_eager_boundaries_have_no_deadline() -> None:
    def ready(**record):
        return schedule_tallies._is_ready(
            BoundaryRecord.from_json({"from": 16, "to": 32, **record})
        )

    assert ready(ready_margin_s=None, wait_s=0.0) is None
    eager = {"ready": True, "wait_s": 0.0, "decode_left_s": None, "ready_margin_s": None}
    assert ready(**eager) is None  # compiled up front: no deadline to meet
    assert ready(ready=False, ready_margin_s=1.0) is False
    assert ready(ready_margin_s=-0.1) is False


def test_failed_trial_leaves_a_partial_report(tmp_path: Path, command: str) -> None:
    out = tmp_path / "res"
    with pytest.raises(CompileAheadError, match="partial report") as info:
        run_ab(["ab", "schedule", "--model", "tiny", "--arms", "i1,i2", "--ladder", "64,128",
                "--prompt-len", "8", "--pairs", "3", "--warmup", "0", "--out", str(out),
                "--command", f"env FAIL_AT=3 {command}", "--quiet", "--no-plot"])  # fmt: skip
    assert "injected failure" in str(info.value)
    assert (out / "trials.jsonl").read_text().count("\n") == 4
    partial = (out / "schedule_ab_partial.md").read_text()
    assert "PARTIAL" in partial and "| Foreground compile wall |" in partial
    assert not (out / "schedule_ab.md").exists()
    (out / "schedule_ab_partial.md").unlink()
    assert run_ab(["ab", "report", str(out), "--no-plot"]) == 0
    assert "PARTIAL: 3 of 6 trials completed" in (out / "schedule_ab_partial.md").read_text()


def test_report_rebuilds_the_same_analysis(tmp_path: Path, command: str) -> None:
    out = tmp_path / "res"
    run_ab(["ab", "schedule", "--model", "tiny", "--arms", "i1,i2", "--ladder", "64,128",
            "--prompt-len", "8", "--pairs", "2", "--warmup", "0", "--command", command,
            "--out", str(out), "--quiet", "--no-plot"])  # fmt: skip
    first = json.loads((out / "schedule_ab.json").read_text())
    (out / "schedule_ab.json").unlink()
    assert run_ab(["ab", "report", str(out), "--no-plot"]) == 0
    again = json.loads((out / "schedule_ab.json").read_text())
    assert again["endpoints"] == first["endpoints"] and again["tallies"] == first["tallies"]
    with pytest.raises(CompileAheadError, match="not an `ab` results dir"):
        run_ab(["ab", "report", str(tmp_path)])


def _small_run(out: Path, command: str, prompt_len: int = 8) -> None:
    argv = ["ab", "schedule", "--model", "tiny", "--arms", "i1,i2", "--ladder", "64,128",
            "--prompt-len", str(prompt_len), "--pairs", "2", "--warmup", "1",
            "--command", command, "--out", str(out), "--quiet", "--no-plot"]  # fmt: skip
    assert run_ab(argv) == 0


def _per_block(out: Path, arm: str) -> list[float]:
    trials = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    rows = sorted((t["block"], t["result"]["foreground_compile_s"]) for t in trials
                  if t["arm"] == arm and not t["warmup"])  # fmt: skip
    return [v for _, v in rows]


def test_report_pools_runs_of_one_experiment(tmp_path: Path, command: str) -> None:
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        _small_run(run, command)
    # A run from another virtual environment: the same arms under another interpreter.
    exp = json.loads((runs[1] / "experiment.json").read_text())
    for arm in exp["arms"]:
        arm["command"][0] = "/elsewhere/bin/python"
    (runs[1] / "experiment.json").write_text(json.dumps(exp))
    pooled = tmp_path / "pooled"
    assert run_ab(["ab", "report", *map(str, runs), "--out", str(pooled), "--no-plot"]) == 0
    report = json.loads((pooled / "schedule_ab.json").read_text())
    assert report["context"]["pooled"] == f"2 runs: {runs[0]}, {runs[1]}"
    assert report["context"]["run by"] == f"{sys.executable}, /elsewhere/bin/python"
    fg = next(e for e in report["endpoints"] if e["key"] == "foreground_compile")
    i1 = _per_block(runs[0], "i1") + _per_block(runs[1], "i1")
    i2 = _per_block(runs[0], "i2") + _per_block(runs[1], "i2")
    assert fg["values"] == {"i1": i1, "i2": i2}  # the measured pairs, warm-ups left out
    ratios = np.asarray(i2) / np.asarray(i1)
    assert fg["comparisons"]["i2"]["n"] == 4
    expected = float(np.exp(np.mean(np.log(ratios))))
    assert fg["comparisons"]["i2"]["geomean_ratio"] == pytest.approx(expected)
    # The pooled directory is an experiment of its own: reported again, the same analysis.
    (pooled / "schedule_ab.json").unlink()
    assert run_ab(["ab", "report", str(pooled), "--no-plot"]) == 0
    again = json.loads((pooled / "schedule_ab.json").read_text())
    assert again["endpoints"] == report["endpoints"]


def test_report_pools_each_trial_once_however_its_run_is_named(
    tmp_path: Path, command: str, monkeypatch, capsys
) -> None:
    """The same run named twice (relative and absolute, a symlink), a `cp -r` copy of it, and
    a pooled directory beside one of its inputs add no pairs: the analysis equals the one of
    the distinct runs alone, and one note line names the inputs that repeated."""
    import shutil

    a, b = tmp_path / "a", tmp_path / "b"
    _small_run(a, command)
    _small_run(b, command)
    (tmp_path / "link").symlink_to(a)
    shutil.copytree(a, tmp_path / "copy")
    monkeypatch.chdir(tmp_path)

    def pooled(name: str, *inputs: str) -> dict:
        capsys.readouterr()
        assert run_ab(["ab", "report", *inputs, "--out", name, "--no-plot"]) == 0
        report = json.loads((tmp_path / name / "schedule_ab.json").read_text())
        return next(e for e in report["endpoints"] if e["key"] == "foreground_compile")

    distinct = pooled("ab", "a", "b")
    assert distinct["comparisons"]["i2"]["n"] == 4
    assert "note:" not in capsys.readouterr().err
    # name -> the inputs, and the one that repeats trials of an earlier one
    cases = {
        "spelled": (["a", str(a), "b"], str(a)),
        "symlinked": (["a", "b", "link"], "link"),
        "copied": (["a", "copy", "b"], "copy"),
        "pooled-with-its-input": (["ab", "b"], "b"),
        "input-before-its-pool": (["b", "ab"], "ab"),
    }
    for name, (inputs, repeated) in cases.items():
        endpoint = pooled(name, *inputs)
        assert endpoint["comparisons"]["i2"]["n"] == 4, name
        notes = [line for line in capsys.readouterr().err.splitlines() if "note:" in line]
        assert len(notes) == 1 and f"{repeated} (4 of " in notes[0], (name, notes)
        assert sorted(endpoint["values"]["i1"]) == sorted(distinct["values"]["i1"]), name
        assert sorted(endpoint["values"]["i2"]) == sorted(distinct["values"]["i2"]), name
        summary = json.loads((tmp_path / name / "experiment.json").read_text())
        assert summary["pairs"] == 4, name


def test_report_refuses_to_pool_other_experiments_or_without_out(
    tmp_path: Path, command: str
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _small_run(a, command)
    _small_run(b, command, prompt_len=16)
    with pytest.raises(
        CompileAheadError,
        match=r"b: another experiment than .*a \(decode_tokens, prompt_len differ\)",
    ):
        run_ab(["ab", "report", str(a), str(b), "--out", str(tmp_path / "p")])
    assert not (tmp_path / "p").exists()
    with pytest.raises(CompileAheadError, match="pooling several directories needs --out"):
        run_ab(["ab", "report", str(a), str(a)])
    with pytest.raises(CompileAheadError, match="is not empty"):
        run_ab(["ab", "report", str(a), str(b), "--out", str(a)])


def test_pooled_compile_runs_compare_their_arms_without_their_own_directory(tmp_path) -> None:
    """A compile A/B's arms read files the run wrote into its directory: those paths differ
    between runs of one experiment; the interpreter and OpenVINO an arm names do not."""

    def experiment(manifest: str, openvino: str = "2026.4") -> dict:
        arm = {"name": "A", "python": "/venv/bin/python", "openvino": openvino,
               "command": ["/venv/bin/python", "-s", "worker.py", manifest, "{out}"]}  # fmt: skip
        return {"kind": "compile", "arms": [arm, arm | {"name": "B"}], "pairs": 2,
                "warmup": 0, "ladder": [64], "context": {}, "labels": {}}  # fmt: skip

    a, b = tmp_path / "a", tmp_path / "b"
    for run in (a, b):
        run.mkdir()
        (run / "manifest-A.json").write_text("{}")
    # One run was given its directory as an absolute path, the other as a relative one.
    ea, eb = experiment(f"{a}/manifest-A.json"), experiment("b/manifest-A.json")
    exp, records = pool_experiments([a, b], [ea, eb], [[], []])
    assert exp["pairs"] == 4 and exp["pooled_from"] == [str(a), str(b)] and records == []
    assert "pooled_interpreters" not in exp
    with pytest.raises(CompileAheadError, match=r"\(arms differs\)"):
        pool_experiments([a, b], [ea, experiment("b/manifest-A.json", "2025.4")], [[], []])
    with pytest.raises(CompileAheadError, match=r"\(arms differs\)"):  # another file
        pool_experiments([a, b], [ea, experiment("b/manifest-B.json")], [[], []])
