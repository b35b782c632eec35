"""OpenVINO properties from the command line (--ov-config KEY=VALUE, --ov-config-file) and in
`ab` arms: checked against the device before any work, recorded in the report and the trace,
part of the compile cache key."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli import run_cli, run_profile_compile
from trace_processor import NodeTraceProcessor, unavailable_reason

from compile_ahead.commands.main import main
from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.trials.arms import check_arm_properties, parse_arm
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.compile.settings.properties import (
    DeviceFacts,
    check_properties,
    load_properties_file,
    parse_properties,
)
from conftest import interpreter_venv

needs_tp = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))

RUN = ["run", "--model", "tiny", "--ladder", "32,64", "--schedule", "b0", "--no-progress"]
RUN += ["--inference-precision", "f32", "--prompt-len", "8", "--decode-tokens", "4"]
EXACT = "DYNAMIC_QUANTIZATION_GROUP_SIZE"


def _run(tmp_path: Path, name: str, *extra: str) -> dict:
    out = tmp_path / f"{name}.json"
    assert main([*RUN, "--report", str(out), *extra]) == 0
    return json.loads(out.read_text())


def _trace_arg(trace: Path, slice_prefix: str, key: str) -> str:
    with NodeTraceProcessor.open(trace) as tp:
        rows = tp.rows(
            "select a.display_value as v from slice s join args a using(arg_set_id) "
            f"where s.name like '{slice_prefix}%' and a.key = 'debug.{key}'"
        )
    assert len(rows) == 1, rows
    return rows[0]["v"]


@needs_tp
def test_a_property_is_accepted_and_recorded_in_report_and_trace(tmp_path, capsys):
    trace = tmp_path / "run.pftrace"
    report = _run(tmp_path, "r", "--ov-config", f"{EXACT}=0", "--trace", str(trace), "--no-cache")
    assert report["ov_config"] == {EXACT: "0"}
    assert f"{EXACT}=0" in capsys.readouterr().out  # the summary names it
    assert json.loads(_trace_arg(trace, "run: ", "ov_config")) == {EXACT: "0"}


def test_a_run_without_properties_records_none(tmp_path):
    assert _run(tmp_path, "plain", "--no-cache")["ov_config"] == {}


def test_properties_are_part_of_the_compile_cache_key(tmp_path):
    cache = ["--cache-dir", str(tmp_path / "cache")]

    def states(name: str, value: str) -> set[str]:
        report = _run(tmp_path, name, *cache, "--ov-config", f"{EXACT}={value}")
        return {j["cache"] for j in report["compile_jobs"]}

    assert states("first", "0") == {"miss"}
    assert states("same", "0") == {"hit"}
    assert states("other", "32") == {"miss"}
    assert states("other-again", "32") == {"hit"}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ov-config", "NO_SUCH_KEY=1"], "NO_SUCH_KEY is not a property CPU supports"),
        (["--ov-config", "FULL_DEVICE_NAME=x"], "FULL_DEVICE_NAME is read-only on CPU"),
        (["--ov-config", f"{EXACT}=many"], f"{EXACT}=many: CPU refused it: Wrong value"),
        (["--ov-config", "novalue"], "expected KEY=VALUE"),
    ],
)
def test_a_refused_property_is_one_line_before_any_work(tmp_path, monkeypatch, flags, message):
    cache = tmp_path / "user-cache"
    monkeypatch.setenv("COMPILE_AHEAD_CACHE_DIR", str(cache))
    report, trace = tmp_path / "r.json", tmp_path / "t.pftrace"
    argv = [*RUN, "--report", str(report), "--trace", str(trace), *flags]
    proc = run_cli(*argv)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("compile-ahead: error: --ov-config")
    assert message in lines[0]
    if "not a property" in message:  # names what the device does take
        assert "settable properties: " in lines[0] and EXACT in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no report, trace or checkpoint


def test_generate_refuses_an_unknown_key_and_records_a_known_one(capsys):
    base = ["generate", "--model", "tiny", "--prompt-ids", "1,2,3", "--max-new-tokens", "2"]
    base += ["--inference-precision", "f32", "--no-cache", "--json"]
    assert main([*base, "--ov-config", "NO_SUCH_KEY=1"]) == 2
    assert "NO_SUCH_KEY is not a property CPU supports" in capsys.readouterr().err
    assert main([*base, "--ov-config", f"{EXACT}=0"]) == 0
    assert json.loads(capsys.readouterr().out)["ov_config"] == {EXACT: "0"}


def test_the_file_form_takes_the_device_entry_and_the_flag_wins(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"CPU": {EXACT: "0", "ENABLE_CPU_PINNING": False}, "GPU": {}}))
    report = _run(tmp_path, "file", "--no-cache", "--ov-config-file", str(path))
    assert report["ov_config"] == {EXACT: "0", "ENABLE_CPU_PINNING": "NO"}
    both = _run(
        tmp_path, "both", "--no-cache", "--ov-config-file", str(path), "--ov-config", f"{EXACT}=32"
    )
    assert both["ov_config"] == {EXACT: "32", "ENABLE_CPU_PINNING": "NO"}


def test_file_form_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"GPU": {"X": "1"}}')
    with pytest.raises(CompileAheadError, match=r"no entry for CPU \(it has: GPU\)"):
        load_properties_file(bad, "CPU", "--ov-config-file")
    bad.write_text('{"CPU": {"X": [1]}}')
    with pytest.raises(CompileAheadError, match="expected a string or number"):
        load_properties_file(bad, "CPU", "--ov-config-file")
    bad.write_text("{not json")
    with pytest.raises(CompileAheadError, match="not JSON"):
        load_properties_file(bad, "CPU", "--ov-config-file")
    with pytest.raises(CompileAheadError, match="No such file"):
        load_properties_file(tmp_path / "missing.json", "CPU", "--ov-config-file")
    bad.write_text('{"NPU": {"NPU_COMPILATION_MODE_PARAMS": "x=1"}}')
    assert load_properties_file(bad, "NPU.0", "f") == {"NPU_COMPILATION_MODE_PARAMS": "x=1"}


def test_repeated_and_conflicting_flags():
    assert parse_properties(["A=1", "B=x=y", "A=1"], "--ov-config") == {"A": "1", "B": "x=y"}
    with pytest.raises(CompileAheadError, match="A given twice"):
        parse_properties(["A=1", "A=2"], "--ov-config")


def test_the_check_decides_from_facts():
    facts = DeviceFacts("NPU", {"NPU_X": "RW", "NPU_NAME": "RO"})
    check_properties({"NPU_X": "1"}, facts, "w")
    with pytest.raises(CompileAheadError, match=r"settable properties: NPU_X$"):
        check_properties({"CPU_Y": "1"}, facts, "w")
    with pytest.raises(CompileAheadError, match="w NPU_X=1: NPU refused it: bad"):
        check_properties({"NPU_X": "1"}, DeviceFacts("NPU", facts.supported, "bad"), "w")


def test_an_inference_precision_hint_property_is_the_inference_precision():
    hinted = CompileOptions(extra_config={"INFERENCE_PRECISION_HINT": "f32"}).resolved()
    assert (hinted.inference_precision, hinted.kv_precision) == ("f32", "f32")
    with pytest.raises(CompileAheadError, match="disagree"):
        CompileOptions(
            inference_precision="bf16", extra_config={"INFERENCE_PRECISION_HINT": "f32"}
        ).resolved()


def test_ab_arms_take_the_same_properties_and_the_same_check(tmp_path):
    arm = parse_arm(f"A=current,{EXACT}=0")
    assert arm.config == {EXACT: "0"}
    check_arm_properties(arm, "CPU")
    with pytest.raises(CompileAheadError, match="--arm B: NO_SUCH_KEY is not a property CPU"):
        check_arm_properties(parse_arm("B=current,NO_SUCH_KEY=1"), "CPU")
    # An interpreter arm is asked through its own process (here the same OpenVINO).
    venv = interpreter_venv(tmp_path / "venv")
    # The arm runs this interpreter with its environment: inside a venv, that venv's packages.
    prefix = [str(venv / "bin" / "python"), "-s", "-c", "import sys; print(sys.prefix)"]
    assert subprocess.run(prefix, capture_output=True, text=True).stdout.strip() == sys.prefix
    check_arm_properties(parse_arm(f"V={venv},{EXACT}=0"), "CPU")
    with pytest.raises(CompileAheadError, match=f"--arm W {EXACT}=many: CPU refused it"):
        check_arm_properties(parse_arm(f"W={venv},{EXACT}=many"), "CPU")


def test_ab_compile_refuses_before_exporting(tmp_path, capsys):
    out, ir = tmp_path / "ab", tmp_path / "ir"
    argv = ["ab", "compile", "--model", "tiny", "--ladder", "16", "--pairs", "1"]
    argv += ["--arm", "A=current", "--arm", "B=current,NO_SUCH_KEY=1"]
    assert main([*argv, "--out", str(out), "--ir-dir", str(ir)]) == 2
    assert "--arm B: NO_SUCH_KEY is not a property CPU supports" in capsys.readouterr().err
    assert not out.exists() and not ir.exists()


def _profile(*args: str | Path) -> subprocess.CompletedProcess:
    return run_profile_compile(*args, timeout=240)


@needs_tp
def test_profile_compile_records_the_properties(tmp_path):
    out = tmp_path / "p"
    proc = _profile(
        "--model", "tiny", "--ladder", "16", "--ov-config", f"{EXACT}=0", "--out", str(out)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"OpenVINO properties: {EXACT}=0" in proc.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["ov_config"] == {EXACT: "0"}
    assert report["decode_defaults"] == {"SNIPPETS_MODE": "DISABLE"}  # the CPU's, beside it
    assert json.loads(_trace_arg(out / "trace.pftrace", "model: ", "ov_config")) == {EXACT: "0"}


def test_profile_compile_refuses_an_unknown_key_with_nothing_written(tmp_path):
    out = tmp_path / "p"
    proc = _profile(
        "--model", "tiny", "--ladder", "16", "--ov-config", "NO_SUCH=1", "--out", str(out)
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("profile-compile: error: --ov-config: NO_SUCH is not a property")
    assert list(tmp_path.iterdir()) == []
