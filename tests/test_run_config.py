"""The run configuration: a wrong flag fails in one place, in one line, before any model is
opened; the device's defaults it applied are named; a run takes only a settled configuration;
background compiles go through the run's placement, whose threads the interrupt layer knows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compile_ahead.commands.main import main
from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.compile import placements
from compile_ahead.runtime.compile.settings.device_defaults import (
    default_decode_compile,
    default_graph,
    default_placement,
)
from compile_ahead.runtime.compile.settings.modes import GraphMode, PlacementKind
from compile_ahead.runtime.ladder.runner import LadderRunner, run_ladder
from compile_ahead.runtime.ladder.settings.capacities import Ladder
from compile_ahead.runtime.ladder.settings.config import Prompt, RunConfig
from compile_ahead.runtime.ladder.settings.run_protocol import teacher_forced
from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import F32, one_line_error

RUN = ["run", "--ladder", "tiny", "--no-progress"]
GENERATE = ["generate", "--prompt-ids", "1,2,3"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*RUN, "--prompt-len", "200"], "--prompt-len 200 must be in 1..127"),
        ([*RUN, "--boundary-window", "-1"], "--boundary-window must be >= 0"),
        ([*RUN, "--decode-tokens", "0"], "--decode-tokens must be positive"),
        ([*RUN, "--inject-worker-fault", "32:raise"], "needs --compile-placement worker"),
        ([*RUN, "--inject-compile-failure", "48"], "48: not a rung of the ladder"),
        ([*RUN, "--compile-timeout", "0"], "--compile-timeout must be a positive number"),
        ([*RUN, "--prompt-ids", "1,x"], "--prompt-ids must be comma-separated integers"),
        ([*RUN, "--prefill-chunk", "1", "--prefill-shape", "paged"], "--prefill-shape paged"),
        ([*RUN, "--ladder", "auto", "--max-context", "100"], "a multiple of 16"),
        ([*GENERATE, "--max-new-tokens", "0"], "--max-new-tokens must be positive"),
        ([*GENERATE, "--prefill-chunk", "0"], "--prefill-chunk must be positive"),
    ],
)
def test_a_wrong_flag_fails_before_any_model_is_opened(tmp_path, capsys, argv, message):
    """The model named does not exist: the flag's line comes first, so no model was opened."""
    missing = str(tmp_path / "no-such-model")
    assert main([*argv, "--model", missing]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert message in line and "no-such-model" not in line


def test_validate_applies_and_names_the_device_defaults():
    config = RunConfig(SCHEDULES["i2"], Ladder.parse("tiny"), Prompt(8), options=F32)
    done = config.validate()
    assert done.validated and not config.validated  # frozen: a new value
    assert set(done.device_defaults) == {"graph", "placement", "decode_compile"}
    assert (done.graph, done.placement, done.decode_compile) == (
        default_graph("CPU"),
        default_placement("CPU"),
        default_decode_compile("CPU"),
    )
    told = RunConfig(SCHEDULES["i2"], Ladder.parse("tiny"), options=F32, graph="split")
    told = told.validate()
    assert told.graph is GraphMode.SPLIT and "graph" not in told.device_defaults
    with pytest.raises(CompileAheadError, match="--graph must be one of whole, split"):
        RunConfig(SCHEDULES["i2"], options=F32, graph="halved").validate()


def test_a_run_takes_only_a_configuration_settled_for_its_model():
    source = resolve_model("tiny")
    proto = teacher_forced(source.config.vocab_size, 8, 8)
    config = RunConfig(SCHEDULES["b0"], Ladder.parse("tiny"), proto, options=F32)
    with pytest.raises(TypeError, match="for_model"):
        LadderRunner(source, config.validate())
    settled = config.for_model(source)
    assert settled.ready and settled.prefill is not None
    assert LadderRunner(source, settled).config is settled


def test_background_compiles_go_through_the_runs_placement(monkeypatch):
    """A placement is one class and its registry line: the run compiles every successor
    through it, on its helper threads, which the interrupt layer knows while they run."""
    from compile_ahead import interrupts

    seen: list[tuple[int, list[str]]] = []

    class Recording(placements.InProcessPlacement):
        def compile(self, spec, fault=None):
            seen.append((spec.capacity, interrupts.helpers_running()))
            return super().compile(spec, fault)

    monkeypatch.setitem(placements.PLACEMENTS, PlacementKind.IN_PROCESS, Recording)
    source = resolve_model("tiny")
    proto = teacher_forced(source.config.vocab_size, 8, 100)
    config = RunConfig(SCHEDULES["i2"], Ladder.parse("tiny"), proto, options=F32)
    result = run_ladder(source, config)
    assert result.error is None
    assert [capacity for capacity, _ in seen] == [32, 64, 128]  # the successors, one ahead
    for capacity, helpers in seen:
        assert f"compile-rung-{capacity}" in helpers


def test_greedy_generation_ends_when_the_prompts_own_token_is_eos():
    """The prompt's last logits give the first token: when it is EOS, nothing is decoded
    after it (in `run` as in `generate`)."""
    from compile_ahead.runtime.ladder.settings.run_protocol import greedy

    source = resolve_model("tiny")
    prompt = [5, 17, 301, 42]
    config = RunConfig(SCHEDULES["i2"], Ladder.parse("tiny"), greedy(prompt, 10), options=F32)
    first = run_ladder(source, config).first_token
    assert first is not None
    eos_first = RunConfig(SCHEDULES["i2"], Ladder.parse("tiny"), greedy(prompt, 10, (first,)))
    result = run_ladder(source, replace(eos_first, options=F32))
    assert result.report.stop_reason == "eos" and result.predicted == []
    assert result.first_token == first
