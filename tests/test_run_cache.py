"""The compile cache through `compile-ahead run`: a second run imports every rung it compiled
the first time (same logits), says so per boundary and per job, and --no-cache compiles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compile_ahead.commands.main import main
from compile_ahead.profiling.perfetto.validate import validate_trace

RUN = ["run", "--model", "tiny", "--ladder", "tiny", "--schedule", "i2", "--no-progress"]
RUN += ["--inference-precision", "f32", "--prompt-len", "8"]


def _run(tmp_path: Path, name: str, *extra: str) -> dict:
    out = tmp_path / f"{name}.json"
    assert main([*RUN, "--report", str(out), *extra]) == 0
    return json.loads(out.read_text())


def _digests(report: dict) -> dict[int, str]:
    return {e["context"]: e["logits_digest"] for e in report["boundary_tokens"]}


def test_a_warm_cache_imports_every_rung_with_the_same_logits(tmp_path, capsys):
    cache = ["--cache-dir", str(tmp_path / "cache")]
    cold = _run(tmp_path, "cold", *cache)
    warm = _run(tmp_path, "warm", *cache, "--trace", str(tmp_path / "t.pftrace"))
    assert {j["cache"] for j in cold["compile_jobs"]} == {"miss"}
    assert {j["cache"] for j in warm["compile_jobs"]} == {"hit"}
    assert all(b["cache"] == "hit" and b["import_s"] > 0 for b in warm["boundaries"])
    assert _digests(warm) == _digests(cold)
    assert "4 imported, 0 compiled" in capsys.readouterr().out
    assert validate_trace(tmp_path / "t.pftrace").ok
    assert b"hit" in (tmp_path / "t.pftrace").read_bytes()  # the compile slices say so


def test_no_cache_compiles_everything(tmp_path):
    report = _run(tmp_path, "off", "--no-cache")
    assert {j["cache"] for j in report["compile_jobs"]} == {"off"}
    assert report["compile_cache_dir"] is None


def test_a_changed_capacity_or_precision_never_hits(tmp_path):
    cache = ["--cache-dir", str(tmp_path / "cache")]
    _run(tmp_path, "first", *cache)
    other = ["run", "--model", "tiny", "--ladder", "32,64", "--no-progress", "--prompt-len", "8"]
    out = tmp_path / "other.json"
    assert main([*other, "--inference-precision", "f32", *cache, "--report", str(out)]) == 0
    jobs = json.loads(out.read_text())["compile_jobs"]
    assert {j["capacity"]: j["cache"] for j in jobs} == {32: "hit", 64: "hit"}
    out = tmp_path / "bf16.json"
    assert main([*other, "--inference-precision", "bf16", *cache, "--report", str(out)]) == 0
    assert {j["cache"] for j in json.loads(out.read_text())["compile_jobs"]} == {"miss"}


@pytest.mark.slow
def test_entries_are_written_off_the_critical_path(tmp_path):
    """A foreground compile's entry (the first rung's, the prefill graph's) is written after
    the token it was compiled for, on a helper thread: a slow write adds nothing to the
    foreground compile or to the first decode step's wait, and the report still says stored
    once it is."""

    from compile_ahead.runtime.compile.cache import store
    from compile_ahead.runtime.compile.settings.options import CompileOptions
    from compile_ahead.runtime.ladder.runner import run_ladder
    from compile_ahead.runtime.ladder.settings.capacities import Ladder
    from compile_ahead.runtime.ladder.settings.config import RunConfig
    from compile_ahead.runtime.ladder.settings.faults import Faults
    from compile_ahead.runtime.ladder.settings.run_protocol import teacher_forced
    from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
    from compile_ahead.runtime.sources.resolve import resolve_model

    write_s = 3.0  # far above a tiny compile, on a busy machine too
    slow = Faults(store_delay_s=write_s)  # every entry write takes this long
    source = resolve_model("tiny")
    options = CompileOptions("CPU", "f32", cache=store.CompileCache(tmp_path / "cache"))
    for prompt_len, shape in ((8, None), (40, "dynamic")):  # token by token; a prefill graph
        proto = teacher_forced(source.config.vocab_size, prompt_len, 4)
        settings = RunConfig(
            SCHEDULES["b0"],
            Ladder.parse("64"),
            proto,
            prefill_shape=shape,
            prefill_chunk=None,
            faults=slow,
            options=options,
        )
        report = run_ladder(source, settings).report
        jobs = report.compile_jobs
        assert [j["cache"] for j in jobs] == ["miss"] * len(jobs) and len(jobs) == 1 + bool(shape)
        assert all(j["cache_stored"] for j in jobs), jobs  # reported once written
        assert report.foreground_compile_s < write_s
        assert report.decode_graph_wait_s < write_s
        assert report.critical_path_s + report.cache_store_wait_s >= write_s * 0.9
        (tmp_path / "cache").rename(tmp_path / f"cache-{prompt_len}")  # the next run misses
