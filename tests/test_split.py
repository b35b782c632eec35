"""Split graphs: weight parts once, one attention core per rung, the same math as whole."""

from __future__ import annotations

import numpy as np
import pytest

from compile_ahead.commands.main import main
from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.graphs import split as split_graphs
from compile_ahead.runtime.ladder.reporting.events import RunEvents
from compile_ahead.runtime.ladder.runner import LadderRunner, run_ladder
from compile_ahead.runtime.ladder.settings.capacities import Ladder
from compile_ahead.runtime.ladder.settings.config import RunConfig
from compile_ahead.runtime.ladder.settings.run_protocol import teacher_forced
from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import F32

LADDER = Ladder.parse("16,32,64,128")


@pytest.fixture(scope="module")
def source(tiny_llama_dir):
    return resolve_model(str(tiny_llama_dir))


@pytest.fixture(scope="module")
def proto(source):
    return teacher_forced(source.config.vocab_size, 8, 120)


@pytest.fixture(scope="module")
def whole(source, proto):
    return run_ladder(
        source, RunConfig(SCHEDULES["b0"], LADDER, proto, keep_logits=True, options=F32)
    )


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_split_matches_whole_for_every_schedule(source, proto, whole, schedule):
    settings = RunConfig(
        SCHEDULES[schedule], LADDER, proto, keep_logits=True, graph="split", options=F32
    )
    run = run_ladder(source, settings)
    assert run.error is None
    assert run.predicted == whole.predicted
    worst = max(float(np.abs(a - b).max()) for a, b in zip(run.logits, whole.logits, strict=True))
    assert worst <= 1e-5
    assert run.report.to_json()["weight_copies_resident_max"] == 1
    assert run.report.to_json()["graph"] == "split"


class _Compiles(RunEvents):
    def __init__(self):
        self.started: list[tuple[str, int, int]] = []
        self.first_step: int | None = None

    def compile_started(self, job, capacity, kind, background, ts):
        self.started.append((kind, capacity, ts))

    def step(self, token_index, capacity, begin, end):
        if self.first_step is None:
            self.first_step = begin


def test_successor_compiles_never_touch_the_weight_part(source, proto, monkeypatch):
    built = []
    real = split_graphs.build_weight_part
    monkeypatch.setattr(
        split_graphs, "build_weight_part", lambda *a, **k: built.append(a[2]) or real(*a, **k)
    )
    log = _Compiles()
    settings = RunConfig(SCHEDULES["i2"], LADDER, proto, graph="split", options=F32)
    runner = LadderRunner(source, settings.for_model(source), events=log)
    report = runner.run().report.to_json()
    # The weight parts were built once each, before decoding started.
    assert sorted(built) == list(range(source.config.num_layers + 1))
    kinds = [k for k, _, _ in log.started]
    assert kinds.count("weights") == 1
    assert kinds[1:] == ["attention"] * len(LADDER.rungs)
    weights_ts = next(ts for k, _, ts in log.started if k == "weights")
    assert weights_ts < log.first_step
    assert report["weights_compile_s"] > 0


def test_split_refuses_a_prefill_graph(source, proto):
    settings = RunConfig(
        SCHEDULES["i2"], LADDER, proto, prefill_chunk=16, graph="split", options=F32
    )
    with pytest.raises(CompileAheadError, match="not available with --graph split"):
        LadderRunner(source, settings.for_model(source))


def test_run_cli_graph_flag(capsys):
    argv = ["run", "--model", "tiny", "--ladder", "tiny", "--prompt-len", "8", "--no-progress"]
    assert main([*argv, "--graph", "split", "--schedule", "i3"]) == 0
    assert "split graphs" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([*argv, "--graph", "halves"])


def test_graph_default_and_override(tmp_path):
    import json

    from compile_ahead.runtime.compile.settings.device_defaults import default_graph

    # measured: see runtime/compile/settings/device_defaults.py
    assert default_graph("CPU") == "whole"
    assert default_graph("NPU") == "whole"
    argv = ["run", "--model", "tiny", "--ladder", "tiny", "--prompt-len", "8", "--no-progress"]
    assert main([*argv, "--report", str(tmp_path / "a.json")]) == 0
    assert json.loads((tmp_path / "a.json").read_text())["graph"] == "whole"
    assert main([*argv, "--graph", "split", "--report", str(tmp_path / "b.json")]) == 0
    assert json.loads((tmp_path / "b.json").read_text())["graph"] == "split"
