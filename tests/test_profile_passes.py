"""profile-compile's table of the passes that took most time, and prefill graphs profiled beside
decode graphs (--graph-kind)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from cli import run_profile_compile

from compile_ahead.commands.profile_compile import main
from compile_ahead.profiling.session import passprofile
from compile_ahead.runtime.compile.settings.device_defaults import default_prefill

# "Fold" runs in two managers and twice in one of them; "Outer" runs manager "Inner" (its self
# time leaves the inner manager's 300 ns out).
RECORDS = """\
t;Fold;Inner;100;1
t;Other;Inner;200;0
m;Inner;300;1
m_start;Inner;1000010
m_end;Inner;1000310
t;Outer;Plugin;350;1
t;Fold;Plugin;40;0
t;Fold;Plugin;60;1
m;Plugin;500;1
m_start;Plugin;1000000
m_end;Plugin;1000500
"""


def test_self_time_is_summed_per_pass_across_managers():
    totals = passprofile.pass_self_totals([passprofile.parse_text(RECORDS)] * 2)
    assert [(t.name, t.calls, t.self_ns, t.managers) for t in totals] == [
        ("Fold", 6, 400, 2),  # a tie goes by name
        ("Other", 2, 400, 1),
        ("Outer", 2, 100, 1),
    ]


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("both") / "p"
    proc = run_profile_compile(
        "--model", "tiny", "--ladder", "32,64", "--graph-kind", "both", "--prefill-chunk", "48",
        "--top", "7", "--decode-tokens", "2", "--out", out,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_prefill_graphs_beside_decode_graphs(both):
    out, proc = both
    report = json.loads((out / "report.json").read_text())
    assert report["graph_kinds"] == ["decode", "prefill"]
    rows = [(r["capacity"], r["kind"], r["chunk"], r["prefill_shape"]) for r in report["rungs"]]
    # The chunk is capped at the rung; the shape is the one a CPU run compiles for a long prompt.
    shape = default_prefill("CPU").shape
    assert rows == [
        (32, "decode", 1, None),
        (32, "prefill", 32, shape),
        (64, "decode", 1, None),
        (64, "prefill", 48, shape),
    ]
    printed = re.findall(r"^ +(\d+) +(decode|prefill L=\d+) ", proc.stdout, re.MULTILINE)
    assert printed == [
        ("32", "decode"),
        ("32", "prefill L=32"),
        ("64", "decode"),
        ("64", "prefill L=48"),
    ]
    assert "prefill C=64 L=48" in proc.stderr  # the progress line
    trace = (out / "trace.pftrace").read_bytes()
    assert f"compile prefill C=64 L=48 {shape}".encode() in trace and b"compile C=64" in trace
    # Decode steps are timed on decode graphs only.
    assert [d["capacity"] for d in report["decode"]] == [32, 64]


def test_top_passes_table_sorted_and_consistent_with_passes_txt(both):
    out, proc = both
    report = json.loads((out / "report.json").read_text())
    top = report["top_passes"]
    rows = top["rows"]
    assert top["top"] == 7 and len(rows) == 7
    assert [r["self_ns"] for r in rows] == sorted((r["self_ns"] for r in rows), reverse=True)
    # The same sums from passes.txt, parsed whole (no schedule ran: it holds exactly the
    # profiled compiles).
    whole = passprofile.pass_self_totals([passprofile.parse_file(out / "passes.txt")])
    assert [t.to_json() for t in whole[:7]] == rows
    assert top["passes"] == len(whole)
    assert top["self_s_all_passes"] == pytest.approx(sum(t.self_ns for t in whole) / 1e9)
    # Printed: a heading, then the rows in the same order with their call counts.
    lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("passes that took most"))
    assert "top 7 of" in lines[start] and "4 compile(s)" in lines[start]
    printed = [line.split() for line in lines[start + 2 : start + 9]]
    assert [(p[3], int(p[1])) for p in printed] == [(r["pass"], r["calls"]) for r in rows]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--top", "0"], "--top must be >= 1"),
        (["--graph-kind", "prefill", "--prefill-chunk", "1"], "--prefill-chunk must be >= 2"),
        (["--prefill-chunk", "64"], "--prefill-chunk is for --graph-kind prefill or both"),
        (["--graph-kind", "both", "--graph", "split"], "a prefill graph exists only whole"),
    ],
)
def test_bad_arguments_are_refused_before_any_work(args, message, capsys, tmp_path):
    assert main([*args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("profile-compile: error: ") and message in err
    assert not (tmp_path / "o").exists()


def test_no_pass_profile_no_table(tmp_path):
    out = tmp_path / "o"
    proc = run_profile_compile(
        "--model", "tiny", "--ladder", "16", "--no-pass-profile", "--out", out
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "passes that took most" not in proc.stdout
    assert json.loads((out / "report.json").read_text())["top_passes"] is None


def test_an_ir_profile_keeps_stdout_to_its_own_lines(tmp_path):
    """Reading an IR and converting it run OpenVINO pass managers before any profiled
    compile; with pass profiling on they printed "PassManager started:" to stdout. Only the
    profiled compiles profile passes: their managers are in passes.txt, nothing on stdout."""
    from toy_decoder import toy_decoder_ir

    toy_decoder_ir(tmp_path / "ir")
    (tmp_path / "ir" / "config.json").write_text(json.dumps({"max_position_embeddings": 64}))
    out = tmp_path / "o"
    proc = run_profile_compile("--model", tmp_path / "ir", "--ladder", "16,32", "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("model: "), proc.stdout[:500]
    assert passprofile.BANNER not in proc.stdout
    profile = passprofile.parse_file(out / "passes.txt")
    assert profile.managers and not profile.problems
