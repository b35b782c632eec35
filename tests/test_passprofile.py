"""The OV_ENABLE_PROFILE_PASS parser: nesting from manager bounds, truncated files, placement."""

from __future__ import annotations

from compile_ahead.profiling.passprofile import ClockPair, parse_file, parse_text

# Outer manager "Plugin" runs pass "RunInner" which runs manager "Inner" (two passes); records
# are written as things finish, so the inner manager's lines come first.
NESTED = """\
t;A;Inner;100;1
t;B;Inner;200;0
m;Inner;400;1
m_start;Inner;1000050
m_end;Inner;1000450
t;First;Plugin;30;0
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
