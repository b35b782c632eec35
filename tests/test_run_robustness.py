"""Nothing lost, nothing hung: outputs, interrupts, failures, resident counts, the KV store's
ownership of its length, and runs that end with a compile still in flight."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from pathlib import Path

import numpy as np
import pytest
from cli import run_cli
from trace_processor import NodeTraceProcessor, unavailable_reason

from compile_ahead.commands.main import main
from compile_ahead.profiling.perfetto.validate import validate_trace
from compile_ahead.profiling.perfetto.writer import PROCESS_RSS_BYTES, TraceWriter
from compile_ahead.profiling.session.rss import RssSampler
from compile_ahead.runtime.graphs.step import StepOutput
from compile_ahead.runtime.ladder import rung_policy
from compile_ahead.runtime.ladder.kv_store import GrowingKV
from compile_ahead.runtime.ladder.runner import LadderRunner, run_ladder
from compile_ahead.runtime.ladder.settings.capacities import Ladder
from compile_ahead.runtime.ladder.settings.config import RunConfig
from compile_ahead.runtime.ladder.settings.faults import Faults
from compile_ahead.runtime.ladder.settings.run_protocol import teacher_forced
from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import F32, random_qwen2_checkpoint, small_tmpfs, start_decoding_run

TINY = ["run", "--model", "tiny", "--ladder", "tiny", "--no-progress"]
needs_tp = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


@pytest.fixture(scope="module")
def source():
    return resolve_model("tiny")


# -- outputs -------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["directory", "under-a-file", "read-only"])
def test_bad_report_path_is_refused_before_any_work(where, tmp_path, capsys):
    with contextlib.ExitStack() as stack:
        if where == "directory":
            report = tmp_path
        elif where == "under-a-file":
            (tmp_path / "f").write_text("x")
            report = tmp_path / "f" / "r.json"
        elif os.geteuid() == 0:  # root writes into a mode-0500 directory: a read-only mount
            report = stack.enter_context(small_tmpfs(tmp_path / "ro", mode="ro")) / "r.json"
        else:
            ro = tmp_path / "ro"
            ro.mkdir(mode=0o500)
            report = ro / "r.json"
        assert main([*TINY, "--report", str(report)]) == 2
        captured = capsys.readouterr()
        assert "--report" in captured.err and "model:" not in captured.err  # nothing ran
        if where == "read-only":
            assert f"{report.parent} is not writable" in captured.err


def test_same_file_for_report_and_trace_is_refused(tmp_path, capsys):
    out = tmp_path / "x"
    assert main([*TINY, "--report", str(out), "--trace", str(out)]) == 2
    assert "name the same file" in capsys.readouterr().err
    assert not out.exists()


def test_argument_errors_and_failed_runs_leave_a_good_trace_alone(tmp_path, capsys):
    trace = tmp_path / "t.pftrace"
    assert main([*TINY, "--decode-tokens", "20", "--trace", str(trace)]) == 0
    good = trace.read_bytes()
    assert validate_trace(trace).ok
    # An argument error touches nothing.
    assert main([*TINY, "--prompt-len", "500", "--trace", str(trace)]) == 2
    assert trace.read_bytes() == good
    # A failed run keeps what it traced beside the good trace, not over it.
    failing = [*TINY, "--schedule", "i2", "--inject-compile-failure", "64:2"]
    assert main([*failing, "--trace", str(trace)]) == 2
    assert trace.read_bytes() == good
    assert validate_trace(tmp_path / "t.failed.pftrace").ok
    assert not list(tmp_path.glob("*.partial"))


def test_two_writers_on_one_path_never_share_a_temporary_file(tmp_path):
    path = tmp_path / "t.pftrace"
    a, b = TraceWriter(path), TraceWriter(path)
    assert a.partial_path != b.partial_path
    for w in (a, b):
        w.instant(w.device_track("CPU"), "mark")
    a.close()
    b.close()
    assert validate_trace(path).ok


# -- interrupts, failures, runs that end early --------------------------------------------


def test_interrupt_during_a_boundary_wait_keeps_the_wait_and_the_summary(source, monkeypatch):
    def interrupted_take(self, capacity, length):
        raise KeyboardInterrupt

    monkeypatch.setattr(rung_policy.OneAheadPolicy, "take", interrupted_take)
    proto = teacher_forced(source.config.vocab_size, 8, 40)
    result = run_ladder(
        source, RunConfig(SCHEDULES["i2"], Ladder.parse("tiny"), proto, options=F32)
    )
    report = result.report
    assert report.stop_reason == "interrupted"
    (boundary,) = report.boundaries
    assert boundary.ready is False and boundary.wait_s is not None and boundary.compile_s is None
    assert "not crossed" in report.summary()
    assert report.foreground_compile_s >= boundary.wait_s


def test_sigterm_ends_a_run_like_ctrl_c_with_its_report(tmp_path):
    report = tmp_path / "r.json"
    argv = ["run", "--model", "tiny", "--ladder", "tiny", "--step-delay", "0.05"]
    argv += ["--report", str(report)]
    proc = start_decoding_run(argv)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    data = json.loads((tmp_path / "r.failed.json").read_text())  # never over a good report
    assert data["stop_reason"] == "interrupted" and 0 < data["tokens_decoded"] < 126
    assert not report.exists()


def test_a_run_ending_with_a_compile_in_flight_closes_its_trace_cleanly(tmp_path, capsys):
    trace = tmp_path / "t.pftrace"
    argv = [*TINY, "--schedule", "i2", "--decode-tokens", "3", "--inject-compile-delay", "2"]
    # --no-cache: a rung another test compiled would be imported, and nothing left in flight
    assert main([*argv, "--no-cache", "--trace", str(trace)]) == 0
    report = validate_trace(trace)
    assert report.ok, report.errors
    # The successor's compile job was reported abandoned, and nothing was written after close.
    assert b"abandoned" in trace.read_bytes()


def test_a_failed_first_compile_still_counts_its_foreground_time(source):
    proto = teacher_forced(source.config.vocab_size, 8, 20)
    faults = Faults(fail_compiles={16: 1})
    settings = RunConfig(SCHEDULES["i2"], Ladder.parse("tiny"), proto, faults=faults, options=F32)
    result = run_ladder(source, settings)
    assert result.error is not None and result.report.stop_reason.startswith("error:")
    assert result.report.foreground_compile_s > 0


def test_out_of_memory_reserving_the_kv_is_reported(source, monkeypatch):
    from compile_ahead.runtime.model import kv_arena

    def refuse(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(kv_arena.mmap, "mmap", refuse)
    proto = teacher_forced(source.config.vocab_size, 8, 20)
    result = run_ladder(
        source, RunConfig(SCHEDULES["b0"], Ladder.parse("tiny"), proto, options=F32)
    )
    assert "out of memory reserving" in result.report.error
    assert result.report.tokens_decoded == 0


def test_capacities_and_token_counts_are_checked_against_the_model(tmp_path, capsys):
    assert main(["run", "--model", "tiny", "--ladder", "16,67108864"]) == 2
    assert "max_position_embeddings" in capsys.readouterr().err
    assert main([*TINY, "--prefill-chunk", "100000"]) == 2
    assert "exceeds the first rung" in capsys.readouterr().err
    big = ["generate", "--model", "tiny", "--prompt-ids", "1,2", "--max-new-tokens", "100000000"]
    assert main(big) == 2
    assert "max_position_embeddings" in capsys.readouterr().err
    for flag, value in (("--inject-compile-delay", "inf"), ("--step-delay", "nan")):
        assert main([*TINY, flag, value]) == 2
        assert "finite" in capsys.readouterr().err
    assert main([*TINY, "--inject-compile-failure", "48"]) == 2
    assert "not a rung" in capsys.readouterr().err


def test_default_prompt_fits_every_named_ladder(capsys):
    for ladder in ("tiny", "scaled"):
        argv = ["run", "--model", "tiny", "--ladder", ladder, "--decode-tokens", "4"]
        assert main([*argv, "--no-progress"]) == 0
    assert "stop: completed" in capsys.readouterr().out


# -- the ladder with no fixed top -----------------------------------------------------------


def test_auto_ladder_grows_to_the_model_maximum_and_says_so(tiny_qwen2_dir, tmp_path, capsys):
    report = tmp_path / "r.json"
    argv = ["run", "--model", str(tiny_qwen2_dir), "--ladder", "auto", "--no-progress"]
    argv += ["--prompt-ids", "1,2,3", "--max-new-tokens", "100000", "--report", str(report)]
    assert main([*argv, "--inference-precision", "f32"]) == 0
    data = json.loads(report.read_text())
    assert data["ladder"] == [16, 32, 64, 128, 256, 512]  # the fixture's maximum is 512
    assert len(data["boundaries"]) == 5  # more than any fixed ladder in the README (3)
    assert "maximum context (512" in data["stop_reason"]
    assert data["context_final"] == 512
    assert data["graphs_resident_max"] <= 2


# -- resident graphs (one-ahead holds two at a boundary) -------------------------------------


@needs_tp
def test_i2_counts_both_graphs_resident_at_a_boundary(tmp_path, capsys):
    report, trace = tmp_path / "r.json", tmp_path / "t.pftrace"
    argv = [*TINY, "--schedule", "i2", "--step-delay", "0.01", "--report", str(report)]
    assert main([*argv, "--trace", str(trace)]) == 0
    assert json.loads(report.read_text())["graphs_resident_max"] == 2
    with NodeTraceProcessor.open(trace) as tp:
        top = tp.scalar(
            "select max(c.value) from counter c join counter_track t on c.track_id = t.id "
            "where t.name = 'Compiled graphs resident'"
        )
    assert top == 2


@pytest.mark.parametrize("prefill_chunk", [1, 4], ids=["prefill-on-first-rung", "prefill-graph"])
def test_a_retired_rung_graph_is_freed_at_its_boundary(source, monkeypatch, prefill_chunk):
    """i2 releases a rung's compiled graph once the context has left it; by the next boundary
    nothing refers to it any more (the run's own frames included), so its memory is back
    while the run goes on, whether the prompt was prefilled on the first rung or not."""
    import gc
    import weakref

    from compile_ahead.runtime.ladder.compile_jobs import CompileJobs

    released: list[weakref.ref] = []
    alive_at_each_release: list[list[int]] = []
    release = CompileJobs.release

    def watched(self, capacity: int, chunk: int = 1) -> None:
        rung = self.resident.get((capacity, chunk))
        release(self, capacity, chunk)
        gc.collect()
        alive_at_each_release.append([i for i, ref in enumerate(released) if ref() is not None])
        if rung is not None:
            released.append(weakref.ref(rung.step))

    monkeypatch.setattr(CompileJobs, "release", watched)
    proto = teacher_forced(source.config.vocab_size, 8, 120)  # boundaries at 16, 32 and 64
    config = RunConfig(
        SCHEDULES["i2"], Ladder.parse("tiny"), proto, options=F32, prefill_chunk=prefill_chunk
    )
    result = run_ladder(source, config)
    assert result.error is None, result.error
    # Released: the prefill graph once the first rung takes over (when there is one), then
    # the rung left at each boundary.
    assert len(released) == (3 if prefill_chunk == 1 else 4)
    assert alive_at_each_release == [[]] * len(released)


def test_rss_samples_from_many_threads_reach_the_trace_in_time_order(tmp_path):
    path = tmp_path / "rss.pftrace"
    writer = TraceWriter(path)
    track = writer.counter_track(PROCESS_RSS_BYTES)
    sampler = RssSampler(0.001, on_sample=lambda ts, v: writer.counter(track, ts, v)).start()

    def hammer():
        for _ in range(300):
            sampler.sample()

    threads = [threading.Thread(target=hammer) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sampler.stop()
    writer.close()
    report = validate_trace(path)
    assert report.ok, report.errors
    times = [ts for ts, _ in sampler.samples]
    assert times == sorted(times)


# -- the KV store owns its length -----------------------------------------------------------


def _output(cfg, rows: int, value: float) -> StepOutput:
    shape = (1, cfg.num_kv_heads, rows, cfg.head_dim)
    kv = [np.full(shape, value, np.float32) for _ in range(cfg.num_layers)]
    return StepOutput(np.zeros(4, np.float32), kv, kv)


def test_kv_store_appends_after_its_length_and_refuses_overflow(source):
    cfg = source.config
    store = GrowingKV(cfg, (16, 32), "f32", 16)
    store.sequence(0).append(_output(cfg, 4, 1.0), 3)  # only the first n rows are kept
    store.sequence(0).append(_output(cfg, 1, 2.0), 1)
    assert store.length == 4
    keys = store.arena.keys[0][0, 0, :, 0]
    assert list(keys[:5]) == [1.0, 1.0, 1.0, 2.0, 0.0]
    store.grow_to(32)
    assert store.length == 4 and list(store.arena.keys[0][0, 0, :4, 0]) == [1, 1, 1, 2]
    with pytest.raises(Exception, match="KV store full"):
        store.sequence(0).append(_output(cfg, 29, 3.0), 29)
    assert store.length == 4


def test_runner_never_sets_the_store_length_itself(source):
    proto = teacher_forced(source.config.vocab_size, 8, 30)
    runner = LadderRunner(
        source,
        RunConfig(SCHEDULES["i3"], Ladder.parse("tiny"), proto, options=F32).for_model(source),
    )
    result = runner.run()
    assert runner.store is not None
    assert runner.store.length == 8 + result.report.tokens_decoded == result.report.context_final


def test_ab_goes_through_the_one_cli(capsys, tmp_path):
    assert main(["ab", "schedule", "--model", "tiny", "--arms", "i1,zz", "--out", str(tmp_path)])
    assert "zz" in capsys.readouterr().err
    assert not list(Path(tmp_path).iterdir())


# -- resident count against memory ----------------------------------------------------------


def _run_report(model: Path, schedule: str, out: Path) -> dict:
    argv = ["run", "--model", str(model), "--schedule", schedule, "--ladder", "tiny"]
    argv += ["--inference-precision", "f32", "--no-progress", "--report", str(out)]
    argv += ["--decode-tokens", "120", "--step-delay", "0.005"]
    argv += ["--no-cache"]  # graphs compiled, never imported or exported (an export's buffer)
    proc = run_cli(*argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_resident_graphs_match_the_memory_they_hold(tmp_path):
    """Each whole graph holds its own compiled weights (f32 here, ~90 MB for this model), so
    peak RSS grows by about one graph per graph counted resident."""
    import math

    from safetensors import safe_open

    bigger = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, vocab_size=32000)
    model_dir = random_qwen2_checkpoint(tmp_path / "m", **bigger)
    with safe_open(model_dir / "model.safetensors", "np") as f:
        params = sum(math.prod(f.get_slice(name).get_shape()) for name in f.keys())  # noqa: SIM118 (not a dict)
    graph_bytes = params * 4
    reports = {s: _run_report(model_dir, s, tmp_path / f"{s}.json") for s in ("b0", "i2", "i1")}
    assert [reports[s]["graphs_resident_max"] for s in ("b0", "i2", "i1")] == [1, 2, 4]
    base = reports["b0"]["peak_rss_bytes"]
    for schedule, extra_graphs in (("i2", 1), ("i1", 3)):
        grown = reports[schedule]["peak_rss_bytes"] - base
        assert 0.6 < grown / (extra_graphs * graph_bytes) < 1.4, (schedule, grown, graph_bytes)
