"""The serving engine, its scheduler and its compile policies against the simulator's cost
model on a virtual clock: nothing is compiled. Expected times are worked out by hand from the
cost model."""

from __future__ import annotations

import itertools
import json
import statistics

import pytest

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.serving.buckets import Bucket, Grid
from compile_ahead.runtime.serving.engine import ServingEngine, replay
from compile_ahead.runtime.serving.metrics import distribution
from compile_ahead.runtime.serving.policies import make_policy
from compile_ahead.runtime.serving.requests import Request
from compile_ahead.runtime.serving.simulator import CostModel, Linear, SimExecutor, read_cost_model
from compile_ahead.runtime.serving.workloads import Arrivals, Lengths, generate_requests

GIB = 2**30


def costs(**kw) -> CostModel:
    base = dict(compile_s=Linear(base=2.0), step_s=Linear(base=0.1), bucket_bytes=Linear(base=GIB))
    return CostModel(**(base | kw))


def serve(grid, policy, requests, model=None, budget=None):
    engine = ServingEngine(grid, make_policy(policy), SimExecutor(model or costs()), budget)
    replay(engine, requests)
    return engine, engine.report()


def req(i, at, prompt=3, new=4):
    return Request(f"r{i}", tuple(range(1, prompt + 1)), new, at)


ONE = Grid.of((1,), (64,))


def test_on_demand_stalls_the_first_request_for_its_bucket_compile():
    engine, report = serve(ONE, "on-demand", [req(0, 0.5)])
    live = engine.lives["r0"]
    # arrives at 0.5, compile 2.0 on its path, prefill free, then 3 steps of 0.1
    assert live.token_times == pytest.approx([2.5, 2.6, 2.7, 2.8])
    compiles = report["engine"]["compile_s"]
    assert compiles["request_path"] == pytest.approx(2.0) and compiles["background"] == 0
    assert report["requests_metrics"]["ttft_s"]["p50"] == pytest.approx(2.0)
    assert report["requests_metrics"]["tpot_s"]["p50"] == pytest.approx(0.1)
    assert report["requests_metrics"]["e2e_s"]["p50"] == pytest.approx(2.3)


def test_a_prefill_costs_whole_calls_of_the_prefill_chunk():
    model = costs(prefill_base_s=0.05, prefill_per_token_s=0.01, prefill_chunk=4)
    engine, report = serve(ONE, "up-front", [req(0, 0.0, prompt=5), req(1, 10.0, prompt=8)], model)
    # compiled by 2.0; 5 tokens cost two calls of 4: 0.05 + 8 * 0.01; 8 tokens the same
    assert engine.lives["r0"].token_times[0] == pytest.approx(2.0 + 0.13)
    assert engine.lives["r1"].token_times[0] == pytest.approx(10.0 + 0.13)
    assert report["engine"]["timings"]["prefill"]["alone"]["x"] == pytest.approx(16)


def test_ahead_compiles_the_first_bucket_from_the_start_in_the_background():
    engine, report = serve(ONE, "ahead", [req(0, 0.5), req(1, 3.0)])
    # the compile runs from 0 to 2.0: r0 waits 1.5 for it, r1 finds it compiled
    assert engine.lives["r0"].token_times[0] == pytest.approx(2.0)
    assert engine.lives["r1"].token_times[0] == pytest.approx(3.0)
    compiles = report["engine"]["compile_s"]
    assert compiles["request_path"] == 0 and compiles["background"] == pytest.approx(2.0)
    assert compiles["waited_for_background"] == pytest.approx(1.5)
    assert report["engine"]["time_to_ready_s"] == pytest.approx(2.0)


def test_ahead_compiles_a_first_bucket_of_four_rows_for_the_first_burst():
    """A cold server's first requests come together: ahead's first compile holds four rows at
    the smallest capacity, so three requests arriving before it is ready start together when it
    is; a lone request later moves down to the one-row bucket compiled in the background."""
    grid = Grid.of((1, 2, 4, 8), (16, 32))
    trace = [req(i, 0.5 + 0.1 * i, new=5) for i in range(3)] + [req(3, 10.0, prompt=2, new=14)]
    engine, report = serve(grid, "ahead", trace, costs(step_s=Linear(base=0.5)))
    compiles = report["engine"]["compiles"]
    assert tuple(compiles[0]["bucket"]) == (4, 16) and compiles[0]["start_s"] == 0.0
    assert [engine.lives[f"r{i}"].token_times[0] for i in range(3)] == pytest.approx([2.0] * 3)
    assert report["engine"]["compile_s"]["request_path"] == 0
    assert {tuple(c["bucket"]) for c in compiles} == {(4, 16), (1, 16)}
    assert [tuple(s["to"]) for s in engine.stats.switches] == [(4, 16), (1, 16)]


def test_a_background_compile_slows_only_while_the_device_works_beside_it():
    """background_compile_factor prices a compile beside the decode: ahead's first compile,
    with nothing to decode yet, takes its own time; the next, beside a decode, twice its own
    for the part the device works."""
    model = costs(background_compile_factor=2.0, step_s=Linear(base=0.5))
    grid = Grid.of((1, 2, 4), (16, 32))
    engine, report = serve(grid, "ahead", [req(0, 0.5, prompt=2, new=10)], model)
    first, second = report["engine"]["compiles"][:2]
    assert tuple(first["bucket"]) == (4, 16) and first["seconds"] == pytest.approx(2.0)
    assert engine.lives["r0"].token_times[0] == pytest.approx(2.0)
    # the one-row bucket (wanted: smaller) from 2.0, beside 8 steps of 0.5: 2.0 of its own
    # seconds at half pace take 4.0
    assert tuple(second["bucket"]) == (1, 16) and second["seconds"] == pytest.approx(4.0)


def test_a_compile_factor_per_activity_prices_the_compile_by_what_runs_beside_it():
    """As above, the second compile beside the four-row bucket's steps: with that activity's
    own factor (3) its 2.0 seconds take 6.0, all of them beside the steps; a factor for an
    activity that does not run beside it leaves the single one (2) pricing it."""
    grid = Grid.of((1, 2, 4), (16, 32))
    trace = [req(0, 0.5, prompt=2, new=14)]  # steps from 2.0 to 8.5
    for factors, seconds in [({"step:4": 3.0}, 6.0), ({"step:2": 3.0}, 4.0)]:
        model = costs(
            background_compile_factor=2.0,
            background_compile_factors=factors,
            step_s=Linear(base=0.5),
        )
        _, report = serve(grid, "ahead", trace, model)
        second = report["engine"]["compiles"][1]
        assert tuple(second["bucket"]) == (1, 16) and second["seconds"] == pytest.approx(seconds)
        assert second["beside_s"] == {"step:4": pytest.approx(seconds)}
        assert second["busy_s"] == pytest.approx(seconds)


def test_up_front_compiles_the_whole_grid_before_the_first_request():
    grid = Grid.of((1, 2), (32, 64))
    engine, report = serve(grid, "up-front", [req(0, 0.5)], costs(compile_s=Linear(base=1.0)))
    compiles = report["engine"]["compiles"]
    assert {tuple(c["bucket"]) for c in compiles} == set(grid)
    assert all(c["where"] == "before-serving" for c in compiles)
    assert engine.lives["r0"].token_times[0] == pytest.approx(4.0)  # 4 compiles of 1.0
    assert report["engine"]["compile_s"]["before_serving"] == pytest.approx(4.0)


def test_ahead_compiles_each_bucket_before_it_is_needed():
    grid = Grid.of((1, 2, 4), (16, 32, 64))
    model = costs(compile_s=Linear(base=0.3), step_s=Linear(base=0.05))
    # growing one dimension at a time, with time to see each coming
    trace = [req(0, 1.0, prompt=4, new=40), req(1, 4.0, prompt=4, new=50)]
    trace += [req(2 + i, 4.5 + 0.02 * i, prompt=3, new=30) for i in range(3)]
    engine, report = serve(grid, "ahead", trace, model)
    compiles = report["engine"]["compile_s"]
    assert compiles["request_path"] == 0 and compiles["waited_for_background"] == 0
    ends = {tuple(c["bucket"]): c["start_s"] + c["seconds"] for c in report["engine"]["compiles"]}
    for switch in engine.stats.switches:
        assert ends[tuple(switch["to"])] <= switch["at_s"] + 1e-9
    assert len(report["engine"]["buckets_used"]) >= 3
    assert report["requests_metrics"]["requests"]["finished"] == len(trace)


def test_a_finished_request_frees_its_row_for_the_next_at_once():
    engine, _ = serve(ONE, "up-front", [req(0, 0.0, new=3), req(1, 0.0, new=3)])
    first, second = engine.lives["r0"], engine.lives["r1"]
    assert first.token_times == pytest.approx([2.0, 2.1, 2.2])
    assert second.token_times[0] == pytest.approx(first.token_times[-1])


def test_the_engine_moves_up_in_batch_and_capacity_and_back_down():
    grid = Grid.of((1, 2), (16, 32))
    trace = [req(0, 0.0, prompt=2, new=20), req(1, 2.05, prompt=2, new=28)]
    trace.append(req(2, 10.0, prompt=2, new=12))
    engine, report = serve(grid, "up-front", trace, costs(compile_s=Linear(base=0.5)))
    moves = [(tuple(s["from"]), tuple(s["to"])) for s in engine.stats.switches if s["from"]]
    assert any(b[0] > a[0] for a, b in moves), moves  # up a batch bucket
    assert any(b[1] > a[1] for a, b in moves), moves  # up the ladder
    assert any(b[0] < a[0] or b[1] < a[1] for a, b in moves), moves  # down again
    assert engine.active == Bucket(1, 16)
    assert report["engine"]["kv_bytes_copied"] == 0  # the cost model gives no bytes per slot
    assert report["requests_metrics"]["requests"]["finished"] == 3


def test_kv_moves_are_priced_by_the_bytes_copied():
    grid = Grid.of((1,), (16, 32))
    model = costs(kv_bytes_per_slot=1000, copy_s_per_byte=1e-4, compile_s=Linear(base=0.5))
    engine, report = serve(grid, "up-front", [req(0, 0.0, prompt=2, new=20)], model)
    # the boundary: 16 slots of one row copied, 16_000 bytes at 0.1 ms each = 1.6 s
    assert report["engine"]["kv_bytes_copied"] == 16_000
    times = engine.lives["r0"].token_times
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) == pytest.approx(0.1 + 1.6)


def test_least_recently_used_buckets_are_released_within_the_memory_budget():
    grid = Grid.of((1, 2, 4), (64, 128))
    trace = generate_requests(
        3, 60, Arrivals("gamma", 1.5, cv=3.0), Lengths("uniform", 4, 40),
        Lengths("uniform", 8, 80), 1000, max_slots=128,
    )  # fmt: skip
    model = costs(compile_s=Linear(base=0.5), step_s=Linear(base=0.02))
    budget = 2 * GIB
    _, report = serve(grid, "ahead", trace, model, budget)
    assert report["engine"]["peak_resident_bucket_bytes"] <= budget
    assert report["engine"]["buckets_released"]
    assert len(report["engine"]["buckets_compiled"]) > 2
    assert report["requests_metrics"]["requests"]["finished"] == 60


def test_a_budget_or_an_up_front_grid_that_cannot_fit_is_refused_in_one_line():
    grid = Grid.of((1, 2), (64,))
    model = costs(bucket_bytes=Linear(base=GIB, per_batch=GIB))
    with pytest.raises(CompileAheadError, match=r"cannot hold the bucket \[2x64\]"):
        ServingEngine(grid, make_policy("ahead"), SimExecutor(model), 2 * GIB)
    engine = ServingEngine(grid, make_policy("up-front"), SimExecutor(model), 3 * GIB)
    with pytest.raises(CompileAheadError, match="over the memory budget"):
        engine.start()
    with pytest.raises(CompileAheadError, match="unknown serving policy 'eager'"):
        make_policy("eager")


def test_a_request_beyond_the_top_capacity_is_refused_and_the_others_go_on():
    trace = [req(0, 0.0), req(1, 0.1, prompt=60, new=10), req(2, 0.2)]
    engine, report = serve(ONE, "on-demand", trace)
    counts = report["requests_metrics"]["requests"]
    assert counts["finished"] == 2 and counts["refused"] == 1
    assert "exceed the top capacity (64)" in counts["refusals"][0]["message"]
    assert engine.lives["r1"].tokens == []


def test_percentiles_match_the_linear_interpolation_of_statistics():
    values = [0.5 * i * i for i in range(1, 41)]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    d = distribution(values)
    assert d["p50"] == pytest.approx(cuts[49]) and d["p90"] == pytest.approx(cuts[89])
    assert d["p99"] == pytest.approx(cuts[98]) and d["mean"] == pytest.approx(
        statistics.mean(values)
    )


def test_goodput_counts_only_the_requests_that_met_every_slo():
    from compile_ahead.runtime.serving.metrics import Slo, request_metrics

    engine, _ = serve(ONE, "on-demand", [req(0, 0.0), req(1, 10.0)])
    # r0 waited 2.0 for the compile, r1 nothing
    tight = request_metrics(engine.lives.values(), Slo(ttft_s=1.0))
    assert tight["slo_met"] == 1
    span = 10.3 - 0.0  # first arrival to last token
    assert tight["goodput_per_s"] == pytest.approx(1 / span)
    assert tight["request_throughput_per_s"] == pytest.approx(2 / span)


def test_a_cost_model_file_is_read_and_refused_in_one_line(tmp_path):
    good = tmp_path / "costs.json"
    good.write_text(json.dumps({"compile_s": {"base": 3, "table": {"2x64": 9}}, "step_s": 0.2}))
    model = read_cost_model(good)
    assert model.compile_s(Bucket(1, 64)) == 3 and model.compile_s(Bucket(2, 64)) == 9
    for body, why in [
        ("{", "not JSON"),
        ('{"compile": 1}', "unknown key 'compile'"),
        ('{"step_s": {"base": -1}}', "step_s.base: a number >= 0"),
        ('{"background_compile_factors": {"step:4": "2"}}', "background_compile_factors: an"),
        ('{"background_compile_factors": [2]}', "background_compile_factors: an object"),
        ('{"prefill_chunk": 0}', "prefill_chunk: a whole number >= 1"),
        ('{"prefill_chunk": 2.5}', "prefill_chunk: a whole number >= 1"),
    ]:
        bad = tmp_path / "bad.json"
        bad.write_text(body)
        with pytest.raises(CompileAheadError, match=why) as err:
            read_cost_model(bad)
        assert "\n" not in str(err.value)


def test_the_engine_interface_on_the_simulator_streams_cancels_refuses_and_drains():
    import threading

    from compile_ahead.runtime.serving.api import TokenEvent
    from compile_ahead.runtime.serving.engine_thread import ThreadedEngine

    engine = ServingEngine(Grid.of((1, 2), (16, 32)), make_policy("ahead"), SimExecutor(costs()))
    api = ThreadedEngine(engine, 32).start()
    events: dict[str, list[TokenEvent]] = {}
    ended = {name: threading.Event() for name in ("a", "b", "long", "gone")}

    def collect(event: TokenEvent) -> None:
        events.setdefault(event.request_id, []).append(event)
        if event.finished is not None:
            ended[event.request_id].set()

    api.submit("gone", [1], 30, collect)
    api.cancel("gone")
    api.submit("a", [1, 2, 3], 5, collect)
    api.submit("b", [4, 5], 20, collect)  # outgrows 16: a move up the ladder
    api.submit("long", [1] * 30, 5, collect)  # 35 slots: beyond the top capacity
    for done in ended.values():
        assert done.wait(30)
    assert [e.token is not None for e in events["a"]] == [True] * 5 + [False]
    assert events["a"][-1].finished == "length" and len(events["b"]) == 21
    assert [e.finished for e in events["long"]] == ["refused"]
    assert events["gone"][-1].finished == "cancelled"
    status = api.status()
    assert status["ready"] and (status["queued"], status["running"]) == (0, 0)
    assert api.metrics()["requests_metrics"]["requests"]["finished"] == 2
    api.drain(5.0)
    late: list[TokenEvent] = []
    api.submit("late", [1], 2, late.append)
    assert [e.finished for e in late] == ["refused"]


def test_a_caller_told_its_request_ended_reads_a_status_without_it():
    """The status is a snapshot the engine's thread takes; it is taken again before a
    request's last event goes out, so the caller never sees its ended request still running."""
    import threading

    from compile_ahead.runtime.serving.engine_thread import ThreadedEngine

    engine = ServingEngine(Grid.of((1,), (16,)), make_policy("up-front"), SimExecutor(costs()))
    api = ThreadedEngine(engine, 16).start()
    seen: list[tuple[str, int, int]] = []
    ended = threading.Event()

    def collect(event) -> None:
        if event.finished is not None:
            status = api.status()
            seen.append((event.finished, status["running"], status["queued"]))
            ended.set()

    for name in ("a", "b"):  # one after the other, each decoding a few steps
        ended.clear()
        api.submit(name, [1, 2], 4, collect)
        assert ended.wait(30)
    api.drain(5.0)
    assert seen == [("length", 0, 0)] * 2


def test_a_listening_engine_keeps_only_its_newest_finished_requests():
    """A server runs for ever: with keep_finished, its memory holds the newest finished
    requests (metrics, row spans, switches); the counts stay whole."""
    grid = Grid.of((1, 2), (16, 32))
    engine = ServingEngine(grid, make_policy("up-front"), SimExecutor(costs()))
    engine.keep_finished = 5
    requests = []  # every 5 s two requests at once, then one alone: the bucket goes up, down
    for k in range(20):
        requests += [req(2 * k, 5.0 * k, prompt=2, new=20), req(2 * k + 1, 5.0 * k, prompt=2)]
    replay(engine, requests)
    report = engine.report()
    whole, whole_report = serve(grid, "up-front", requests)  # the same trace, nothing forgotten
    last_to_finish = sorted(whole.lives.values(), key=lambda x: x.finished_s)[-5:]
    assert sorted(engine.lives) == sorted(x.request_id for x in last_to_finish)
    assert report["requests_forgotten"] == 35
    assert report["requests_metrics"]["requests"]["finished"] == 5
    assert len(engine.row_spans) <= 2 * 5 + len(engine.rows)  # pruned now and then
    assert len(engine.stats.switches) <= 5 < report["engine"]["switches"]
    assert len(whole.lives) == 40 and whole_report["requests_forgotten"] == 0
    assert whole_report["engine"]["switches"] == report["engine"]["switches"]


def test_an_idle_engine_thread_sleeps_until_a_caller_wakes_it():
    """A server with nothing to do does not spin: with no request and no compile in flight its
    thread waits to be woken (a submit wakes it at once)."""
    import threading
    import time

    from compile_ahead.runtime.serving.engine_thread import ThreadedEngine

    engine = ServingEngine(Grid.of((1,), (16,)), make_policy("up-front"), SimExecutor(costs()))
    calls = []
    iterate = engine.iterate
    engine.iterate = lambda: calls.append(1) or iterate()  # type: ignore[method-assign]
    api = ThreadedEngine(engine, 16).start()
    deadline = time.monotonic() + 30
    while not api.status()["ready"]:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.2)
    before = len(calls)
    time.sleep(1.5)
    assert len(calls) - before <= 3, len(calls) - before  # an engine polling at 100 Hz: ~150
    done = threading.Event()
    api.submit("a", [1, 2], 2, lambda e: e.finished is not None and done.set())
    assert done.wait(5)
    api.drain(5.0)
