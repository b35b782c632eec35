"""The ITT collector observes a real OpenVINO compile in a fresh process (the collector must be
announced before libopenvino loads, so each case runs in its own interpreter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

OBSERVE_COMPILE = textwrap.dedent(
    """
    import json, time
    import compile_ahead
    from compile_ahead import itt_collector
    from compile_ahead.runtime.compile.graph.step_compile import compile_step
    from compile_ahead.runtime.compile.settings.options import CompileOptions
    from compile_ahead.runtime.graphs.spec import GraphSpec
    from compile_ahead.runtime.sources.resolve import resolve_model

    source = resolve_model("tiny")
    spec = GraphSpec(capacity=128, chunk=1, kv_precision="bf16")
    t0 = time.monotonic_ns()
    compile_step(source, spec, CompileOptions(device="CPU"))
    t1 = time.monotonic_ns()
    # Workers may still be inside a span: everything that began before the snapshot is either
    # open now or recorded by the next snapshot.
    still_open = [e.__dict__ for e in itt_collector.open_spans()]
    later = [e.__dict__ for e in itt_collector.events()]
    # Events, aggregates and stats are read one after another, so a plugin thread that closes
    # a span between the reads would make them disagree: read them while nothing is recording
    # (no open span, the same count before and after the reads).
    for _ in range(200):
        before = itt_collector.stats()["recorded"]
        first = [e.__dict__ for e in itt_collector.events()]
        aggs = [a.__dict__ for a in itt_collector.aggregates()]
        stats = itt_collector.stats()
        if stats["recorded"] == before and not itt_collector.open_spans():
            break
        time.sleep(0.01)
    else:
        raise SystemExit("the collector never went quiet after compile_model returned")
    itt_collector.reset()
    after_reset = (
        len(itt_collector.events()), len(itt_collector.aggregates()), itt_collector.stats()
    )
    compile_step(source, GraphSpec(capacity=256, chunk=1, kv_precision="bf16"),
                 CompileOptions(device="CPU"))
    second = [e.__dict__ for e in itt_collector.events()]
    status = itt_collector.collector_status()
    print(json.dumps({
        "window": [t0, t1], "events": first, "open": still_open, "later": later,
        "aggregates": aggs, "stats": stats,
        "after_reset": after_reset, "second": second,
        "bound": list(status.bound_libraries), "problem": status.problem(),
        "names": {str(k): v for k, v in itt_collector.thread_names().items()},
    }))
    """
)


def run_python(code: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a process that has not been told about any collector yet."""
    env = {k: v for k, v in os.environ.items() if k not in ("INTEL_LIBITTNOTIFY64",)}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def observed() -> dict:
    out = run_python(OBSERVE_COMPILE, clean_env())
    return json.loads(out.strip().splitlines()[-1])


def test_compile_model_is_observed_once_inside_the_call(observed):
    regions = [
        e
        for e in observed["events"]
        if e["domain"] == "ov::phases" and e["name"] == "Compile model"
    ]
    assert len(regions) == 1
    t0, t1 = observed["window"]
    assert t0 <= regions[0]["begin_ns"] < regions[0]["end_ns"] <= t1
    assert any("libopenvino.so" in lib for lib in observed["bound"])
    assert any("intel_cpu_plugin" in lib for lib in observed["bound"])
    assert observed["problem"] is None


def test_spans_nest_inside_their_parents_on_each_thread(observed):
    spans = [e for e in observed["events"] if e["kind"] in ("task", "region", "frame")]
    region = next(e for e in spans if e["name"] == "Compile model")
    inside = [e for e in spans if e is not region]
    assert inside, "expected plugin tasks during compile_model"
    # The plugin's work (oneDNN primitive creation) happens within the compile region.
    creates = [e for e in inside if e["domain"] == "dnnl::primitive::create"]
    assert creates
    assert all(
        region["begin_ns"] <= e["begin_ns"] <= e["end_ns"] <= region["end_ns"] for e in creates
    )
    # Every span at depth d > 0 lies inside a span at depth d - 1 on its own thread (one that
    # ended, or one still open when the events were read).
    candidates = observed["later"] + [{**o, "end_ns": float("inf")} for o in observed["open"]]
    for e in spans:
        if e["depth"] == 0 or e["kind"] == "region":
            continue
        parents = [
            p
            for p in candidates
            if p["tid"] == e["tid"]
            and p["depth"] == e["depth"] - 1
            and p["begin_ns"] <= e["begin_ns"]
            and e["end_ns"] <= p["end_ns"]
        ]
        assert parents, e


def test_aggregates_agree_with_the_events(observed):
    by_key: dict[tuple[str, str], list[int]] = {}
    for e in observed["events"]:
        if e["kind"] in ("task", "region", "frame"):
            by_key.setdefault((e["domain"], e["name"]), []).append(e["end_ns"] - e["begin_ns"])
    aggs = {(a["domain"], a["name"]): a for a in observed["aggregates"]}
    assert set(aggs) == set(by_key)
    for key, durations in by_key.items():
        assert aggs[key]["count"] == len(durations)
        assert aggs[key]["total_ns"] == sum(durations)
        assert aggs[key]["max_ns"] == max(durations)


def test_reset_forgets_and_recording_continues(observed):
    n_events, n_aggs, stats = observed["after_reset"]
    assert (n_events, n_aggs, stats["recorded"]) == (0, 0, 0)
    assert any(e["name"] == "Compile model" for e in observed["second"])
    assert observed["stats"]["recorded"] == len(observed["events"]) + observed["stats"]["dropped"]


def test_threads_named_through_itt(observed):
    names = set(observed["names"].values())
    assert any("Executor" in n for n in names), names


def test_openvino_imported_first_is_reported():
    code = (
        "import openvino\n"
        "import compile_ahead\n"
        "from compile_ahead import itt_collector\n"
        "print(itt_collector.collector_status().problem())\n"
    )
    out = run_python(code, clean_env())
    assert "openvino was loaded before compile_ahead" in out


def test_another_collector_is_left_alone():
    code = (
        "import compile_ahead, os\n"
        "from compile_ahead import itt_collector\n"
        "print(os.environ['INTEL_LIBITTNOTIFY64'], itt_collector.collector_status().problem())\n"
    )
    out = run_python(code, clean_env(INTEL_LIBITTNOTIFY64="/opt/vtune/libittnotify_collector.so"))
    assert out.startswith("/opt/vtune/libittnotify_collector.so ")
    assert "another collector" in out


def test_python_annotations_nest_and_reset_keeps_open_spans():
    # The module records without OpenVINO: annotations go through the same thread stacks.
    from compile_ahead import _itt

    _itt.reset()
    _itt.span_begin("test", "outer")
    _itt.span_begin("test", "inner")
    _itt.span_end("test")
    _itt.reset()  # "outer" stays open across the reset
    _itt.span_end("test")
    events = [e for e in _itt.events() if e[5] == "test"]
    assert [(e[0], e[6], e[4]) for e in events] == [("task", "outer", 0)]
    aggs = [a for a in _itt.aggregates() if a[0] == "test"]
    assert aggs == [("test", "outer", 1, events[0][2] - events[0][1], events[0][2] - events[0][1])]
    _itt.span_end("test")  # nothing open: counted, not recorded
    assert _itt.stats()["unmatched"] == 1
    _itt.reset()


def test_depsort_counters_unavailable_is_not_zero():
    from compile_ahead.profiling.npu_patches.depsort import depsort_reading

    reading = depsort_reading()
    # No patched NPU compiler is loaded in the test process.
    assert reading.available is False
    assert reading.values is None
    assert reading.reason


def test_module_is_a_loadable_collector_library():
    # What OpenVINO's ittnotify copies dlopen and look up: the v2 entry point, exported.
    import ctypes

    import compile_ahead
    from compile_ahead import _itt

    lib = ctypes.CDLL(_itt.__file__)
    entry = getattr(lib, "__itt_api_init", None)  # ctypes raises AttributeError when absent
    assert entry is not None and ctypes.cast(entry, ctypes.c_void_p).value
    assert getattr(lib, "__itt_no_such_entry", None) is None  # the lookup can fail
    # Announced on import (unless the environment named another collector beforehand).
    assert os.environ["INTEL_LIBITTNOTIFY64"] == compile_ahead._ITT_COLLECTOR_PATH


def test_depsort_counters_when_a_patched_compiler_is_loaded(monkeypatch):
    from compile_ahead import _depsort
    from compile_ahead.profiling.npu_patches.depsort import STATS_VERSION, depsort_reading

    counts = {"requests": 10, "hits": 9, "misses": 1, "elements_sorted": 40, "sort_ns": 7}
    counts |= {"invalidations": 2, "shadow_checks": 0}
    loaded = {"library": "/opt/npu/libnpu_compiler.so", "version": STATS_VERSION, **counts}
    monkeypatch.setattr(_depsort, "read_loaded_counters", lambda: loaded)
    reading = depsort_reading()
    assert reading.available is True
    assert reading.values == counts
    assert "/opt/npu/libnpu_compiler.so" in reading.reason


MUTE_INFERENCE = textwrap.dedent(
    """
    import json
    import numpy as np
    import compile_ahead
    from compile_ahead import itt_collector
    from compile_ahead.runtime.compile.graph.step_compile import compile_step
    from compile_ahead.runtime.compile.settings.options import CompileOptions
    from compile_ahead.runtime.graphs.spec import GraphSpec
    from compile_ahead.runtime.sources.resolve import resolve_model

    result = compile_step(resolve_model("tiny"), GraphSpec(capacity=128, chunk=1,
                          kv_precision="bf16"), CompileOptions(device="CPU"))

    def domains_of_three_steps():
        itt_collector.reset()
        for i in range(3):
            result.step.run(np.array([1]), past_length=i)
        return sorted({e.domain for e in itt_collector.events()})

    inference = itt_collector.inference_domains()
    at_start = itt_collector.muted_domains()
    default = domains_of_three_steps()
    itt_collector.set_domains_enabled(inference, True)
    unmuted = domains_of_three_steps()
    itt_collector.set_domains_enabled(inference, False)
    muted = domains_of_three_steps()
    print(json.dumps({"inference": inference, "at_start": at_start, "default": default,
                      "unmuted": unmuted, "muted": muted}))
    """
)


def test_inference_domains_start_muted_and_can_be_unmuted():
    out = json.loads(run_python(MUTE_INFERENCE, clean_env()).strip().splitlines()[-1])
    inference = {"ov::op::cpu::exec", "ov::op::cpu::details", "dnnl::primitive::execute"}
    assert set(out["inference"]) == inference
    assert sorted(out["at_start"]) == sorted(inference)
    assert not inference & set(out["default"])  # per-node spans cost every step: off at first
    assert "ov::phases::inference" in out["default"]  # other domains keep reporting
    assert inference <= set(out["unmuted"])
    assert not inference & set(out["muted"])
