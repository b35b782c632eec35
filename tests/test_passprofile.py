"""The OV_ENABLE_PROFILE_PASS parser: nesting from manager bounds, truncated files, placement."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from compile_ahead.profiling.session import passprofile
from compile_ahead.profiling.session.passprofile import (
    ClockPair,
    parse_file,
    parse_lines,
    parse_text,
)

# Outer manager "Plugin" runs pass "RunInner" which runs manager "Inner" (two passes); records
# are written as things finish, so the inner manager's lines come before RunInner's.
NESTED = """\
t;First;Plugin;30;0
t;A;Inner;100;1
t;B;Inner;200;0
m;Inner;400;1
m_start;Inner;1000050
m_end;Inner;1000450
t;RunInner;Plugin;450;1
t;Last;Plugin;100;0
m;Plugin;700;1
m_start;Plugin;1000000
m_end;Plugin;1000700
t;Alone;Solo;5;0
m;Solo;10;0
m_start;Solo;2000000
m_end;Solo;2000010
"""


def test_nested_managers_and_their_passes():
    profile = parse_text(NESTED)
    assert profile.problems == []
    inner, plugin, solo = profile.managers
    assert (inner.name, inner.parent, inner.depth) == ("Inner", 1, 1)
    assert (plugin.parent, plugin.depth, solo.parent) == (None, 0, None)
    assert [p.name for p in plugin.passes] == ["First", "RunInner", "Last"]
    assert [p.name for p in inner.passes] == ["A", "B"]
    assert inner.unaccounted_ns == 100
    # Outermost managers only: the inner one is already inside Plugin's 700 ns.
    assert profile.total_ns() == 700 + 10
    assert profile.pass_totals()["RunInner"] == (1, 450)
    # Passes are laid end to end from their manager's start.
    assert [p.start_ns for p in plugin.passes] == [1000000, 1000030, 1000480]


def test_same_manager_name_twice_keeps_runs_apart():
    text = NESTED.replace("Solo", "Inner")
    profile = parse_text(text)
    inners = [m for m in profile.managers if m.name == "Inner"]
    assert [len(m.passes) for m in inners] == [2, 1]
    assert [m.start_ns for m in inners] == [1000050, 2000000]


def test_truncated_file_keeps_complete_records():
    cut = NESTED.index("m;Plugin") + 4  # inside the "m;Plugin" line
    profile = parse_text(NESTED[:cut])
    assert profile.problems[0].startswith("truncated: last record cut short")
    assert [m.name for m in profile.managers] == ["Inner"]
    # Plugin's passes finished but its manager record was lost with the cut.
    assert [p.name for p in profile.orphan_passes] == ["First", "RunInner", "Last"]
    assert profile.managers[0].end_ns == 1000450


def test_malformed_line_is_reported_not_fatal():
    profile = parse_text("x;what\n" + NESTED)
    assert profile.problems == ["line 1: unknown record 'x' with 2 fields: 'x;what'"]
    assert len(profile.managers) == 3


def test_byte_range_of_one_compile_and_clock_shift(tmp_path):
    path = tmp_path / "passes.txt"
    first = "t;A;M;5;1\nm;M;10;1\nm_start;M;100\nm_end;M;110\n"
    path.write_text(first + NESTED)
    only_second = parse_file(path, start_byte=len(first.encode()))
    assert [m.name for m in only_second.managers] == ["Inner", "Plugin", "Solo"]
    pair = ClockPair(epoch_ns=1_000_000, monotonic_ns=50)
    shifted = only_second.shifted(pair.offset_ns)
    assert shifted.managers[1].start_ns == 50
    assert shifted.managers[1].passes[1].start_ns == 80
    sampled = ClockPair.sample()
    assert sampled.epoch_ns > 10**18 and sampled.monotonic_ns > 0


def test_self_time_leaves_out_the_nested_manager():
    profile = parse_text(NESTED)
    run_inner = profile.managers[1].passes[1]
    assert (run_inner.name, run_inner.nested_ns, run_inner.self_ns) == ("RunInner", 400, 50)
    selves = profile.self_times()
    assert selves[("Plugin", "RunInner")] == (1, 50)
    assert selves[("Plugin", "First")] == (1, 30)
    assert selves[("Inner", "A")] == (1, 100)
    # every nanosecond is counted once: passes' self times plus managers' own overhead
    overhead = sum(m.unaccounted_ns for m in profile.managers)
    assert sum(ns for _, ns in selves.values()) + overhead == profile.total_ns()


def test_nested_manager_goes_to_the_pass_written_after_it():
    # Outer runs P1, then P2 which runs Inner, then P3: Inner's lines come between P1 and P2.
    text = (
        "t;P1;Outer;10;0\n"
        "t;X;Inner;60;1\n"
        "m;Inner;70;1\nm_start;Inner;1020\nm_end;Inner;1090\n"
        "t;P2;Outer;80;1\n"
        "t;P3;Outer;5;0\n"
        "m;Outer;100;1\nm_start;Outer;1000\nm_end;Outer;1100\n"
    )
    selves = parse_text(text).self_times()
    assert selves[("Outer", "P1")] == (1, 10)
    assert selves[("Outer", "P2")] == (1, 10)
    assert selves[("Outer", "P3")] == (1, 5)


def test_repeated_pass_sums_its_runs():
    text = "t;P;M;10;0\nt;P;M;15;1\nm;M;30;1\nm_start;M;0\nm_end;M;30\n"
    assert parse_text(text).self_times() == {("M", "P"): (2, 25)}


def test_summary_resolves_nesting_written_out_of_order():
    # the inner manager finished (and was written) before the outer one that encloses it
    lines = [
        "t;PassA;Inner;400;1",
        "m;Inner;500;1",
        "m_start;Inner;1200",
        "m_end;Inner;1700",
        "m;Outer;2000;1",
        "m_start;Outer;1000",
        "m_end;Outer;3000",
        "m;Later;1000;0",
        "m_start;Later;5000",
        "m_end;Later;6000",
    ]
    summary = parse_lines(lines).summary()
    assert summary["transformations_s"] == pytest.approx(3000 / 1e9)
    assert summary["pass_records"] == 1
    assert list(summary["top_managers_s"]) == ["Outer", "Later", "Inner"]
    assert summary["problems"] == []


def test_parser_needs_only_the_standard_library():
    # ab compile's trial worker loads passprofile.py by path in arms without compile_ahead
    tree = ast.parse(Path(passprofile.__file__).read_text())
    imported = {
        (node.module or "").split(".")[0] if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported - {"__future__"} <= set(sys.stdlib_module_names)
