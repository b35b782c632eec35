"""A ladder run's trace: valid by our validator and by Perfetto's own trace processor."""

from __future__ import annotations

import pytest
from trace_processor import NodeTraceProcessor, unavailable_reason

from compile_ahead.commands.main import main
from compile_ahead.profiling.perfetto.validate import validate_trace

RUN = ["run", "--model", "tiny", "--ladder", "tiny", "--prompt-len", "8", "--no-progress"]


@pytest.mark.parametrize("schedule", ["b0", "i1", "i2", "i3"])
def test_run_trace_is_valid(schedule, tmp_path):
    trace = tmp_path / "run.pftrace"
    assert main([*RUN, "--schedule", schedule, "--trace", str(trace)]) == 0
    report = validate_trace(trace)
    assert report.ok, report.summary()
    assert report.slices >= 120  # a slice per decode step at least


@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_trace_processor_sees_the_overlay(tmp_path):
    trace = tmp_path / "run.pftrace"
    assert (
        main(
            [
                *RUN,
                "--schedule",
                "i2",
                "--graph",
                "split",
                "--trace",
                str(trace),
                "--steps-per-slice",
                "4",
            ]
        )
        == 0
    )
    with NodeTraceProcessor.open(trace) as tp:
        assert tp.error_stats() == []
        names = [r["name"] for r in tp.rows("select name from slice order by ts")]
        decode_slices = [n for n in names if n.startswith("decode")]
        assert len(decode_slices) == 120 // 4
        assert [n for n in names if n.startswith("switch")] == [
            "switch 16->32",
            "switch 32->64",
            "switch 64->128",
        ]
        assert names.count("KV migration") == 3
        compiles = [n for n in names if n.startswith("compile ")]
        assert compiles[0] == "compile weights C=0"
        assert compiles[1:] == [f"compile attention C={c}" for c in (16, 32, 64, 128)]
        # Each rung's compile flows into the slice that consumes it (prefill or a switch).
        assert tp.scalar("select count(*) from flow") == 4
        tracks = {r["name"] for r in tp.rows("select name from counter_track")}
        assert {
            "KV reserved bytes",
            "KV committed bytes",
            "Process RSS",
            "Compiled graphs resident",
            "Tokens/s",
        } <= tracks
        jobs = tp.scalar("select count(*) from track where name like 'compile job%'")
        assert jobs == 5


def test_a_step_cut_short_is_never_written_again(tmp_path, monkeypatch):
    """A signal between a decode step's slice and its tokens/s sample (the run's events are
    cut there only if something raises) must not leave the step to be written again when the
    trace closes, back in time on the device track: the trace stays valid."""
    from compile_ahead.profiling.perfetto.writer import TraceWriter
    from compile_ahead.profiling.traces.ladder_run import TraceRunEvents

    writer = TraceWriter(tmp_path / "t.pftrace")
    events = TraceRunEvents(writer, "CPU")
    events.step(0, 16, 1_000, 51_000)
    counter = TraceWriter.counter

    def cut(*args, **kwargs):
        monkeypatch.setattr(TraceWriter, "counter", counter)
        raise KeyboardInterrupt

    monkeypatch.setattr(TraceWriter, "counter", cut)
    with pytest.raises(KeyboardInterrupt):
        events.step(1, 16, 52_000, 103_000)
    events.close()
    published = writer.close()
    assert validate_trace(published).ok
    if unavailable_reason() is None:
        with NodeTraceProcessor.open(published) as tp:
            assert tp.error_stats() == []
            assert tp.scalar("select count(*) from slice where name = 'decode'") == 2


def test_the_first_rung_is_marked_as_decoded_from_the_start(tmp_path):
    """The first rung's compile flow, which no switch consumes, lands on a marker that says
    it was decoded on from the start, not "never used"."""
    if unavailable_reason() is not None:
        pytest.skip(str(unavailable_reason()))
    trace = tmp_path / "run.pftrace"
    argv = ["run", "--model", "tiny", "--schedule", "i2", "--ladder", "16,32,64"]
    argv += ["--prompt-len", "8", "--decode-tokens", "12", "--no-progress", "--trace", str(trace)]
    assert main(argv) == 0
    with NodeTraceProcessor.open(trace) as tp:
        names = [r["name"] for r in tp.rows("select name from slice where name like 'C=%'")]
    assert "C=16 decoded from the start" in names and "C=16 never used" not in names, names
    # A successor compiled but not reached before the run ended is the one never used.
    assert all(n == "C=16 decoded from the start" or n.endswith("never used") for n in names)
