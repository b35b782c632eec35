"""`compile-ahead ab serve` through the public command: serving policies paired over one trace,
each trial a fresh `compile-ahead serve`. Its analysis is held against an independent one made
from the trials' own report files (numpy's percentile of the per-request TTFTs, scipy's paired
t on the per-pair differences); bad input is one line with exit 2 and writes nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from compile_ahead.commands.main import main

SHORT = Path(__file__).parent / "fixtures" / "serving" / "short.jsonl"
COSTS = {
    "compile_s": {"base": 1.0, "per_batch": 0.1},
    "step_s": {"base": 0.01, "per_slot": 1e-5},
    "bucket_bytes": {"base": 2**30},
    "prefill_s": {"per_token": 0.001},
}
GRID = ["--buckets", "1,2", "--ladder", "16,32,64"]
QUIET = ["--warmup", "0", "--no-plot", "--quiet"]


@pytest.fixture
def costs(tmp_path) -> Path:
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(COSTS))
    return path


def trial_reports(out: Path) -> dict[tuple[str, int], dict]:
    """(arm, block) -> the report file that trial wrote (trial-INDEX-bBLOCK-ARM.json)."""
    found = {}
    for path in out.glob("trial-*-b*-*.json"):
        m = re.fullmatch(r"trial-\d+-b(\d+)-(.+)\.json", path.name)
        assert m is not None, path
        found[(m.group(2), int(m.group(1)))] = json.loads(path.read_text())
    return found


def endpoint(data: dict, key: str) -> dict:
    return next(e for e in data["endpoints"] if e["key"] == key)


def test_a_simulated_serve_experiment_reports_each_trials_own_figures(tmp_path, costs):
    """On the cost model (nothing compiles): one pair over a generated trace; each endpoint's
    values are the trials' reports' figures, and `ab report` rebuilds the same analysis."""
    out = tmp_path / "res"
    argv = ["ab", "serve", "--simulate", str(costs), "--arms", "up-front,ahead", *GRID,
            "--count", "8", "--rate", "4", "--seed", "3", "--cold-s", "1", "--pairs", "1",
            *QUIET, "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    data = json.loads((out / "serve_ab.json").read_text())
    exp = json.loads((out / "experiment.json").read_text())
    assert exp["kind"] == "serve" and exp["trace"]["requests"] == 8
    assert exp["trace"]["generated"]["seed"] == 3
    reports = trial_reports(out)
    assert set(reports) == {("up-front", 0), ("ahead", 0)}
    for arm in ("up-front", "ahead"):
        report = reports[(arm, 0)]
        assert report["policy"] == arm and report["simulated"] is True
        assert endpoint(data, "time_to_ready")["values"][arm] == [
            report["engine"]["time_to_ready_s"]
        ]
        assert endpoint(data, "peak_rss")["values"][arm] == [report["engine"]["peak_rss_bytes"]]
        ttfts = [r["ttft_s"] for r in report["requests"] if r["ttft_s"] is not None]
        p99 = pytest.approx(np.percentile(ttfts, 99))
        assert endpoint(data, "ttft_p99")["values"][arm] == [p99]
    # every trial replayed the trace written into the directory, under its own policy
    commands = {a["name"]: a["command"] for a in exp["arms"]}
    assert commands["ahead"][commands["ahead"].index("--requests") + 1] == str(
        (out / "trace.jsonl").resolve()
    )
    served = next(t for t in data["tallies"] if t["label"] == "Requests served (per trial)")
    assert served["per_arm"] == {a: "8 / 8 finished, 0 refused" for a in ("up-front", "ahead")}
    before = (out / "serve_ab.json").read_text()
    assert main(["ab", "report", str(out), "--no-plot"]) == 0
    again = json.loads((out / "serve_ab.json").read_text())
    assert again["endpoints"] == json.loads(before)["endpoints"]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--arms", "up-front,eager"], "unknown policy eager"),
        (["--arms", "ahead"], "give at least two policies"),
        (["--arms", "ahead,ahead"], "each policy may appear once"),
        (["--arms", "up-front,ahead", "--requests", "BAD"], "line 2: not JSON"),
        (["--arms", "up-front,ahead", "--requests", "SHORT", "--seed", "1"], "give one"),
        (["--arms", "up-front,ahead", "--prompt-lengths", "uniform:9"], "--prompt-lengths"),
        (["--arms", "up-front,ahead", "--kv", "paged"], "--kv 'paged'"),
        (["--arms", "up-front,ahead", "--count", "2000000"], "1 to 1000000 requests"),
        (["--arms", "up-front,ahead", "--rate", "nan"], "must be positive and finite"),
        (["--arms", "up-front,ahead", "--buckets", "2,1"], "strictly increasing"),
        (["--arms", "up-front,ahead", "--prefill-chunk", "16"], "a cost model (--simulate)"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, costs, capsys, extra, says):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt_ids": [1], "max_new_tokens": 2}\n{oops\n')
    extra = [{"BAD": str(bad), "SHORT": str(SHORT)}.get(x, x) for x in extra]
    out = tmp_path / "res"
    code = main(["ab", "serve", "--simulate", str(costs), *GRID, *extra, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert says in err and len(err.splitlines()) == 1, err
    assert not out.exists()


@pytest.fixture(scope="module")
def device_experiment(tmp_path_factory) -> Path:
    """The tiny preset at the f32 hint, the short trace, on-demand against ahead, two pairs,
    each trial writing its Perfetto trace: four trials compiling tiny buckets for real."""
    out = tmp_path_factory.mktemp("serve-ab") / "res"
    argv = ["ab", "serve", "--model", "tiny", "--inference-precision", "f32",
            "--arms", "on-demand,ahead", *GRID, "--requests", str(SHORT), "--pairs", "2",
            "--trial-traces", *QUIET, "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    return out


@pytest.mark.slow  # device_experiment compiles for real
def test_a_device_experiment_equals_scipys_paired_t_on_its_trials_reports(device_experiment):
    """Each endpoint's paired differences and interval equal scipy's paired t on the figures
    of the trials' own reports; every request's tokens agree across policies."""
    out = device_experiment
    data = json.loads((out / "serve_ab.json").read_text())
    reports = trial_reports(out)

    def ttft_p50(report: dict) -> float:
        return float(np.percentile([r["ttft_s"] for r in report["requests"]], 50))

    figures = {
        "ttft_p50": ttft_p50,
        "time_to_ready": lambda r: r["engine"]["time_to_ready_s"],
        "output_tok_s": lambda r: r["requests_metrics"]["output_tokens_per_s"],
        "compile_request_path": lambda r: r["engine"]["compile_s"]["request_path"],
    }
    checked = 0
    for key, figure in figures.items():
        control = [figure(reports[("on-demand", b)]) for b in range(2)]
        treatment = [figure(reports[("ahead", b)]) for b in range(2)]
        summary = endpoint(data, key)["comparisons"]["ahead"]
        assert summary["diffs"] == pytest.approx(np.subtract(treatment, control))
        if np.ptp(np.subtract(treatment, control)) > 0:
            ci = stats.ttest_rel(treatment, control).confidence_interval(0.95)
            assert (summary["ci_low"], summary["ci_high"]) == pytest.approx((ci.low, ci.high))
            checked += 1
    assert checked >= 2  # wall-clock endpoints differ from pair to pair
    tokens = next(t for t in data["tallies"] if t["label"] == "Tokens equal to on-demand's")
    assert tokens["per_arm"]["ahead"] == "20 / 20 requests"
    assert "tiny [SYNTHETIC weights] on CPU" in data["context"]["model"]


@pytest.mark.slow  # device_experiment compiles for real
def test_the_compare_page_shows_the_two_policy_comparison(device_experiment):
    out = device_experiment
    assert main(["compare", str(out)]) == 0
    html = (out / "compare.html").read_text()
    assert "Serving A/B: on-demand vs ahead" in html
    for label in ("Time to ready", "TTFT p99", "TPOT p50", "Goodput", "Peak RSS"):
        assert label in html
    # each trial's Perfetto trace (--trial-traces) is linked from the page
    assert len(list(out.glob("trial-*.json.pftrace"))) == 4
    assert html.count(".json.pftrace") >= 4


def test_the_compare_page_opens_in_chromium(device_experiment, page, page_events):
    """Offline, without errors; a row per endpoint of the JSON, in its order."""
    out = device_experiment
    assert main(["compare", str(out)]) == 0
    data = json.loads((out / "serve_ab.json").read_text())
    load = page_events.goto((out / "compare.html").resolve().as_uri())
    assert load.errors == [] and load.failed == []
    keys = page.locator("#endpoints-ahead-table tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.key)"
    )
    assert keys == [e["key"] for e in data["endpoints"]]
