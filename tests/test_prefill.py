"""Prefill: the dynamic prefill graph (attending over the filled slots only) equals token by
token and transformers; the path is chosen per device from the prompt; the first rung's decode
graph compiles while the prompt is prefilled; first_token_s is reported with its parts."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from compile_ahead.commands.main import main
from compile_ahead.errors import CompileAheadError
from compile_ahead.interrupts import helpers_running
from compile_ahead.profiling.session.profile_options import prefill_plan
from compile_ahead.runtime.compile.settings.device_defaults import (
    PREFILL_CHUNKS,
    default_decode_compile,
    default_prefill,
)
from compile_ahead.runtime.compile.settings.modes import DecodeCompile, PrefillShape
from compile_ahead.runtime.compile.settings.options import CompileOptions
from compile_ahead.runtime.graphs.spec import GraphSpec
from compile_ahead.runtime.ladder.faults import FaultInjector
from compile_ahead.runtime.ladder.reporting.events import RunEvents
from compile_ahead.runtime.ladder.reporting.report import DECODE_COMPILE_WORDS
from compile_ahead.runtime.ladder.runner import run_ladder
from compile_ahead.runtime.ladder.settings.capacities import Ladder
from compile_ahead.runtime.ladder.settings.config import RunConfig
from compile_ahead.runtime.ladder.settings.prefill_plan import check_prefill_flags, choose_prefill
from compile_ahead.runtime.ladder.settings.run_protocol import greedy
from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
from compile_ahead.runtime.sources.resolve import resolve_model
from conftest import F32, generate_on, prefilled, reference_greedy

# 45 tokens: calls of 16, 16 and 13 on a dynamic graph; long enough for a prefill graph by
# default on the CPU.
PROMPT = [int(x) for x in np.random.default_rng(11).integers(3, 1000, size=45)]
LADDER = Ladder.parse("16,32,64,128")


@pytest.mark.parametrize("shape", ["dynamic", "paged"])
@pytest.mark.parametrize("fixture", ["tiny_qwen2_dir", "tiny_llama_dir"])
def test_prefill_over_filled_slots_equals_token_by_token_and_transformers(fixture, shape, request):
    model_dir = request.getfixturevalue(fixture)
    source = resolve_model(str(model_dir))
    a, kv_one_by_one, _ = prefilled(source, PROMPT, 128)
    b, kv_filled, spec = prefilled(source, PROMPT, 128, chunk=16, shape=shape)
    assert (spec.dynamic, spec.paged) == (shape == "dynamic", shape == "paged")
    np.testing.assert_allclose(b, a, atol=1e-5, rtol=0)
    assert kv_one_by_one[0].shape[3] == kv_filled[0].shape[3] == len(PROMPT)
    for x, y in zip(kv_filled, kv_one_by_one, strict=True):
        np.testing.assert_allclose(x, y, atol=1e-5, rtol=0)
    # Greedy tokens after it equal transformers', whenever the decode graph compiles.
    expected = reference_greedy(model_dir, PROMPT, 6)[0]
    for timing in ("with-prefill-graph", "during-prefill"):
        fresh = generate_on(
            source, 128, PROMPT, 6, prefill_chunk=16, prefill_shape=shape, decode_compile=timing
        )
        jobs = fresh.report.compile_jobs
        assert any(j["background"] for j in jobs if j["chunk"] == 1), timing  # compiled aside
        assert fresh.tokens == expected, timing


def test_paged_prefill_continues_after_slots_another_graph_filled(tiny_qwen2_dir):
    """The paged step's cache blocks are its own: a prompt whose first part the decode graph
    prefilled (a chat's earlier turns) continues from the store's rows, loaded into blocks,
    and gives the logits and K/V rows of token by token."""
    from compile_ahead.runtime.compile.graph.step_compile import compile_step
    from compile_ahead.runtime.ladder.settings.prefill_plan import PrefillPlan
    from compile_ahead.runtime.model.kv_arena import KVArena

    source = resolve_model(str(tiny_qwen2_dir))
    cfg = source.config
    decode = compile_step(source, GraphSpec(128, 1, "f32"), F32).step
    paged = compile_step(source, PrefillPlan(16, "paged").spec(128, "f32"), F32).step
    runs = []
    for split in (len(PROMPT), 13):  # all token by token; 13 so, the rest paged
        arena = KVArena(cfg, 128, "f32")
        decode.bind(arena)
        paged.bind(arena)
        for t in range(split):
            out = decode.run(np.asarray(PROMPT[t : t + 1]), t)
            for layer in range(cfg.num_layers):
                arena.write(layer, t, out.new_keys[layer], out.new_values[layer])
        if split < len(PROMPT):
            rest = np.asarray(PROMPT[split:])
            out = paged.run(rest, split, len(rest) - 1)
            assert out.new_keys[0].shape == (1, cfg.num_kv_heads, len(rest), cfg.head_dim)
            for layer in range(cfg.num_layers):
                arena.write(layer, split, out.new_keys[layer], out.new_values[layer])
        n = len(PROMPT)
        runs.append((out.logits.copy(), [a[:, :, :n].copy() for a in arena.keys + arena.values]))
    np.testing.assert_allclose(runs[1][0], runs[0][0], atol=1e-5, rtol=0)
    for a, b in zip(runs[1][1], runs[0][1], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_paged_cache_in_another_precision_than_the_store(tiny_qwen2_dir):
    """The CPU plugin may hold the paged cache in another precision than the one asked for
    (an f16 request computing in bf16 is held in bf16): rows are converted both ways, and the
    prefill matches token by token within that precision's rounding."""
    from compile_ahead.runtime.graphs.ir.paged_prefill import _convert

    rows = np.asarray([1.0, -2.5, 3.140625, 0.0009765625], np.float32)  # exact in all three
    bits = _convert(rows, "f32", "bf16")
    assert bits.dtype == np.uint16
    np.testing.assert_array_equal(_convert(bits, "bf16", "f16"), rows)
    np.testing.assert_array_equal(_convert(_convert(rows, "f32", "f16"), "f16", "f32"), rows)

    source = resolve_model(str(tiny_qwen2_dir))
    options = CompileOptions(device="CPU", inference_precision="bf16", kv_precision="f16")
    a, kv_one_by_one, _ = prefilled(source, PROMPT, 128, options)
    b, kv_paged, _ = prefilled(source, PROMPT, 128, options, chunk=16, shape="paged")
    assert kv_paged[0].dtype == np.float16
    for x, y in zip(kv_paged, kv_one_by_one, strict=True):
        np.testing.assert_allclose(x, y, atol=0.1, rtol=0.05)
    assert np.argmax(a) == np.argmax(b)


def test_dynamic_graph_attends_over_the_filled_slots_only(tiny_qwen2_dir):
    """Its past inputs keep the buffer's static shape; the token axis is free and no score
    spans the capacity (the past is sliced to past_length, so no past mask is built)."""
    source = resolve_model(str(tiny_qwen2_dir))
    model = source.build_graph(GraphSpec(128, 16, "f32", dynamic=True))
    shapes = {p.get_any_name(): p.get_partial_shape() for p in model.inputs}
    assert shapes["past_key.0"].is_static and shapes["past_key.0"][2].get_length() == 128
    assert shapes["input_ids"][1].is_dynamic
    ops = {op.get_type_name() for op in model.get_ops()}
    assert "Select" in ops  # the chunk's causal mask
    static = source.build_graph(GraphSpec(128, 16, "f32"))
    assert all(p.get_partial_shape().is_static for p in static.inputs)


def test_prefill_choice_per_device_and_prompt():
    cpu = default_prefill("CPU")
    short = choose_prefill("CPU", cpu.min_prompt - 1, 4096)
    assert not short.uses_graph and short.chunk == 1
    long = choose_prefill("CPU", 3800, 4096)
    assert long.uses_graph and long.shape == cpu.shape != "static"
    assert long.chosen_by == "default"
    # A device without a measured dynamic path gets static shapes (an NPU needs them).
    npu = choose_prefill("NPU", 3800, 4096)
    assert npu.uses_graph and npu.shape == "static" and npu.chunk <= 4096
    for shape in ("dynamic", "paged"):
        with pytest.raises(CompileAheadError, match="NPU compiler does not take"):
            check_prefill_flags("NPU", None, shape)
    # The flags override: token by token, a static chunk, a chunk beyond a static rung.
    assert choose_prefill("CPU", 3800, 4096, chunk=1).chunk == 1
    # Another shape than the device's takes that shape's chunk, as profile-compile profiles it.
    for shape in PrefillShape:
        plan = choose_prefill("CPU", 3800, 4096, shape=shape)
        assert plan.chunk == prefill_plan("CPU", 4096, None, shape).chunk == PREFILL_CHUNKS[shape]
    assert choose_prefill("CPU", 3800, 4096, shape="static").chunk == 256
    flagged = choose_prefill("CPU", 3800, 4096, chunk=256, shape="static")
    assert (flagged.chunk, flagged.shape, flagged.chosen_by) == (256, "static", "flag")
    with pytest.raises(CompileAheadError, match="exceeds the first rung"):
        choose_prefill("CPU", 10, 16, chunk=32)
    # Split graphs have no prefill graph: token by token by default, refused when asked.
    assert choose_prefill("CPU", 3800, 4096, graph_available=False).chunk == 1
    with pytest.raises(CompileAheadError, match="--graph split"):
        check_prefill_flags("CPU", 64, None, graph_available=False)


class _Events(RunEvents):
    """The run's events in order; each compile's start with the thread it ran on; the helper
    threads running (interrupts.helpers_running) when the prefill graph's compile started and
    when the prompt had been prefilled."""

    def __init__(self):
        self.log: list[tuple] = []
        self.starts: list[tuple[str, int, str]] = []  # (kind, capacity, thread)
        self.helpers_at: dict[str, list[str]] = {}
        self.prefilled = threading.Event()

    def compile_started(self, job, capacity, kind, background, ts):
        self.log.append(("compile_started", kind, capacity, background))
        self.starts.append((kind, capacity, threading.current_thread().name))
        if kind == "prefill":
            self.helpers_at["prefill graph compile"] = helpers_running()

    def compile_finished(self, job, capacity, kind, ok, ts, info):
        self.log.append(("compile_finished", kind, capacity, ok))

    def prefill(self, capacity, tokens, begin, end):
        self.log.append(("prefill", tokens))
        self.helpers_at["prompt prefilled"] = helpers_running()
        self.prefilled.set()

    def step(self, token_index, capacity, begin, end):
        if token_index == 0:
            self.log.append(("first_step",))

    def started_on(self, kind: str, thread: str) -> list[int]:
        """The graphs of ``kind`` compiled on ``thread``, in the order they started."""
        return [c for k, c, t in self.starts if k == kind and t == thread]


def test_every_decode_compile_timing_has_summary_words():
    assert set(DECODE_COMPILE_WORDS) == set(DecodeCompile)


FIRST_RUNGS = "compile-first-rungs"  # the helper thread compiling the rungs needed first
HELD_S = 300.0  # reached only if the prompt waits for the compiles held until it is prefilled


def _hold_until_prefilled(events: _Events, monkeypatch: pytest.MonkeyPatch) -> None:
    """Background compiles wait until the prompt is prefilled: a decode graph compiled beside
    the prefill is still compiling when the prefill ends, however fast or loaded the machine
    (a prompt that waited for it would fail the compile after HELD_S)."""
    injected = FaultInjector.before_compile

    def before_compile(self: FaultInjector, capacity: int, background: bool) -> None:
        if background and not events.prefilled.wait(HELD_S):
            raise CompileAheadError(f"C={capacity}: the prompt was not prefilled in {HELD_S} s")
        injected(self, capacity, background)

    monkeypatch.setattr(FaultInjector, "before_compile", before_compile)


def _run_with_held_compiles(model_dir, schedule: str, timing: str, monkeypatch):
    """A greedy run with ``--decode-compile timing`` whose background compiles are held until
    the prompt has been prefilled; returns the result and the run's events."""
    events = _Events()
    _hold_until_prefilled(events, monkeypatch)
    settings = RunConfig(
        SCHEDULES[schedule], LADDER, greedy(PROMPT, 4, ()), decode_compile=timing, options=F32
    )
    result = run_ladder(resolve_model(str(model_dir)), settings, events)
    assert result.error is None
    return result, events


@pytest.mark.parametrize("schedule", ["i2", "b1"])
def test_first_rung_compiles_during_prefill(tiny_qwen2_dir, schedule, monkeypatch):
    # the NPU's default (the CPU's prefill shares cores)
    result, events = _run_with_held_compiles(
        tiny_qwen2_dir, schedule, "during-prefill", monkeypatch
    )
    log = events.log
    assert result.report.prefill["path"] == default_prefill("CPU").shape
    assert result.report.prefill["decode_compile"] == "during-prefill"
    first = 64  # the smallest rung holding the prompt and one more token
    prefill_done = log.index(("compile_finished", "prefill", first, True))
    decode_start = log.index(("compile_started", "decode", first, True))
    decode_done = log.index(("compile_finished", "decode", first, True))
    prefilled = log.index(("prefill", len(PROMPT)))
    assert log[0] == ("compile_started", "prefill", first, False)
    # The decode graph's compile was asked for after the prefill graph's, on a helper thread
    # that was still compiling it when the prompt had been prefilled.
    assert prefill_done < decode_start
    assert events.started_on("decode", FIRST_RUNGS)[0] == first
    assert FIRST_RUNGS in events.helpers_at["prompt prefilled"]
    assert prefilled < decode_done < log.index(("first_step",))
    # The first token comes from prefill, before the decode graph is there.
    rep = result.report
    assert rep.decode_graph_wait_s > 0
    assert rep.first_token_s is not None
    assert rep.first_token_s >= rep.first_token_compile_s + rep.prefill_s


@pytest.mark.parametrize("schedule", ["i2", "i1"])
def test_first_rungs_compile_beside_the_prefill_graph(tiny_qwen2_dir, schedule, monkeypatch):
    """with-prefill-graph: the decode graphs the schedule compiles before decoding start with
    the prefill graph's compile, in the background, and may run on into the prefill."""
    result, events = _run_with_held_compiles(
        tiny_qwen2_dir, schedule, "with-prefill-graph", monkeypatch
    )
    log = events.log
    assert result.report.prefill["decode_compile"] == "with-prefill-graph"
    first = 64
    # Asked for before the prefill graph's compile started, on a helper thread that was still
    # compiling when the prompt had been prefilled (they ran beside the prefill graph's).
    assert FIRST_RUNGS in events.helpers_at["prefill graph compile"]
    assert FIRST_RUNGS in events.helpers_at["prompt prefilled"]
    assert events.started_on("prefill", threading.main_thread().name) == [first]
    prefill_done = log.index(("compile_finished", "prefill", first, True))
    prefilled = log.index(("prefill", len(PROMPT)))
    decode_done = log.index(("compile_finished", "decode", first, True))
    steps = log.index(("first_step",))
    assert prefill_done < prefilled < decode_done < steps
    # The first rung starts first; i1 has every other rung compiled before decoding too, all
    # before the first decode step.
    before = events.started_on("decode", FIRST_RUNGS)
    assert before[0] == first
    assert sorted(before) == ([first] if schedule == "i2" else sorted(LADDER.rungs))
    done = [e[2] for e in log[:steps] if e[:2] == ("compile_finished", "decode")]
    assert set(before) <= set(done)
    rep = result.report
    assert rep.decode_graph_wait_s > 0
    assert "beside the prefill graph's compile" in rep.summary()
    # The same tokens as compiling the decode graph after prefill.
    source = resolve_model(str(tiny_qwen2_dir))
    after = run_ladder(
        source, RunConfig(SCHEDULES[schedule], LADDER, greedy(PROMPT, 4, ()), options=F32)
    )
    assert result.predicted == after.predicted


def test_first_rung_compiles_after_prefill_on_the_cpu(tiny_qwen2_dir):
    """The CPU's default: the prefill graph, the prompt (the first token), then the decode
    graph in the foreground before the first decode step."""
    source = resolve_model(str(tiny_qwen2_dir))
    events = _Events()
    settings = RunConfig(SCHEDULES["i2"], LADDER, greedy(PROMPT, 4, ()), options=F32)
    result = run_ladder(source, settings, events)
    assert result.error is None
    assert result.report.prefill["decode_compile"] == default_decode_compile("CPU")
    assert default_decode_compile("CPU") == "after-prefill"
    assert default_decode_compile("NPU") == "during-prefill"
    log = events.log
    first = 64
    assert log.index(("compile_finished", "prefill", first, True)) < log.index(
        ("prefill", len(PROMPT))
    )
    decode_start = log.index(("compile_started", "decode", first, False))
    assert log.index(("prefill", len(PROMPT))) < decode_start < log.index(("first_step",))
    rep = result.report
    assert rep.decode_graph_wait_s > 0  # the decode graph's compile, after the first token
    assert rep.first_token_s >= rep.first_token_compile_s + rep.prefill_s


def test_short_prompt_prefills_on_the_decode_graph(tiny_qwen2_dir):
    source = resolve_model(str(tiny_qwen2_dir))
    events = _Events()
    prompt = PROMPT[: default_prefill("CPU").min_prompt - 1]
    settings = RunConfig(SCHEDULES["i2"], LADDER, greedy(prompt, 2, ()), options=F32)
    result = run_ladder(source, settings, events)
    assert result.report.prefill == {"path": "decode-graph", "chunk": 1, "chosen_by": "default"}
    kinds = [e[1] for e in events.log if e[0] == "compile_started"]
    assert "prefill" not in kinds
    # The decode graph compiled in the foreground, before the prompt.
    assert events.log.index(("compile_finished", "decode", 32, True)) < events.log.index(
        ("prefill", len(prompt))
    )
    rep = result.report
    assert rep.first_token_s >= rep.first_token_compile_s + rep.prefill_s > 0


def test_run_report_and_summary_give_first_token(tiny_qwen2_dir, tmp_path, capsys):
    report = tmp_path / "run.json"
    argv = ["run", "--model", str(tiny_qwen2_dir), "--schedule", "i2", "--ladder", "tiny"]
    argv += ["--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens", "4"]
    argv += ["--inference-precision", "f32", "--no-progress", "--report", str(report)]
    assert main(argv) == 0
    assert "first token" in capsys.readouterr().out
    rep = json.loads(report.read_text())
    parts = ("startup_s", "first_token_compile_s", "prefill_s")
    assert rep["first_token_s"] >= sum(rep[p] for p in parts)
    assert all(rep[p] > 0 for p in parts)
    assert rep["first_token_s"] <= rep["critical_path_s"] + rep["startup_s"]


def test_generate_reports_first_token(tiny_qwen2_dir, capsys):
    argv = ["generate", "--model", str(tiny_qwen2_dir), "--prompt-ids"]
    argv += [",".join(map(str, PROMPT)), "--max-new-tokens", "5", "--inference-precision", "f32"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["prefill"]["path"] == default_prefill("CPU").shape
    parts = out["startup_s"] + out["compile_s"] + out["prefill_s"]
    assert out["first_token_s"] >= parts - 2e-3  # each figure rounded to 1 ms
    assert min(out["compile_s"], out["prefill_s"]) > 0
    assert out["sequences"][0]["tokens"] == reference_greedy(tiny_qwen2_dir, PROMPT, 5)[0]
    # Token by token on request gives the same tokens.
    assert main([*argv, "--json", "--prefill-chunk", "1"]) == 0
    by_token = json.loads(capsys.readouterr().out)
    assert (
        by_token["prefill"]["path"] == "decode-graph"
        and by_token["sequences"][0]["tokens"] == out["sequences"][0]["tokens"]
    )


@pytest.mark.parametrize("shape", ["dynamic", "paged"])
def test_prefill_graph_cached_after_the_first_token(tiny_qwen2_dir, tmp_path, shape):
    """A prefill graph's cache entry is written once it has served the prompt (not on the way
    to the first token), and the next run imports it. A paged graph is never cached: the
    plugin cannot import its export; the report says so."""
    from compile_ahead.runtime.compile.graph.step_compile import PAGED_NOT_CACHED

    argv = ["run", "--model", str(tiny_qwen2_dir), "--schedule", "i2", "--ladder", "tiny"]
    argv += ["--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens", "2"]
    argv += ["--inference-precision", "f32", "--no-progress", "--cache-dir", str(tmp_path / "c")]
    argv += ["--prefill-shape", shape]
    states, notes = [], []
    for i in range(2):
        report = tmp_path / f"run{i}.json"
        assert main([*argv, "--report", str(report)]) == 0
        jobs = json.loads(report.read_text())["compile_jobs"]
        states.append([j["cache"] for j in jobs if j["chunk"] > 1])
        notes += [j.get("cache_note") for j in jobs if j["chunk"] > 1]
    if shape == "paged":
        assert states == [["off"], ["off"]] and notes == [PAGED_NOT_CACHED] * 2
    else:
        assert states == [["miss"], ["hit"]]
    assert not list((tmp_path / "c").rglob(".*"))  # no temporary file left behind
