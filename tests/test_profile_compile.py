"""profile-compile end to end on the tiny preset, checked by the trace processor."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli import run_profile_compile
from foreign_models import onnx_model
from trace_processor import NodeTraceProcessor, unavailable_reason

from compile_ahead.commands.profile_compile import main
from compile_ahead.profiling.perfetto.validate import validate_trace
from compile_ahead.profiling.traces.pyspy import find_pyspy
from conftest import earlier_output

needs_tp = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ladder", "1024,abc"], "comma-separated integers"),
        (["--ladder", "2048,1024"], "strictly increasing"),
        (["--ladder", "0,1024"], "not positive"),
        (["--ladder", "1000,2048"], "not a multiple of 16"),
        (["--ladder", ","], "empty"),
        (["--decode-tokens", "-1"], "--decode-tokens must be >= 0"),
        (["--steps-per-slice", "0"], "--steps-per-slice must be >= 1"),
        (
            ["--schedule", "i2", "--ladder", "64,128", "--prompt-len", "128"],
            "--prompt-len 128 must",
        ),
    ],
)
def test_bad_arguments_are_one_line_errors(args, message, capsys, tmp_path):
    assert main([*args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("profile-compile: error: ") and message in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()  # nothing started, nothing written


def test_out_must_not_be_a_file(capsys, tmp_path):
    target = tmp_path / "file"
    target.write_text("keep me")
    assert main(["--out", str(target)]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert target.read_text() == "keep me"


def test_unknown_schedule_is_rejected(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--schedule", "one-ahead"])
    assert exc.value.code == 2
    assert "invalid choice: 'one-ahead'" in capsys.readouterr().err


def test_unknown_device_is_refused_before_any_work(tmp_path):
    out = earlier_output(tmp_path / "o", {"report.json": "keep me"})
    proc = run_cli("--model", "tiny", "--ladder", "16", "--device", "NOSUCH", "--out", str(out))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("profile-compile: error: --device")
    assert (out / "report.json").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]  # no staging, nothing failed


def test_failed_profile_is_one_line_and_leaves_the_earlier_profile_alone(tmp_path):
    out = earlier_output(tmp_path / "o", {"report.json": "keep me"})
    # A 3x3 convolution over a 1x1 image: the profile starts, then its model fails.
    model = onnx_model(tmp_path / "m.onnx")
    proc = run_cli("--model", str(model), "--shape", "pixels=[1,3,1,1]", "--out", str(out))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("profile-compile: error: ")
    assert (out / "report.json").read_text() == "keep me"
    failed = json.loads((tmp_path / "o.failed" / "report.json").read_text())
    assert failed["error"].startswith("--shape: ")  # what read_static said of the model
    assert validate_trace(tmp_path / "o.failed" / "trace.pftrace").ok
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o.")]  # no staging left


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return run_profile_compile(*args, timeout=240)


def test_unknown_model_is_a_one_line_error_and_keeps_earlier_results(tmp_path):
    earlier_output(tmp_path, {"report.json": "{}", "passes.txt": "t;A;M;1;0\n"})
    proc = run_cli("--model", "no-such-model", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        line for line in proc.stderr.strip().splitlines() if line.startswith("profile-compile:")
    ]
    assert "no-such-model: no such directory, cached hub id or preset" in proc.stderr
    assert (tmp_path / "report.json").read_text() == "{}"
    assert (tmp_path / "passes.txt").read_text() == "t;A;M;1;0\n"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("profile")
    proc = run_cli(
        "--model",
        "tiny",
        "--ladder",
        "128,256",
        "--decode-tokens",
        "5",
        "--steps-per-slice",
        "2",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_table_report_and_valid_trace(tiny_run):
    out, proc = tiny_run
    assert "tiny [SYNTHETIC weights" in proc.stdout
    assert "PassManager started" not in proc.stdout
    table = [
        line.split()
        for line in proc.stdout.splitlines()
        if line.strip().startswith(("128 ", "256 "))
    ]
    assert [row[0] for row in table] == ["128", "256"]
    assert "compile-ahead trace open" in proc.stdout  # how to look at the trace
    report = json.loads((out / "report.json").read_text())
    assert report["model"]["synthetic"] is True
    assert [r["capacity"] for r in report["rungs"]] == [128, 256]
    for rung in report["rungs"]:
        ph = rung["phases_ns"]
        assert rung["compile_window_from_itt"] is True
        assert ph["compile_model"] <= ph["total"]
        assert 0 < ph["transformations"] < ph["compile_model"]
        assert rung["pass_managers"] > 0 and rung["pass_profile_problems"] == []
        assert rung["rss_peak_bytes"] >= rung["rss_before_bytes"]
    assert report["trace"]["valid"] is True
    assert report["depsort_counters"]["values"] is None
    assert (out / "passes.txt").stat().st_size > 0
    assert (
        not (out / "passes.txt.partial").exists() and not (out / "trace.pftrace.partial").exists()
    )
    assert validate_trace(out / "trace.pftrace").ok


@needs_tp
def test_trace_processor_sees_jobs_phases_decode_and_flows(tiny_run):
    out, _ = tiny_run
    with NodeTraceProcessor.open(out / "trace.pftrace") as tp:
        assert tp.error_stats() == []
        jobs = tp.rows(
            "select s.name, t.name as track, s.depth from slice s join track t "
            "on s.track_id = t.id where t.name like 'compile job %' and s.depth = 0 order by s.ts"
        )
        assert [(j["name"], j["track"]) for j in jobs] == [
            ("compile C=128", "compile job 1: C=128"),
            ("compile C=256", "compile job 2: C=256"),
        ]
        nested = tp.rows(
            "select p.name as parent, s.name from slice s join slice p on s.parent_id = p.id "
            "where s.name in ('build graph', 'compile_model') order by s.ts"
        )
        assert nested == [
            {"parent": "compile C=128", "name": "build graph"},
            {"parent": "compile C=128", "name": "compile_model"},
            {"parent": "compile C=256", "name": "build graph"},
            {"parent": "compile C=256", "name": "compile_model"},
        ]
        # ITT phases on per-thread child tracks of each job, inside the job's time.
        assert (
            tp.scalar(
                "select count(*) from slice s join track t on s.track_id = t.id "
                "join slice j on j.name = 'compile C=128' "
                "where s.name = 'Compile model' and s.ts >= j.ts and s.ts + s.dur <= j.ts + j.dur"
            )
            == 1
        )
        # 5 steps per rung in slices of 2: 2 + 2 + 1.
        decode = tp.rows(
            "select count(*) as n from slice s join track t on s.track_id = t.id "
            "where t.name = 'CPU decode' and s.name like 'decode%'"
        )
        assert decode == [{"n": 6}]
        flows = tp.rows(
            "select so.name as src, si.name as dst from flow f join slice so on "
            "f.slice_out = so.id join slice si on f.slice_in = si.id order by si.ts"
        )
        assert flows == [
            {"src": "compile C=128", "dst": "switch to C=128"},
            {"src": "compile C=256", "dst": "switch to C=256"},
        ]
        counter_tracks = {
            r["name"]
            for r in tp.rows(
                "select distinct t.name from counter c join track t on c.track_id = t.id"
            )
        }
        assert {"Process RSS", "Compiled graphs resident", "Tokens/s"} <= counter_tracks
        assert tp.scalar("select count(*) from slice where name like 'manager %'") > 0
        # The trace processor and our validator count the same things.
        ours = validate_trace(out / "trace.pftrace")
        # (the trace processor keeps instants, e.g. the model label, as zero-length slices)
        assert tp.scalar("select count(*) from slice") == ours.slices + ours.instants
        assert tp.scalar("select count(*) from counter") == ours.counter_values
        assert tp.scalar("select count(*) from flow") == ours.flows == 2


@pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed for this Python")
@needs_tp
def test_py_spy_samples_are_aligned_to_the_trace_clock(tmp_path):
    proc = run_cli("--model", "tiny", "--ladder", "128", "--py-spy", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    pyspy = report["pyspy"]
    # The tool's stated accuracy: about a period plus half the marker-edge spread; edges of
    # sampled frames are late by up to another period. Allow 3 periods (at least 50 ms) on top
    # of the spread. A wrong alignment would be off by the process lifetime (seconds).
    slack = max(3 * 1e9 / pyspy["rate_hz"], 50e6) + abs(pyspy["spread_ns"]) / 2
    with NodeTraceProcessor.open(tmp_path / "trace.pftrace") as tp:
        assert tp.error_stats() == []
        assert tp.scalar("select count(*) from track where name = 'py-spy samples'") == 1
        assert tp.scalar("select count(*) from slice where name = 'clock_marker'") >= 1
        # OpenVINO's own "Compile model" region (ITT, C++ clock) lies inside the sampled
        # Python frames of compile_step that called it.
        region = tp.rows("select ts, ts + dur as e from slice where name = 'Compile model'")[0]
        sampled = tp.rows(
            "select min(ts) as b, max(ts + dur) as e from slice where name = 'compile_step'"
        )[0]
        assert sampled["b"] <= region["ts"] + slack
        assert sampled["e"] >= region["e"] - slack


@needs_tp
def test_schedule_overlay_on_the_compile_profile(tmp_path):
    proc = run_cli(
        "--model",
        "tiny",
        "--ladder",
        "16,32,64",
        "--schedule",
        "i2",
        "--graph",
        "split",
        "--prompt-len",
        "8",
        "--steps-per-slice",
        "4",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    run = report["run"]
    assert run["schedule"] == "i2" and run["graph"] == "split" and run["synthetic"] is True
    assert run["tokens_decoded"] == 64 - 8 and [b["to"] for b in run["boundaries"]] == [32, 64]
    assert report["trace"]["valid"] is True
    with NodeTraceProcessor.open(tmp_path / "trace.pftrace") as tp:
        assert tp.error_stats() == []
        names = [r["name"] for r in tp.rows("select name from slice order by ts")]
        # The profile's rung compiles, then the run: weight parts once, one core per rung.
        run_compiles = [
            n
            for n in names
            if n.startswith("compile ") and " C=" in n and n.split()[1] in ("weights", "attention")
        ]
        assert run_compiles == ["compile weights C=0"] + [
            f"compile attention C={c}" for c in (16, 32, 64)
        ]
        assert [n for n in names if n.startswith("switch ")] == ["switch 16->32", "switch 32->64"]
        assert tp.scalar("select count(*) from flow") == 3


TRACE_FAILS_ON_SECOND_RUNG = """
import sys
from compile_ahead.commands import profile_compile
from compile_ahead.profiling.traces import compile_jobs as trace_compile
from compile_ahead.profiling.perfetto.writer import TraceWriteError

real = trace_compile.end_job
calls = []

def end_job(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
        raise TraceWriteError("time goes back on 'Process RSS' (injected)")
    return real(*args, **kwargs)

trace_compile.end_job = end_job  # looked up when each rung is profiled
sys.exit(profile_compile.main(sys.argv[1:]))
"""


def test_a_trace_error_keeps_the_measured_rungs_in_the_report(tmp_path):
    out = tmp_path / "o"
    proc = subprocess.run(
        [sys.executable, "-c", TRACE_FAILS_ON_SECOND_RUNG, "--model", "tiny", "--ladder",
         "16,32,64", "--out", str(out)],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "the trace could not be written" in proc.stderr.strip().splitlines()[-1]
    assert "compile_model s" in proc.stdout  # the table of what was measured
    report = json.loads((tmp_path / "o.failed" / "report.json").read_text())
    assert [r["capacity"] for r in report["rungs"]] == [16]
    assert "time goes back" in report["error"]
    assert validate_trace(tmp_path / "o.failed" / "trace.pftrace").ok
