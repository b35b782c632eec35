"""`compile-ahead ab compile`: arm specs, the standalone worker, a real two-configuration run."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compile_ahead.commands.main import build_parser
from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.trials.arms import parse_arm, probe
from compile_ahead.profiling.trials.compile_kind.exported_rungs import (
    WORKER,
    export_rungs,
    parse_ladder,
)
from conftest import interpreter_venv


def ab_parser() -> argparse.ArgumentParser:
    return build_parser()  # the one `compile-ahead` CLI


def run_ab(argv: list[str]) -> int:
    args = ab_parser().parse_args(argv)
    return args.func(args)


def test_ab_is_registered_in_the_main_cli() -> None:
    from compile_ahead.commands import ab as trials_cli
    from compile_ahead.commands.main import build_parser

    args = build_parser().parse_args(
        ["ab", "compile", "--arm", "A=current", "--arm", "B=current", "--model", "tiny"]
    )
    assert args.func.__module__ == trials_cli.__name__


def test_arm_specs(tmp_path: Path) -> None:
    cur = parse_arm("A=current")
    assert cur.python == sys.executable and not cur.config and cur.library_path is None
    cfg = parse_arm("B=current,INFERENCE_PRECISION_HINT=f32,env.FOO=1")
    assert cfg.config == {"INFERENCE_PRECISION_HINT": "f32"} and cfg.env == {"FOO": "1"}
    assert cfg.process_env()[1] == ("PYTHONPATH",)  # interpreter arms drop our PYTHONPATH
    venv = interpreter_venv(tmp_path / "venv")
    assert parse_arm(f"V={venv}").python == str(venv / "bin" / "python")
    lib = tmp_path / "site"
    (lib / "openvino").mkdir(parents=True)
    spec = parse_arm(f"L=lib={lib}")
    assert spec.library_path == str(lib.resolve())
    assert spec.process_env()[0]["PYTHONPATH"] == str(lib.resolve())
    assert parse_arm(f"L2={lib}").library_path == str(lib.resolve())
    # A properties file's entry for the device; a KEY=VALUE after it wins.
    props = tmp_path / "props.json"
    props.write_text(json.dumps({"CPU": {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}}))
    filed = parse_arm(f"F=current,config={props},NUM_STREAMS=2")
    assert filed.config == {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "2"}
    with pytest.raises(CompileAheadError, match="no entry for NPU"):
        parse_arm(f"F=current,config={props}", "NPU")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("A", "expected NAME=SPEC"),
        ("=current", "expected NAME=SPEC"),
        ("A b=current", "alphanumeric"),
        ("A=/no/such/python", "does not exist"),
        ("A=lib=/no/such/dir", "no openvino package"),
        ("A=current,=x", "expected KEY=VALUE"),
        ("A=current,KEY=", "expected KEY=VALUE"),
    ],
)
def test_bad_arm_specs(text: str, message: str) -> None:
    with pytest.raises(CompileAheadError, match=message):
        parse_arm(text)


def test_non_executable_interpreter(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("")
    with pytest.raises(CompileAheadError, match="not executable"):
        parse_arm(f"A={fake}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CompileAheadError, match="without bin/python"):
        parse_arm(f"A={tmp_path / 'empty'}")


def test_probe_names_the_broken_arm(tmp_path: Path) -> None:
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'ModuleNotFoundError: openvino' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(CompileAheadError, match=r"--arm X: .* cannot import openvino"):
        probe(parse_arm(f"X={broken}"), "CPU")


@pytest.mark.parametrize(
    ("text", "message"),
    [("1024,abc", "comma-separated"), ("2048,1024", "strictly increasing"), ("0", "positive")],
)
def test_bad_ladders(text: str, message: str) -> None:
    with pytest.raises(CompileAheadError, match=message):
        parse_ladder(text)


def test_worker_remarks_decompression(tmp_path: Path) -> None:
    exported = export_rungs("tiny", (16,), "f32", tmp_path / "ir")
    assert "SYNTHETIC" in exported.label
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps(exported.manifest("CPU", {}, pass_profile=True)))
    out = tmp_path / "out.json"
    env = {k: v for k, v in os.environ.items() if k != "OV_ENABLE_PROFILE_PASS"}
    subprocess.run([sys.executable, "-s", str(WORKER), str(manifest), str(out)], env=env,
                   check=True)  # fmt: skip
    result = json.loads(out.read_text())
    (rung,) = result["rungs"]
    assert rung["capacity"] == 16 and rung["compile_s"] > 0
    # the tiny preset stores f16 weights: every weight Convert must be marked again after IR
    assert rung["decompression_marked"] > 0
    assert rung["lookups_marked"] == 1  # the embedding table's Gather
    assert rung["passes"]["pass_records"] > 0 and rung["passes"]["problems"] == []
    # per-pass self times, by manager then pass, never more than the managers' total
    self_s = result["pass_self_s"]
    assert self_s and all(v >= 0 for passes in self_s.values() for v in passes.values())
    total_self = sum(sum(passes.values()) for passes in self_s.values())
    assert 0 < total_self <= result["total_transformations_s"]
    assert set(result["pass_runs"]) == set(self_s)
    assert result["extension_counters"] == {"available": False, "reason": "not requested"}


@pytest.mark.slow
def test_ab_compile_two_configurations_on_tiny(tmp_path: Path) -> None:
    out = tmp_path / "res"
    code = run_ab(
        ["ab", "compile", "--arm", "A=current", "--arm", "B=current,INFERENCE_PRECISION_HINT=f32",
         "--model", "tiny", "--ladder", "16,32", "--pairs", "2", "--warmup", "0", "--counters",
         "--out", str(out), "--quiet"]
    )  # fmt: skip
    assert code == 0
    data = json.loads((out / "compile_ab.json").read_text())
    assert [a["name"] for a in data["arms"]] == ["A", "B"]
    assert data["arms"][1]["config"]["INFERENCE_PRECISION_HINT"] == "f32"
    keys = [e["key"] for e in data["endpoints"]]
    assert keys[:3] == ["compile_16", "compile_32", "compile_total"]
    assert "itt_compile" in keys
    total = next(e for e in data["endpoints"] if e["key"] == "compile_total")
    assert all(v > 0 for v in total["values"]["A"] + total["values"]["B"])
    assert total["comparisons"]["B"]["n"] == 2
    by_arm = {t["arm"]: t["result"] for t in data["trials"]}
    assert by_arm["B"]["config"]["INFERENCE_PRECISION_HINT"] == "f32"
    assert by_arm["A"]["config"].get("INFERENCE_PRECISION_HINT") != "f32"
    for result in by_arm.values():  # --counters: compile_ahead imports in both arms
        status = result["extension_counters"]
        assert status["available"] is True
        counters = result["rungs"][0]["extension_counters"]
        assert counters["depsort"]["available"] is False  # no patched NPU compiler here
        assert counters["depsort"]["values"] is None  # unavailable is never reported as zeros
        if status["itt_problem"] is None:
            assert counters["itt_compile_model_s"] > 0
        else:
            assert counters["itt_unavailable"] == status["itt_problem"]
    md = (out / "compile_ab.md").read_text()
    assert "SYNTHETIC" in md and "| Compile wall C=16 |" in md
    assert (out / "compile_ab.png").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--arm", "A=current"], "at least two arms"),
        (["--arm", "A=current", "--arm", "A=current"], "distinct"),
        (["--arm", "A=current", "--arm", "B=/no/python"], "does not exist"),
        (["--arm", "A=current", "--arm", "B=current", "--ladder", "32,16"], "increasing"),
        (["--arm", "A=current", "--arm", "B=current", "--model", "no-such-model"], "no-such"),
    ],
)
def test_ab_compile_bad_arguments(tmp_path: Path, argv: list[str], message: str) -> None:
    base = ["ab", "compile", "--model", "tiny", "--ladder", "16", "--out", str(tmp_path)]
    args = ab_parser().parse_args(base + argv)  # later --model/--ladder override
    with pytest.raises(CompileAheadError, match=message):
        args.func(args)


def test_pairs_must_be_positive() -> None:
    with pytest.raises(SystemExit):
        ab_parser().parse_args(["ab", "compile", "--arm", "A=current", "--model", "tiny",
                                "--pairs", "0"])  # fmt: skip


def test_arms_do_not_inherit_our_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    import compile_ahead
    from compile_ahead.profiling.trials.compile_kind.arms import symmetric_collector_env

    monkeypatch.setattr(compile_ahead, "_ITT_COLLECTOR_PATH", "/x/_itt.so")
    monkeypatch.setattr(compile_ahead, "_ITT_ENV_PRESET", False)
    monkeypatch.setenv(compile_ahead.ITT_ENV, "/x/_itt.so")
    env, unset = symmetric_collector_env({}, ("PYTHONPATH",), counters=False)
    assert compile_ahead.ITT_ENV in unset and env[compile_ahead.ITT_OPT_OUT_ENV] == "0"
    env, unset = symmetric_collector_env({}, (), counters=True)
    assert compile_ahead.ITT_ENV in unset and compile_ahead.ITT_OPT_OUT_ENV not in env
    monkeypatch.setattr(compile_ahead, "_ITT_ENV_PRESET", True)  # the user's own collector
    monkeypatch.setenv(compile_ahead.ITT_ENV, "/opt/vtune/libittnotify.so")
    env, unset = symmetric_collector_env({}, (), counters=False)
    assert compile_ahead.ITT_ENV not in unset


def _pass_keys(result: dict) -> set[tuple[str, str]]:
    return {(m, name) for m, passes in result["pass_self_s"].items() for name in passes}


def _rank_key(row: dict) -> tuple[int, float]:
    c = row["comparison"]
    return (0 if c["ci_excludes_zero"] else 1, -abs(c["median_diff"]))


@pytest.mark.slow
def test_ab_compile_pass_profile_per_pass_endpoints(tmp_path: Path) -> None:
    from compile_ahead.profiling.trials.stats import paired_summary

    out = tmp_path / "res"
    code = run_ab(
        ["ab", "compile", "--arm", "A=current,INFERENCE_PRECISION_HINT=f32",
         "--arm", "B=current,INFERENCE_PRECISION_HINT=bf16", "--model", "tiny", "--ladder", "16",
         "--pairs", "2", "--warmup", "0", "--pass-profile", "--repeat", "1",
         "--out", str(out), "--quiet"]
    )  # fmt: skip
    # One compile per trial: each pass's value is then the trial's own self time of that pass
    # (with repeats, the --statistic of its self times over the repeats).
    assert code == 0
    data = json.loads((out / "compile_ab.json").read_text())
    keys = [e["key"] for e in data["endpoints"]]
    assert {"compile_total", "transformations", "pass_self_total"} <= set(keys)
    comparison = data["passes"]["comparisons"]["B"]
    ranked = comparison["ranked"]
    assert len(ranked) > 50
    # sorted as documented: CI excluding 0 first, then |median paired difference|, descending
    assert [_rank_key(r) for r in ranked] == sorted(_rank_key(r) for r in ranked)
    assert "CI excludes 0 first" in data["passes"]["ranking"]
    # each pass is an endpoint under the same paired statistics, from the trials' self times
    trials = {(t["arm"], t["block"]): t["result"] for t in data["trials"]}
    top = ranked[0]
    for arm in ("A", "B"):
        expected = [
            trials[(arm, b)]["pass_self_s"].get(top["manager"], {}).get(top["pass"], 0.0) * 1e3
            for b in range(2)
        ]
        assert top["values"][arm] == pytest.approx(expected)
    again = paired_summary(top["values"]["A"], top["values"]["B"], "lower").to_dict()
    # approx compares a dict's scalars; its list of per-pair differences is compared apart
    got = dict(top["comparison"])
    assert got.pop("diffs") == pytest.approx(again.pop("diffs"))
    assert got == pytest.approx(again)
    # passes seen in one arm only are listed as such, and never ranked
    seen = {arm: set().union(*(_pass_keys(trials[(arm, b)]) for b in range(2))) for arm in "AB"}
    only = comparison["one_arm_only"]
    for arm, other in (("A", "B"), ("B", "A")):
        assert {(p["manager"], p["pass"]) for p in only[arm]} == seen[arm] - seen[other]
    assert {(r["manager"], r["pass"]) for r in ranked} == seen["A"] & seen["B"]
    import openvino as ov

    if "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        assert only["B"], "bf16 inference runs passes that f32 does not"
    md = (out / "compile_ab.md").read_text()
    assert "| Compile wall, all rungs |" in md  # beside the compile wall
    assert "### Transformation passes, self time per pass" in md
    first_row = f"| 1 | {top['pass']} | {top['manager']} |"
    assert first_row in md
    for p in only["B"]:
        assert f"- {p['pass']} [{p['manager']}]:" in md
    assert (out / "compile_ab_passes.png").stat().st_size > 0
    # `ab report DIR` rebuilds the same report from the directory
    before_md, before_json = md, (out / "compile_ab.json").read_text()
    for name in ("compile_ab.md", "compile_ab.json", "compile_ab_passes.png"):
        (out / name).unlink()
    assert run_ab(["ab", "report", str(out)]) == 0
    assert (out / "compile_ab.md").read_text() == before_md
    assert json.loads((out / "compile_ab.json").read_text()) == json.loads(before_json)
    assert (out / "compile_ab_passes.png").exists()
