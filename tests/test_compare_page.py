"""`compile-ahead compare DIR`: the page of real `ab compile` and `profile-compile` results,
loaded in headless Chromium from file:// with no network; its summary, sorting and filter
checked against the report's JSON; trace links through the local server, checked over raw
HTTP; broken results directories each give a page that says what is wrong."""

from __future__ import annotations

import html
import http.client
import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from cli import command, run_profile_compile
from compare_fixtures import (
    failing_interpreter,
    flagged_endpoints,
    flagged_passes,
    load_json,
    synthetic_experiment,
)
from playwright.sync_api import Page, expect

from compile_ahead.commands.main import main

AB_ARGS = ["--model", "tiny", "--ladder", "16", "--warmup", "0", "--no-plot", "--quiet"]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, Path]:
    """Real results directories: a compile A/B with an A/A arm (--aa) and pass profiles, one
    stopped by a failed trial, one whose arm failed every trial, a profile with and one without
    a pass profile, and an empty directory."""
    root = tmp_path_factory.mktemp("compare")
    dirs = {name: root / name for name in ("ab", "failed", "dead", "profile", "nopasses", "empty")}
    ab = ["ab", "compile", "--arm", "A=current,INFERENCE_PRECISION_HINT=f32",
          "--arm", "B=current,INFERENCE_PRECISION_HINT=bf16", "--aa", "--pairs", "3",
          "--pass-profile", *AB_ARGS, "--out", str(dirs["ab"])]  # fmt: skip
    assert main(ab) == 0
    for name, succeed in (("failed", 1), ("dead", 0)):
        wrapper = failing_interpreter(root / f"python-{name}", succeed)
        argv = ["ab", "compile", "--arm", "A=current", "--arm", f"B={wrapper}", "--pairs", "2",
                *AB_ARGS, "--out", str(dirs[name])]  # fmt: skip
        assert main(argv) == 2  # the run stops at the failed trial
    for name, extra in (("profile", []), ("nopasses", ["--no-pass-profile"])):
        done = run_profile_compile("--model", "tiny", "--ladder", "16", "--out", dirs[name], *extra)
        assert done.returncode == 0, done.stderr
    dirs["empty"].mkdir()
    return dirs


def page_of(directory: Path) -> Path:
    assert main(["compare", str(directory)]) == 0
    return directory / "compare.html"


def page_text(directory: Path) -> str:
    """The page's text as a reader sees it (tags dropped, entities resolved)."""
    raw = (directory / "compare.html").read_text()
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", raw)))


def test_every_page_opens_offline_without_errors(results, page, page_events):
    pages = [page_of(results[name]) for name in ("ab", "failed", "dead", "profile", "nopasses")]
    for html_file in pages:
        url = html_file.resolve().as_uri()
        load = page_events.goto(url)
        assert load.errors == [], (html_file, load.errors)
        assert load.failed == [], (html_file, load.failed)
        assert load.requests == [url], "the page fetched something besides itself"
        assert page.locator("table").count() > 0


def test_empty_directory_is_one_line(results, capsys):
    assert main(["compare", str(results["empty"])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no results to compare" in err[0]
    assert not (results["empty"] / "compare.html").exists()


def _summary_counts(page: Page) -> dict[tuple[str, str], tuple[int, int]]:
    rows = page.locator("#summary-table tbody tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.treatment, r.dataset.scope,"
        " ...[...r.querySelectorAll('.count')].map(c => +c.textContent)])"
    )
    return {(t, s): (reg, imp) for t, s, reg, imp in rows}


def _counts(flags: dict) -> tuple[int, int]:
    found = list(flags.values())
    return found.count("regression"), found.count("improvement")


def _expected_counts(data: dict) -> dict[tuple[str, str], tuple[int, int]]:
    """From the JSON's values: A-aa ran the control's trial again (--aa), so it sets B's
    floor; A-aa's own floor rests on its own pairs."""
    expected = {}
    for treatment, noise in (("B", "A-aa"), ("A-aa", None)):
        expected[(treatment, "endpoints")] = _counts(flagged_endpoints(data, treatment, noise))
        expected[(treatment, "passes")] = _counts(flagged_passes(data, treatment, noise))
    return expected


def test_summary_sorting_and_filter_follow_the_json(results, page, page_events):
    html_file = page_of(results["ab"])
    data = load_json(results["ab"] / "compile_ab.json")
    ranked = data["passes"]["comparisons"]["B"]["ranked"]
    page_events.goto(html_file.resolve().as_uri())
    assert _summary_counts(page) == _expected_counts(data)
    # sorting by the delta puts the largest change (treatment - control) first
    page.locator("#passes-B-table th", has_text=re.compile("^Δ ms$")).click()
    first = page.locator("#passes-B-table tbody tr td:nth-child(5)").first.get_attribute("data-v")
    assert float(first) == pytest.approx(max(r["comparison"]["mean_diff"] for r in ranked))
    shown = _flagged_only(page, "passes-B-table")
    assert shown == sorted(f"{p} {m}".lower() for m, p in flagged_passes(data, "B", "A-aa"))


def _flagged_only(page: Page, table: str) -> list[str]:
    """Tick the table's "flagged only" box; the names of the rows left visible."""
    page.locator(f".filters[data-for={table}] .flagged-only").check()
    shown = page.locator(f"#{table} tbody tr:not([hidden])")
    return sorted(shown.evaluate_all("rows => rows.map(r => r.dataset.name)"))


def test_flagged_only_leaves_the_passes_past_the_floor(tmp_path, page, page_events):
    """Made-up passes: +30% and -30% are flagged; a consistent +0.5% (interval excludes 0, the
    smallest sign-flip p 6 pairs allow) stays below the floor the A/A arm sets; a noisy one's
    interval includes 0; the A/A arm itself flags nothing."""
    directory = synthetic_experiment(tmp_path / "synthetic")
    assert main(["ab", "report", str(directory), "--no-plot"]) == 0
    data = load_json(directory / "compile_ab.json")
    expected = sorted(f"{p} {m}".lower() for m, p in flagged_passes(data, "B", "A-aa"))
    assert expected == ["faster m", "moved m"]
    tiny = next(r for r in data["passes"]["comparisons"]["B"]["ranked"] if r["pass"] == "tiny")
    assert tiny["comparison"]["ratio_ci_excludes_one"] and tiny["comparison"]["sign_flip_p"] < 0.05
    assert tiny["judgement"]["status"] == "below the noise floor"
    load = page_events.goto(page_of(directory).resolve().as_uri())
    assert load.errors == [] and load.failed == []
    assert _flagged_only(page, "passes-B-table") == expected
    status = page.locator("#passes-B-table tbody tr[data-name='tiny m'] td.status")
    expect(status).to_have_text("below the noise floor")
    counts = _summary_counts(page)
    assert counts[("B", "passes")] == (1, 1)
    assert counts[("A-aa", "passes")] == (0, 0) and counts[("A-aa", "endpoints")] == (0, 0)


def _rows(raw: str, table: str, attr: str) -> dict[str, str]:
    """The cells (HTML) of each row of a page table, by the row's ``attr``."""
    body = raw.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(rf'<tr[^>]* {attr}="([^"]+)"[^>]*>(.*?)</tr>', body, re.S)
    return {html.unescape(key): cells for key, cells in rows}


def _row_statuses(raw: str, table: str, attr: str) -> dict[str, str]:
    """The verdict cell of each row of a page table, by the row's ``attr``."""
    out = {}
    for key, cells in _rows(raw, table, attr).items():
        status = re.search(r'<td class="status[^"]*"[^>]*>(.*?)</td>', cells, re.S)
        out[key] = html.unescape(status.group(1))
    return out


def test_page_shows_the_reports_judgements_and_mde(results):
    """Every verdict on the page is the JSON report's (endpoints and passes), and every
    endpoint's MDE is there as the JSON states it."""
    raw = page_of(results["ab"]).read_text()
    data = load_json(results["ab"] / "compile_ab.json")
    for t in ("B", "A-aa"):
        shown = _row_statuses(raw, f"endpoints-{t}-table", "data-key")
        cells = _rows(raw, f"endpoints-{t}-table", "data-key")
        for e in data["endpoints"]:
            j = e["judgements"][t]
            if e["unavailable"]:
                assert shown[e["key"]].startswith("unavailable: "), e["key"]
            elif j is not None:
                assert shown[e["key"]] == j["status"], e["key"]
            mde = (e["comparisons"][t] or {}).get("mde_pct")
            if mde is not None:
                assert f'data-v="{mde:.9g}"' in cells[e["key"]], e["key"]
        passes = _row_statuses(raw, f"passes-{t}-table", "data-name")
        ranked = data["passes"]["comparisons"][t]["ranked"]
        assert passes == {f"{r['pass']} {r['manager']}".lower(): r["judgement"]["status"]
                          for r in ranked}  # fmt: skip
    assert "would have been seen" in page_text(results["ab"])
    # The default endpoint, named as the JSON names it, with its verdict in each comparison.
    lead = data["default_endpoint"]
    label = next(e["label"] for e in data["endpoints"] if e["key"] == lead["key"])
    statuses = {
        t: next(e for e in data["endpoints"] if e["key"] == lead["key"])["judgements"][t]["status"]
        for t in ("B", "A-aa")
    }
    (headline,) = re.findall(r'<p class="headline">(.*?)</p>', raw)
    text = html.unescape(re.sub(r"<[^>]+>", "", headline))
    assert text.startswith(f"Default endpoint: {label} ({lead['rule']}). ")
    verdicts = text.split(f"({lead['rule']}). ", 1)[1].split("; ")
    # "B vs A: +1.2%, no detectable effect": each comparison by its name, in any order.
    shown = {v.split(" vs ", 1)[0]: v.rsplit(", ", 1)[-1] for v in verdicts}
    assert shown == statuses


def test_older_directory_without_the_aa_marker(tmp_path):
    """A results directory written before `--aa` recorded its marker: no arm is taken for an
    A/A arm, whatever it ran; each floor is the comparison's own, as `ab report` says."""
    directory = synthetic_experiment(tmp_path / "old")
    exp = load_json(directory / "experiment.json")
    for arm in exp["arms"]:
        arm.pop("aa_of", None)
    (directory / "experiment.json").write_text(json.dumps(exp))
    assert main(["ab", "report", str(directory), "--no-plot"]) == 0
    data = load_json(directory / "compile_ab.json")
    assert data["aa_arms"] == []
    page_of(directory)
    text = page_text(directory)
    assert "No A/A arm (`ab compile --aa` runs one)" in text
    assert "(A/A)" not in text and "Noise floor from A/A arm" not in text
    statuses = _row_statuses((directory / "compare.html").read_text(), "passes-B-table",
                             "data-name")  # fmt: skip
    tiny = next(r for r in data["passes"]["comparisons"]["B"]["ranked"] if r["pass"] == "tiny")
    assert statuses["tiny m"] == tiny["judgement"]["status"] == "regression"


def test_calibration_page_is_labelled(tmp_path):
    """An `ab calibrate` experiment: the label on top, the calibration arm's comparison named
    so, and the calibration table (expected and measured effect) from the analysis."""
    directory = synthetic_experiment(tmp_path / "cal")
    exp = load_json(directory / "experiment.json")
    spin = {"16": 0.05}
    exp["calibration"] = {"delta_pct": 30.0, "control": "A", "arm": "B", "spin_s": spin,
                          "control_cpu_s": {"16": 0.2}, "trials": 2}  # fmt: skip
    (directory / "experiment.json").write_text(json.dumps(exp))
    assert main(["ab", "report", str(directory), "--no-plot"]) == 0
    rows = load_json(directory / "compile_ab.json")["calibration"]["endpoints"]
    page_of(directory)
    raw = (directory / "compare.html").read_text()
    text = page_text(directory)
    assert text.count("CALIBRATION: arm B is the control A plus a CPU spin of 30%") == 1
    assert "B vs A (CALIBRATION)" in text and "CALIBRATION: A/A and A/A+30% (arm B)" in text
    table = raw.split('id="calibration-table"', 1)[1].split("</table>", 1)[0]
    assert re.findall(r'data-key="([^"]+)"', table) == [r["key"] for r in rows]
    total = next(r for r in rows if r["key"] == "compile_total")
    assert total["delta"]["expected_pct"] is not None
    assert f'data-v="{total["delta"]["expected_pct"]:.9g}"' in table


def test_failed_trial_and_dead_arm_pages_say_so(results):
    page_of(results["failed"])
    text = page_text(results["failed"])
    assert "PARTIAL: 2 of 4 trials completed" in text
    assert "trial 2 (arm B, block 1) failed: exit code 3: injected trial failure" in text
    page_of(results["dead"])
    text = page_text(results["dead"])
    assert "trial 1 (arm B, block 0) failed: exit code 3: injected trial failure" in text
    assert "arm B: no measured trial completed, so it has no values" in text
    assert "B vs A: no complete pair, nothing to compare" in text


def test_profile_pages(results):
    page_of(results["nopasses"])
    assert "No pass profile: profile-compile ran with --no-pass-profile." in page_text(
        results["nopasses"]
    )
    page_of(results["profile"])
    raw = (results["profile"] / "compare.html").read_text()
    assert 'href="trace/trace.pftrace"' in raw
    report = load_json(results["profile"] / "report.json")
    # every pass the profile's own table counted is on the page, with its call count
    for row in report["top_passes"]["rows"]:
        assert f"<td>{html.escape(row['pass'])}</td>" in raw


def test_a_profile_directory_with_its_page_is_still_replaced_by_a_new_run(results, tmp_path):
    """The page written into a `profile-compile` directory is the tool's own file: a later
    `profile-compile --out` into that directory replaces it (a file of the user's is refused)."""
    directory = tmp_path / "profile"
    shutil.copytree(results["profile"], directory)
    page_of(directory)
    again = ("--model", "tiny", "--ladder", "16", "--no-pass-profile", "--out", directory)
    done = run_profile_compile(*again)
    assert done.returncode == 0, done.stderr
    assert not (directory / "compare.html").exists()  # the new run's output has no page yet
    page_of(directory)
    (directory / "notes.txt").write_text("mine")
    refused = run_profile_compile(*again)
    assert refused.returncode == 2 and "notes.txt" in refused.stderr


def test_rerun_command_is_the_recorded_one_without_out(results):
    """The experiment's command line (as main() got it) runs again from where it ran, into a
    new directory of its own."""
    exp = load_json(results["ab"] / "experiment.json")
    argv = exp["invocation"]["argv"]
    assert argv[:3] == ["compile-ahead", "ab", "compile"] and "--out" in argv
    out = argv.index("--out")
    expected = f"cd {shlex.quote(exp['invocation']['cwd'])} && " + shlex.join(
        argv[:out] + argv[out + 2 :]
    )
    page_of(results["ab"])
    assert expected in page_text(results["ab"])


def test_aa_arm_sets_the_floor(results):
    """The arm `--aa` marked is the A/A arm: it sets the other comparison's floor."""
    page_of(results["ab"])
    text = page_text(results["ab"])
    assert "Endpoints: B vs A Noise floor from A/A arm A-aa." in text
    assert (
        "Endpoints: A-aa vs A (A/A: the control again) Noise floor from own paired differences."
        in text
    )
    assert "A-aa vs A (A/A)" in text


def test_a_trial_trace_beside_its_result_gets_a_link(results, tmp_path):
    directory = tmp_path / "ab"
    shutil.copytree(results["ab"], directory)
    first = sorted(directory.glob("trial-000-*.json"))[0]
    shutil.copy(results["profile"] / "trace.pftrace", first.with_suffix(".pftrace"))
    page_of(directory)
    assert f'href="trace/{first.stem}.pftrace"' in (directory / "compare.html").read_text()


def _get(port: int, path: str, host: str | None = None) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers={"Host": host or f"127.0.0.1:{port}"})
    response = conn.getresponse()
    response.body = response.read()  # type: ignore[attr-defined]
    conn.close()
    return response


def test_trace_link_fetches_the_trace_through_the_local_server(results):
    """`compare --open`: the page over HTTP; its trace link redirects into the Perfetto UI with
    a URL that serves the trace's bytes (as `trace open` does); other Host names refused."""
    proc = subprocess.Popen(
        command("compare", results["profile"], "--open", "--no-browser"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving the page at http://127.0.0.1:"), line
        address = urlsplit(line.split()[4])
        port, base = address.port, address.path  # the path carries the server's token
        page = _get(port, base)
        assert page.status == 200 and b'href="trace/trace.pftrace"' in page.body
        assert _get(port, base, host="evil.example:80").status == 403
        assert _get(port, base + "trace/other.pftrace").status == 404
        redirect = _get(port, base + "trace/trace.pftrace")
        assert redirect.status == 302
        link = redirect.getheader("Location")
        assert link.startswith("https://ui.perfetto.dev/#!/?url=http://127.0.0.1:")
        trace_url = urlsplit(link.split("url=", 1)[1])
        trace = _get(trace_url.port, trace_url.path)
        assert trace.status == 200
        assert trace.getheader("Access-Control-Allow-Origin") == "https://ui.perfetto.dev"
        assert trace.body == (results["profile"] / "trace.pftrace").read_bytes()
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err  # Ctrl-C ends every command alike
    assert "server closed" in out and "Traceback" not in err


def test_on_file_the_page_says_how_to_start_the_server(results, page, page_events):
    url = page_of(results["profile"]).resolve().as_uri()
    page_events.goto(url)
    hint = page.locator("#server-hint")
    expect(hint).to_have_js_property("hidden", False)
    expect(hint).to_contain_text(f"compile-ahead compare {results['profile'].resolve()} --open")
    page.locator("a.trace").first.click()
    assert page.url == url  # no navigation to a missing file


def test_pooled_report_page(tmp_path):
    """Runs of one experiment pooled by `ab report DIR1 DIR2 --out NEW` (their command lines
    differ, at least in --out): the page analyses every pair and names the runs."""
    runs = [synthetic_experiment(tmp_path / f"run{i}", started=1000.0 * i) for i in (1, 2)]
    for i, run in enumerate(runs):
        exp = load_json(run / "experiment.json")
        exp["invocation"] = {"argv": ["compile-ahead", "ab", "--out", f"run{i}"], "cwd": "/x"}
        (run / "experiment.json").write_text(json.dumps(exp))
    pooled = tmp_path / "pooled"
    assert main(["ab", "report", *map(str, runs), "--out", str(pooled), "--no-plot"]) == 0
    page_of(pooled)
    text = page_text(pooled)
    assert f"pooled from {runs[0]}, {runs[1]}" in text
    assert "12 blocks" in text
    # the --aa marker is kept in the pooled experiment (which holds no manifests)
    assert "A-aa vs A (A/A)" in text and "Noise floor from A/A arm A-aa." in text
    assert "cd /x && compile-ahead ab" in text


def test_schedule_ab_page(tmp_path, page, page_events):
    """An `ab schedule` run (the trial command a stand-in for `compile-ahead run --report`):
    its endpoints and counts on the page, flagged as its JSON says."""
    from fake_schedule_run import FAKE_RUN

    script = tmp_path / "fake_run.py"
    script.write_text(FAKE_RUN)
    out = tmp_path / "res"
    argv = ["ab", "schedule", "--model", "tiny", "--arms", "i1,i2", "--ladder", "64,128",
            "--prompt-len", "8", "--pairs", "4", "--warmup", "0", "--quiet", "--no-plot",
            "--command", f"{sys.executable} {script} {{schedule}} {{ladder}} {{out}}",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    data = load_json(out / "schedule_ab.json")
    flagged = set(flagged_endpoints(data, "i2", None))  # its keys
    assert "foreground_compile" in flagged  # i2 compiles one rung in the foreground, i1 two
    load = page_events.goto(page_of(out).resolve().as_uri())
    assert load.errors == [] and load.failed == []
    rows = page.locator("#endpoints-i2-table tbody tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.key, r.querySelector('td.status').textContent])"
    )
    verdicts = dict(rows)
    assert {k for k, v in verdicts.items() if v in ("regression", "improvement")} == flagged
    assert verdicts["foreground_compile"] == "improvement"
    assert "Boundary top-1 agreement with i1" in page_text(out)
