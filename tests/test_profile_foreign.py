"""profile-compile on models that are not stateful decoders: any IR or ONNX file, compiled as
it is (dynamic inputs made static with --shape), with the same table, report and trace."""

from __future__ import annotations

import json

import pytest
from cli import run_profile_compile
from foreign_models import ir_model, onnx_model
from trace_processor import NodeTraceProcessor, unavailable_reason

from compile_ahead.profiling.perfetto.validate import validate_trace

needs_tp = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


@pytest.mark.parametrize("kind", ["onnx", "ir"])
def test_dynamic_inputs_need_a_shape_and_the_error_says_which(kind, tmp_path):
    model = onnx_model(tmp_path / "m.onnx") if kind == "onnx" else ir_model(tmp_path / "m.xml")
    proc = run_profile_compile("--model", str(model), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert "input 'pixels'" in last and "--shape pixels=[1,3,1,1]" in last
    assert not (tmp_path / "o").exists()
    proc = run_profile_compile(
        "--model", str(model), "--shape", "nope=[1]", "--out", str(tmp_path / "o")
    )
    assert proc.returncode == 2 and "has no such input" in proc.stderr


@pytest.mark.parametrize("kind", ["onnx", "ir"])
def test_a_model_compiled_as_it_is_gets_table_report_and_valid_trace(kind, tmp_path):
    model = onnx_model(tmp_path / "m.onnx") if kind == "onnx" else ir_model(tmp_path / "m.xml")
    out = tmp_path / "o"
    proc = run_profile_compile(
        "--model", str(model), "--shape", "pixels=[1,3,32,32]", "--out", str(out)
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "compile_model s" in proc.stdout and "not a stateful decoder" in proc.stdout
    report = json.loads((out / "report.json").read_text())
    (rung,) = report["rungs"]
    assert rung["model_file"] == str(model) and rung["phases_ns"]["compile_model"] > 0
    assert report["trace"]["valid"] and validate_trace(out / "trace.pftrace").ok
    assert (out / "passes.txt").exists()


@needs_tp
def test_the_trace_processor_sees_the_compile_and_its_phases(tmp_path):
    out = tmp_path / "o"
    model = onnx_model(tmp_path / "m.onnx")
    proc = run_profile_compile(
        "--model", str(model), "--shape", "pixels=[2,3,16,16]", "--out", str(out)
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    with NodeTraceProcessor.open(out / "trace.pftrace") as tp:
        assert tp.error_stats() == []
        assert tp.scalar("select count(*) from slice where name = 'compile C=0'") == 1
        assert tp.scalar("select count(*) from slice where name like 'manager %'") > 0


def test_ab_compile_takes_a_model_compiled_as_it_is(tmp_path):
    from compile_ahead.commands.main import build_parser

    model = onnx_model(tmp_path / "m.onnx")
    out = tmp_path / "res"
    args = build_parser().parse_args(
        ["ab", "compile", "--arm", "A=current", "--arm", "B=current,INFERENCE_PRECISION_HINT=f32",
         "--model", str(model), "--shape", "pixels=[1,3,32,32]", "--pairs", "1",
         "--warmup", "0", "--out", str(out), "--quiet", "--no-plot"]
    )  # fmt: skip
    assert args.func(args) == 0
    data = json.loads((out / "compile_ab.json").read_text())
    total = next(e for e in data["endpoints"] if e["key"] == "compile_total")
    assert all(v > 0 for v in total["values"]["A"] + total["values"]["B"])
    assert all(t["result"]["rungs"][0]["capacity"] == 0 for t in data["trials"])
