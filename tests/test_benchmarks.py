"""The benchmark scripts run from their topic folders (their shared helpers found), write their
results as strict, marked JSON, and `compare` renders such a file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli import run_cli

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(
    p for p in (ROOT / "benchmarks").glob("*/*.py") if not p.parent.name.startswith("_")
)


def _refuse_constant(name: str) -> float:
    raise ValueError(f"not strict JSON: {name}")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT / "benchmarks")))
def test_every_benchmark_starts(script: Path) -> None:
    """`--help` imports everything the script imports, its shared helpers included."""
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage:")


def test_a_benchmark_result_is_strict_json_and_renders_on_the_compare_page(tmp_path) -> None:
    result = tmp_path / "depsort.json"
    script = ROOT / "benchmarks" / "npu_patch" / "depsort_replay.py"
    argv = ["--presets", "tiny", "--chunks", "1", "--reps", "1", "--json", str(result)]
    done = subprocess.run(
        [sys.executable, str(script), *argv],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    document = json.loads(result.read_text(), parse_constant=_refuse_constant)
    assert (document["kind"], document["version"]) == ("compile-ahead.benchmark", 1)
    assert document["benchmark"] == "depsort_replay"
    assert document["args"]["presets"] == ["tiny"] and document["results"]

    page = tmp_path / "page.html"
    shown = run_cli("compare", result, "--out", page)
    assert shown.returncode == 0, shown.stderr
    html = page.read_text()
    assert "benchmark: depsort_replay" in html and "--presets=[&#x27;tiny&#x27;]" in html
    first = document["results"][0]
    assert f"[0].graph</td><td>{first['graph']}</td>" in html


def test_the_startup_benchmark_times_every_arm(tmp_path) -> None:
    """One round of each arm (fresh processes), its warm run checked warm; no time asserted."""
    result = tmp_path / "startup.json"
    script = ROOT / "benchmarks" / "startup" / "startup_vs_openvino.py"
    done = subprocess.run(
        [sys.executable, str(script), "--rounds", "1", "--json", str(result)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--help / import openvino:" in done.stdout
    summary = json.loads(result.read_text(), parse_constant=_refuse_constant)["results"]["summary"]
    assert set(summary) == {"import openvino", "--help", "run (warm)"}
    assert summary["import openvino"]["wall_ratio"] == 1.0
    assert all(arm["wall_median_s"] > 0 for arm in summary.values())


def test_a_value_that_is_not_a_number_is_written_as_null(tmp_path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from _shared.results import write_result
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    import argparse

    path = write_result(
        tmp_path / "r.json", "x", {"median": float("nan"), "top": [float("inf"), 1.5]},
        argparse.Namespace(out=tmp_path / "r.json"),
    )  # fmt: skip
    document = json.loads(path.read_text(), parse_constant=_refuse_constant)
    assert document["results"] == {"median": None, "top": [None, 1.5]}
    assert document["args"] == {"out": str(tmp_path / "r.json")}


def test_a_later_layout_of_a_benchmark_result_is_refused_in_one_line(tmp_path) -> None:
    result = tmp_path / "later.json"
    result.write_text(
        json.dumps({"kind": "compile-ahead.benchmark", "version": 2, "benchmark": "x"})
    )
    refused = run_cli("compare", result)
    assert refused.returncode == 2
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .endswith("a benchmark result of layout version 2; this reads 1")
    ), refused.stderr
    assert not (tmp_path / "later.compare.html").exists()


def test_the_endpoint_overhead_benchmark_times_both_arms(tmp_path) -> None:
    """The endpoint benchmark on the tiny preset: both arms at each level, every request's
    tokens timed; no time asserted."""
    result = tmp_path / "endpoint.json"
    script = ROOT / "benchmarks" / "serving" / "endpoint_overhead.py"
    argv = [
        "--model",
        "tiny",
        "--ladder",
        "64",
        "--buckets",
        "1,2",
        "--concurrency",
        "1,2",
        "--requests",
        "2",
        "--max-tokens",
        "4",
        "--rounds",
        "1",
        "--json",
        str(result),
    ]
    done = subprocess.run(
        [sys.executable, str(script), *argv], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "HTTP / in-process: TTFT p50" in done.stdout
    levels = json.loads(result.read_text(), parse_constant=_refuse_constant)["results"]["levels"]
    assert set(levels) == {"1", "2"}
    for level in levels.values():
        for arm in ("in-process", "http"):
            (figures,) = level[arm]["rounds"]
            assert figures["requests"] == 2 and figures["tokens"] == 8
        assert level["http_over_in_process_ttft_s_p50"] > 0


def test_policies_paired_pairs_the_endpoints_ab_serve_pairs(tmp_path) -> None:
    """On the simulator: every policy's values per seed are `ab serve`'s endpoints, each
    compared with the control."""
    from compile_ahead.profiling.trials.serve_kind.endpoints import serve_endpoints

    costs = tmp_path / "costs.json"
    costs.write_text(
        json.dumps({"compile_s": {"base": 1.0}, "step_s": {"base": 0.01},
                    "bucket_bytes": {"base": 2**30}, "prefill_s": {"per_token": 0.001}})
    )  # fmt: skip
    result = tmp_path / "paired.json"
    script = ROOT / "benchmarks" / "serving" / "policies_paired.py"
    argv = ["--simulate", str(costs), "--policies", "on-demand,ahead", "--buckets", "1,2",
            "--ladder", "16,32,64", "--pairs", "2", "--requests", "6", "--rate", "4",
            "--json", str(result)]  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(script), *argv], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(result.read_text(), parse_constant=_refuse_constant)["results"]
    keys = [e.key for e in serve_endpoints(cold_s=120.0)]
    assert [list(p) for p in results["pairs"]["ahead"]] == [keys, keys]
    assert "time_to_ready" in results["against_control"]["ahead"]


def test_the_simulator_check_fits_on_one_seed_and_compares_on_another(tmp_path) -> None:
    """sim_check.py on the tiny preset: the cost model fitted from the calibration replays, and
    per policy the simulated / measured ratios (against the median of two device replays,
    their spread beside them) and the time to ready against its floor."""
    result, costs = tmp_path / "sim.json", tmp_path / "costs.json"
    script = ROOT / "benchmarks" / "serving" / "sim_check.py"
    argv = ["--model", "tiny", "--buckets", "1,2", "--ladder", "16,32,64", "--requests", "6",
            "--rate", "20", "--policies", "on-demand,ahead", "--replays", "2",
            "--costs-out", str(costs), "--json", str(result)]  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(script), *argv], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(result.read_text())["results"]  # NaN allowed: a ratio may have none
    fitted = results["fitted_costs"]
    assert fitted == json.loads(costs.read_text())
    assert fitted["fitted_from"]["runs"] == 2 and fitted["step_s"]["table"]
    for policy in ("on-demand", "ahead"):
        ratios = results["ratios"][policy]
        assert ratios["tpot_s_p50"] > 0 and ratios["tpot_s_p50_spread"] >= 1.0
        assert [m["ttft_s"]["n"] for m in ratios["measured"]] == [6, 6]
        ready = ratios["ready"]
        assert ready["time_to_ready_s"] > 0 and ready["over_floor"] >= 1.0 - 1e-9
    same = subprocess.run(
        [sys.executable, str(script), *argv, "--seed", "0"], capture_output=True, text=True
    )
    assert same.returncode == 2 and "--seed must differ from --calibrate-seed" in same.stderr
