"""The ladder runtime: schedules agree, compile-ahead behaves, accounting is exact, faults."""

from __future__ import annotations

import json
import mmap as mmap_module
from dataclasses import replace

import numpy as np
import pytest

from compile_ahead.commands.main import main
from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.ladder.reporting.events import RunEvents
from compile_ahead.runtime.ladder.runner import LadderRunner, run_ladder
from compile_ahead.runtime.ladder.settings.capacities import Ladder
from compile_ahead.runtime.ladder.settings.config import RunConfig
from compile_ahead.runtime.ladder.settings.faults import Faults
from compile_ahead.runtime.ladder.settings.run_protocol import greedy, teacher_forced
from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
from compile_ahead.runtime.model import kv_arena
from compile_ahead.runtime.model.kv_arena import KVArena
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import F32, reference_greedy

LADDER = Ladder.parse("16,32,64,128")


@pytest.fixture(scope="module")
def source(tiny_qwen2_dir):
    return resolve_model(str(tiny_qwen2_dir))


@pytest.fixture(scope="module")
def runs(source):
    """Every schedule on the same teacher-forced protocol across all three boundaries."""
    proto = teacher_forced(source.config.vocab_size, 8, 120)
    return {
        name: run_ladder(
            source, RunConfig(s, LADDER, proto, prefill_chunk=4, keep_logits=True, options=F32)
        )
        for name, s in SCHEDULES.items()
    }


def test_every_schedule_matches_b0(runs):
    base = runs["b0"]
    assert base.report.to_json()["stop_reason"] == "completed" and len(base.predicted) == 120
    for name, run in runs.items():
        assert run.error is None, name
        assert run.predicted == base.predicted, name
        worst = max(
            float(np.abs(a - b).max()) for a, b in zip(run.logits, base.logits, strict=True)
        )
        assert worst <= 1e-5, (name, worst)


def test_boundaries_crossed_and_recorded(runs):
    for name in ("b1", "i1", "i2", "i3"):
        bounds = runs[name].report.to_json()["boundaries"]
        assert [(b["from"], b["to"]) for b in bounds] == [(16, 32), (32, 64), (64, 128)], name
        # The window holds the steps around each boundary, with their top-1 and digest.
        window = runs[name].report.to_json()["boundary_tokens"]
        assert {w["context"] for w in window} >= {13, 14, 15, 16, 17, 18}
    assert runs["b0"].report.to_json()["boundaries"] == []
    digests = {
        w["context"]: w["logits_digest"] for w in runs["i1"].report.to_json()["boundary_tokens"]
    }
    assert digests == {
        w["context"]: w["logits_digest"] for w in runs["i2"].report.to_json()["boundary_tokens"]
    }


def test_greedy_mode_matches_transformers_across_boundaries(source, tiny_qwen2_dir):
    prompt = [7, 300, 42, 9, 512, 77]
    ref_tokens, _ = reference_greedy(tiny_qwen2_dir, prompt, 40)
    run = run_ladder(source, RunConfig(SCHEDULES["i3"], LADDER, greedy(prompt, 39), options=F32))
    # The prompt's last logits give the first token; each decode step gives the next one.
    first = ref_tokens[0]
    assert [first, *run.predicted] == ref_tokens
    assert len(run.report.to_json()["boundaries"]) == 2


def test_copy_and_reserve_accounting_is_exact(runs, source):
    cfg = source.config
    arena = {c: KVArena(cfg, c, "f32") for c in LADDER.rungs}
    sizes = {c: a.nbytes for c, a in arena.items()}
    live = 120 + 8
    committed_final = arena[128].committed_bytes(live)
    for a in arena.values():
        a.close()
    row = cfg.num_kv_heads * cfg.head_dim * 4 * 2 * cfg.num_layers  # K+V bytes per token
    for name in ("b0", "b1", "i3"):
        rep = runs[name].report.to_json()
        assert rep["kv_reserved_avg_bytes"] == sizes[128]
        assert rep["kv_reserved_peak_bytes"] == sizes[128]
        assert rep["kv_committed_peak_bytes"] == committed_final
        assert all(b["bytes_copied"] == 0 for b in rep["boundaries"])
    for name in ("i1", "i2"):
        rep = runs[name].report.to_json()
        assert [b["bytes_copied"] for b in rep["boundaries"]] == [16 * row, 32 * row, 64 * row]
        # Both allocations coexist during the last copy.
        assert rep["kv_reserved_peak_bytes"] == sizes[64] + sizes[128]
        assert sizes[16] < rep["kv_reserved_avg_bytes"] < sizes[128]
        assert rep["kv_committed_peak_bytes"] == committed_final


def test_i2_keeps_one_compile_in_flight_and_two_rungs(runs):
    for name in ("i2", "i3"):
        rep = runs[name].report.to_json()
        assert rep["compiles_in_flight_max"] == 1
        assert rep["graphs_resident_max"] <= 2
    # Eager schedules hold every rung; the prefill graph, dropped after prefill, adds one
    # when the rungs compiling during prefill are all done before it ends.
    assert runs["i1"].report.to_json()["graphs_resident_max"] in (4, 5)


class _CompileLog(RunEvents):
    def __init__(self):
        self.log: list[tuple[str, int, int]] = []

    def compile_started(self, job, capacity, kind, background, ts):
        self.log.append(("start", job, ts))

    def compile_finished(self, job, capacity, kind, ok, ts, info):
        self.log.append(("end", job, ts))


def test_i2_releases_retired_rungs_and_never_overlaps_compiles(source):
    proto = teacher_forced(source.config.vocab_size, 8, 120)
    log = _CompileLog()
    runner = LadderRunner(
        source,
        RunConfig(SCHEDULES["i2"], LADDER, proto, prefill_chunk=4, options=F32).for_model(source),
        events=log,
    )
    runner.run()
    assert list(runner.jobs.resident) == [(128, 1)]  # only the active rung is left
    open_jobs = 0
    for kind, _, _ in sorted(log.log, key=lambda e: e[2]):
        open_jobs += 1 if kind == "start" else -1
        assert open_jobs <= 1


class _Order(RunEvents):
    """Compile ends and boundary starts, in the order they happened."""

    def __init__(self):
        self.finished: dict[int, int] = {}  # capacity -> compile end
        self.boundaries: list[tuple[int, int]] = []  # (to, begin)

    def compile_finished(self, job, capacity, kind, ok, ts, info):
        self.finished[capacity] = ts

    def boundary(self, timing, job):
        self.boundaries.append((timing.record.to, timing.begin_ns))


def _paced(source, faults: Faults):
    # Emulate a device slow enough that a tiny model's compile can fit the decode runway.
    faults = replace(faults, step_delay_s=0.03)
    proto = teacher_forced(source.config.vocab_size, 2, 62)
    settings = RunConfig(
        SCHEDULES["i2"], Ladder.parse("16,32,64"), proto, faults=faults, options=F32
    )
    order = _Order()
    return run_ladder(source, settings, order).report.to_json(), order


@pytest.mark.slow
def test_a_boundary_waits_exactly_when_its_compile_ends_after_it(source):
    for faults in (Faults(), Faults(compile_delay_s=1.0)):
        report, order = _paced(source, faults)
        assert len(report["boundaries"]) == len(order.boundaries) == 2
        for b, (to, begin) in zip(report["boundaries"], order.boundaries, strict=True):
            ended_before = order.finished[to] <= begin
            assert b["ready"] == ended_before
            assert (b["wait_s"] == 0.0) == ended_before
    # A delay longer than the whole run's decode makes every successor late.
    _, order = _paced(source, Faults(compile_delay_s=3.0))
    assert all(order.finished[to] > begin for to, begin in order.boundaries)


def test_background_failure_is_retried_in_the_foreground(source):
    proto = teacher_forced(source.config.vocab_size, 8, 120)
    faults = Faults(fail_compiles={64: 1})
    run = run_ladder(source, RunConfig(SCHEDULES["i2"], LADDER, proto, faults=faults, options=F32))
    assert run.error is None and run.report.to_json()["stop_reason"] == "completed"
    bad = next(b for b in run.report.to_json()["boundaries"] if b["to"] == 64)
    assert "injected compile failure" in bad["compile_error"] and bad["retried"]


def test_second_failure_stops_cleanly_with_report(source, tmp_path, capsys):
    report = tmp_path / "run.json"
    code = main(
        [
            "run",
            "--model",
            "tiny",
            "--ladder",
            "16,32,64,128",
            "--prompt-len",
            "8",
            "--schedule",
            "i2",
            "--inject-compile-failure",
            "64:2",
            "--no-progress",
            "--report",
            str(report),
        ]
    )
    assert code == 2
    assert "failed in the background" in capsys.readouterr().err
    assert not report.exists()  # a failed run writes beside the requested path, never over it
    data = json.loads(report.with_name("run.failed.json").read_text())
    assert data["stop_reason"].startswith("error:")
    assert data["tokens_decoded"] == 24  # everything up to the failed boundary is kept
    assert "retry_error" in data["boundaries"][-1]


def test_interrupt_writes_the_report_of_what_ran(tmp_path, monkeypatch):
    from compile_ahead.runtime.ladder.reporting import progress

    def interrupt_at_50(self, token_index, capacity, begin, end):
        if token_index == 50:
            raise KeyboardInterrupt

    monkeypatch.setattr(progress.ProgressBar, "step", interrupt_at_50)
    report = tmp_path / "run.json"
    report.write_text('{"previous": "good report"}')
    code = main(
        [
            "run",
            "--model",
            "tiny",
            "--ladder",
            "tiny",
            "--prompt-len",
            "8",
            "--schedule",
            "i3",
            "--no-progress",
            "--report",
            str(report),
        ]
    )
    assert code == 130
    assert report.read_text() == '{"previous": "good report"}'  # never replaced by it
    data = json.loads((tmp_path / "run.failed.json").read_text())
    assert data["stop_reason"] == "interrupted" and data["tokens_decoded"] == 51


def test_out_of_memory_on_grow_is_a_clear_error(source, monkeypatch):
    real_mmap = mmap_module.mmap
    limit = KVArena(source.config, 32, "f32").nbytes

    def refuse_large(fileno, length, *args, **kwargs):
        if length > limit:
            raise OSError(12, "Cannot allocate memory")
        return real_mmap(fileno, length, *args, **kwargs)

    monkeypatch.setattr(kv_arena.mmap, "mmap", refuse_large)
    proto = teacher_forced(source.config.vocab_size, 8, 120)
    run = run_ladder(source, RunConfig(SCHEDULES["i1"], LADDER, proto, options=F32))
    assert isinstance(run.error, CompileAheadError)
    assert "out of memory reserving" in str(run.error) and "capacity 64" in str(run.error)
    assert run.report.to_json()["tokens_decoded"] == 24 and run.report.to_json()[
        "stop_reason"
    ].startswith("error:")


def test_top_rung_ends_generation_with_a_reason(source):
    proto = teacher_forced(source.config.vocab_size, 8, 200)
    run = run_ladder(source, RunConfig(SCHEDULES["i3"], LADDER, proto, options=F32))
    assert run.report.to_json()["stop_reason"] == "top rung capacity 128 reached"
    assert (
        run.report.to_json()["tokens_decoded"] == 120
        and run.report.to_json()["context_final"] == 128
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("32,16", "strictly increasing"),
        ("16,16", "strictly increasing"),
        ("0,16", "not positive"),
        ("-16,32", "not positive"),
        ("16,40", "not a multiple of 16"),
        ("16,abc", "comma-separated integers"),
        ("", "no rungs"),
    ],
)
def test_bad_ladders(text, message):
    with pytest.raises(CompileAheadError, match=message):
        Ladder.parse(text)


def test_prompt_must_fit_the_top_rung(source):
    proto = teacher_forced(source.config.vocab_size, 128, 4)
    with pytest.raises(CompileAheadError, match="does not fit the top rung"):
        LadderRunner(
            source, RunConfig(SCHEDULES["i2"], LADDER, proto, options=F32).for_model(source)
        )


def test_run_cli_rejects_bad_input(capsys):
    assert main(["run", "--model", "tiny", "--ladder", "32,16"]) == 2
    assert "strictly increasing" in capsys.readouterr().err
    assert main(["run", "--model", "tiny", "--ladder", "tiny", "--prompt-len", "128"]) == 2
    assert "--prompt-len 128 must be in 1..127" in capsys.readouterr().err
    argv = ["run", "--model", "tiny", "--ladder", "tiny", "--prompt-len", "8"]
    assert main([*argv, "--inject-compile-failure", "x"]) == 2
    assert "CAPACITY[:COUNT]" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--model", "tiny", "--schedule", "i9"])
