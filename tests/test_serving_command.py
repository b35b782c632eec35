"""`compile-ahead serve` as a user runs it, on the simulator (nothing compiles): the report,
the summary, the Perfetto trace read back by Perfetto's trace processor, and bad input refused
in one line with exit 2 before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli import run_cli
from trace_processor import NodeTraceProcessor, unavailable_reason

from compile_ahead.commands.main import main

SHORT = Path(__file__).parent / "fixtures" / "serving" / "short.jsonl"
COSTS = {
    "compile_s": {"base": 1.0, "per_batch": 0.1},
    "step_s": {"base": 0.01, "per_slot": 1e-5},
    "bucket_bytes": {"base": 2**30},
    "prefill_s": {"per_token": 0.001},
}
needs_tp = pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))


@pytest.fixture
def costs(tmp_path) -> Path:
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(COSTS))
    return path


def serve(*argv):
    return run_cli("serve", *argv, timeout=60)


@pytest.mark.slow  # Perfetto's trace processor under node
@needs_tp
def test_a_simulated_replay_reports_its_metrics_and_traces_each_row(tmp_path, costs):
    out, trace = tmp_path / "report.json", tmp_path / "serve.pftrace"
    done = serve(
        "--requests", SHORT, "--simulate", costs, "--ladder", "16,32,48", "--policy", "ahead",
        "--out", out, "--trace", trace, "--goodput", "ttft:2000", "tpot:50",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "requests: 10 finished, 0 refused of 10" in done.stdout
    report = json.loads(out.read_text())
    metrics = report["requests_metrics"]
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        assert set(metrics[key]) == {"n", "mean", "p50", "p90", "p99"}
    assert metrics["slo"] == {"ttft_s": 2.0, "tpot_s": 0.05, "e2e_s": None}
    assert report["engine"]["clock"] == "virtual" and report["simulated"] is True
    with NodeTraceProcessor.open(trace) as tp:
        rows = tp.rows(
            "select t.name as track, s.name as name from slice s join track t on s.track_id = t.id"
        )
    on_rows = {r["name"] for r in rows if r["track"].startswith("row ")}
    assert on_rows == {f"gen-{i}" for i in range(10)}
    buckets = [r["name"] for r in rows if r["track"] == "active bucket"]
    assert len(buckets) == report["engine"]["switches"]
    compiles = [r for r in rows if r["track"].startswith("compile (")]
    assert len(compiles) == len(report["engine"]["compiles"])


def test_a_request_beyond_the_top_capacity_is_refused_and_the_others_are_served(tmp_path, costs):
    requests = tmp_path / "r.jsonl"
    lines = [
        {"id": "ok", "prompt_ids": [1, 2], "max_new_tokens": 4},
        {"id": "long", "arrival_s": 0.1, "prompt_ids": [1] * 40, "max_new_tokens": 20},
        {"id": "ok2", "arrival_s": 0.2, "prompt_ids": [3], "max_new_tokens": 4},
    ]
    requests.write_text("\n".join(json.dumps(x) for x in lines))
    out = tmp_path / "report.json"
    done = serve("--requests", requests, "--simulate", costs, "--ladder", "16,32,48", "--out", out)
    assert done.returncode == 0, done.stderr
    counts = json.loads(out.read_text())["requests_metrics"]["requests"]
    assert counts["finished"] == 2 and counts["refused"] == 1
    assert counts["refusals"][0]["id"] == "long"


@pytest.mark.parametrize(
    ("extra", "body", "why"),
    [
        ([], '{"prompt_ids": [1], "max_new_tokens": 2}\n{bad', "line 2: not JSON"),
        (["--policy", "eager"], None, "unknown serving policy 'eager'"),
        (["--memory-budget", "0.5"], None, "cannot hold the bucket"),
        (["--buckets", "2,1"], None, "batch sizes must be strictly increasing"),
        (["--ladder", "32,16"], None, "ladder"),
        (["--goodput", "ttft"], None, "give positive milliseconds"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, costs, extra, body, why):
    requests = tmp_path / "r.jsonl"
    requests.write_text(body or '{"prompt_ids": [1], "max_new_tokens": 2}\n')
    out = tmp_path / "report.json"
    done = serve("--requests", requests, "--simulate", costs, "--out", out, *extra)
    assert done.returncode == 2, done.stdout + done.stderr
    assert why in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        (["--model", "tiny", "--prefill-chunk", "0"], "--prefill-chunk 0: a whole number"),
        (["--simulate", "COSTS", "--prefill-chunk", "16"], "a cost model (--simulate) states"),
    ],
)
def test_a_prefill_chunk_is_refused_in_one_line_unless_a_device_can_take_it(
    tmp_path, costs, capsys, extra, why
):
    out = tmp_path / "report.json"
    extra = [str(costs) if x == "COSTS" else x for x in extra]
    assert main(["serve", "--requests", str(SHORT), "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert why in err and len(err.splitlines()) == 1, err
    assert not out.exists()


def test_the_commands_default_prefill_chunk_is_the_engines():
    from compile_ahead.commands.serve import DEFAULT_PREFILL_CHUNK, KV_MODES
    from compile_ahead.runtime.serving import device_executor

    assert DEFAULT_PREFILL_CHUNK == device_executor.PREFILL_CHUNK
    assert KV_MODES == device_executor.KV_MODES


@pytest.mark.parametrize(
    "argv, flag, mode",
    [
        (["--out", "r.json"], "--out", "the request file's replay"),
        (["--simulate", "c.json"], "--simulate", "the request file's replay"),
        (["--costs-out", "c.json"], "--costs-out", "the request file's replay"),
        (["--requests", str(SHORT), "--port", "9"], "--port", "listening"),
        (["--requests", str(SHORT), "--token-file", "t"], "--token-file", "listening"),
    ],
)
def test_the_other_modes_flags_are_refused_in_one_line(argv, flag, mode):
    """Without --requests the command listens (the endpoint's tests, test_endpoint_*.py); a
    replay's flag there, or a server's with --requests, is refused rather than ignored."""
    done = serve("--model", "tiny", *argv)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"compile-ahead: error: {flag} is for {mode}"
        + (" (--requests)" if "replay" in mode else " (no --requests)")
    ]


def test_a_listening_servers_trace_over_its_token_file_is_refused_before_it_starts(tmp_path):
    token = tmp_path / "token"
    token.write_text("the-owners-token-0123456789abcdef\n")
    token.chmod(0o600)
    done = serve("--model", "tiny", "--token-file", token, "--trace", token, "--port", "0")
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "--trace" in done.stderr, done.stderr
    assert token.read_text() == "the-owners-token-0123456789abcdef\n"


def test_a_cost_model_fitted_from_a_replay_on_the_device_drives_the_simulator(tmp_path):
    """--costs-out: a model of the buckets the device stepped, which the simulator reads back
    (--simulate) to replay the same requests."""
    fitted, device_out, sim_out = (tmp_path / n for n in ("c.json", "d.json", "s.json"))
    common = ("--requests", SHORT, "--ladder", "16,32,48", "--buckets", "1,2", "--policy", "ahead")
    done = serve("--model", "tiny", *common, "--out", device_out, "--costs-out", fitted)
    assert done.returncode == 0, done.stderr
    assert f"cost model: {fitted}" in done.stdout
    model = json.loads(fitted.read_text())
    assert model["fitted_from"]["runs"] == 1 and model["kv"] == "reserve"
    device = json.loads(device_out.read_text())
    used = {f"{b}x{c}" for b, c in device["engine"]["buckets_used"]}
    assert model["kv_bytes_per_slot"] > 0 and set(model["step_s"]["table"]) <= used
    assert all(v > 0 for v in model["step_s"]["table"].values())
    done = serve("--simulate", fitted, *common, "--out", sim_out)
    assert done.returncode == 0, done.stderr
    sim = json.loads(sim_out.read_text())
    for report in (device, sim):
        assert report["requests_metrics"]["requests"]["finished"] == 10
    tokens = [r["requests_metrics"]["output_tokens"] for r in (device, sim)]
    assert tokens[0] == tokens[1]


def test_costs_out_is_refused_with_simulate_and_over_an_input(tmp_path, costs):
    out = tmp_path / "c.json"
    done = serve("--requests", SHORT, "--simulate", costs, "--costs-out", out)
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.strip().splitlines() == [
        "compile-ahead: error: --costs-out fits a cost model from a run on the device; "
        "--simulate runs one"
    ]
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(SHORT.read_bytes())
    done = serve("--requests", requests, "--model", "tiny", "--costs-out", requests)
    assert done.returncode == 2 and "--costs-out" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert requests.read_bytes() == SHORT.read_bytes()
