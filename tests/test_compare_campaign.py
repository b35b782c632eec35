"""`compile-ahead compare STORE` (or a `campaign report` directory): the page of a real tiny
compile campaign (2 cells x 2 pairs, pass profiles), loaded in headless Chromium from file://
with no network. Its cross-cell table is checked against the report's campaign.json and each
cell's own `ab` JSON (and the flags against the rule recomputed with scipy), a click opens a
cell whose rerun command is then run, cells whose blocks ran on two machines are shown per
machine, and failed blocks, a cell with no block and an empty store are said on the page."""

from __future__ import annotations

import html
import json
import re
import shlex
import sqlite3
from pathlib import Path

import pytest
import scipy.stats
from campaign_helpers import TINY_COMPILE, campaign_command, connect, run
from cli import command
from compare_fixtures import failing_interpreter, flagged_rows
from page_events import PageEvents, PageLoad
from playwright.sync_api import Page, expect

from compile_ahead.commands.ab import check_cell
from compile_ahead.commands.main import main
from compile_ahead.profiling.campaigns.definition.spec import load_spec
from compile_ahead.profiling.campaigns.persistence.store import Store
from compile_ahead.profiling.trials.design import make_plan

TINY_PASSES = TINY_COMPILE + "\n[options]\npass-profile = true\n"
OPEN_WAIT_S = 30.0

# The cross-cell table as the reader sees it: one list per row.
ROWS_JS = """[...document.querySelectorAll('#cells-table tbody tr')].map(r => [
  r.cells[0].textContent, r.cells[1].textContent, r.cells[2].textContent,
  r.cells[3].textContent, r.cells[4].dataset.v ? +r.cells[4].dataset.v : null,
  +r.cells[7].textContent, r.cells[9].textContent, r.dataset.flagged === '1',
  r.dataset.key])"""


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> dict[str, Path]:
    """A real compile campaign of the tiny preset run and reported by the public commands."""
    root = tmp_path_factory.mktemp("campaign-page")
    spec = root / "tiny.toml"
    spec.write_text(TINY_PASSES)
    store = root / "s.sqlite"
    proc = run(campaign_command("run", str(spec), "--store", str(store), "--quiet"), root)
    assert proc.returncode == 0, proc.stderr
    report = root / "report"
    proc = run(campaign_command("report", str(store), "--out", str(report), "--no-plot"), root)
    assert proc.returncode == 0, proc.stderr
    return {"root": root, "store": store, "report": report}


def compare(path: Path, *flags: str, out: Path | None = None) -> Path:
    """`compile-ahead compare PATH`: the page it wrote (by default beside a store, in a
    directory)."""
    given = [] if out is None else ["--out", str(out)]
    assert main(["compare", str(path), *flags, *given]) == 0
    if out is not None:
        return out
    return path / "compare.html" if path.is_dir() else path.with_name(f"{path.stem}.compare.html")


def page_text(page: Path) -> str:
    """The page's text as a reader sees it (tags dropped, entities resolved)."""
    raw = page.read_text()
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", raw)))


def load(page_events: PageEvents, html_file: Path) -> PageLoad:
    url = html_file.resolve().as_uri()
    done = page_events.goto(url)
    assert done.errors == [], (html_file, done.errors)
    assert done.failed == [], (html_file, done.failed)
    assert done.requests == [url], "the page fetched something besides itself"
    return done


def cell_of_row(page: Page, anchor: str):
    """The verdict cell (the tenth) of a cross-cell table row of the cell ``anchor``."""
    return page.locator(f'#cells-table tr[data-cell="{anchor}"] > *').nth(9)


def expected_rows(report: dict) -> list[list]:
    return [
        [r["cell"], (r["machine"] or "")[:8], r["label"], r["versus"],
         None if r["comparison"] is None else r["comparison"]["mean_diff"], r["pairs"],
         r["verdict"], r["flagged"], r["endpoint"]]
        for r in report["rows"]
    ]  # fmt: skip


def assert_rows_equal(seen: list[list], wanted: list[list]) -> None:
    assert len(seen) == len(wanted) > 0
    for got, row in zip(seen, wanted, strict=True):
        assert got[4] == pytest.approx(row[4], rel=1e-6), (got, row)
        assert got[:4] + got[5:] == row[:4] + row[5:]


def test_campaign_pages_open_offline_without_errors(campaign, page, page_events):
    pages = [compare(campaign["store"]), campaign["report"] / "compare.html"]
    assert pages[1].is_file(), "campaign report writes the page beside its tables"
    for html_file in pages:
        load(page_events, html_file)
        expect(page.locator("details.cell")).to_have_count(2)
        assert page.locator("svg.forest").count() > 0
        assert page.locator("svg.history").count() > 0
        assert "Traceback" not in pages[0].read_text()


def test_cross_cell_rows_and_verdicts_equal_the_report_json(campaign, page, page_events):
    """Both pages (of the store, and the one `campaign report` wrote) list the rows of the
    report's campaign.json; each verdict is the judgement in the cell's own `ab` JSON, and
    what is flagged is what the rule, recomputed from that JSON's values, flags."""
    report = campaign["report"]
    data = json.loads((report / "campaign.json").read_text())
    for html_file in (compare(campaign["store"]), report / "compare.html"):
        load(page_events, html_file)
        assert_rows_equal(page.evaluate(ROWS_JS), expected_rows(data))
    assert_verdicts_follow_the_rule(report, data)


def assert_verdicts_follow_the_rule(report: Path, data: dict) -> None:
    """Each row's verdict is the judgement in its cell's own `ab` JSON, and it is flagged
    exactly when the rule, recomputed from that JSON's values, flags it."""
    for row in data["rows"]:
        cell = json.loads(next((report / row["dir"]).glob("compile_ab*.json")).read_text())
        endpoint = next(e for e in cell["endpoints"] if e["key"] == row["endpoint"])
        treatment = row["versus"].split(" vs ")[0]
        assert row["verdict"] == endpoint["judgements"][treatment]["status"]
        recomputed = flagged_rows(
            {e["key"]: e["values"] for e in cell["endpoints"]
             if e["comparisons"].get(treatment) is not None},
            cell["control"], treatment, None,
        )  # fmt: skip
        assert row["flagged"] == (row["endpoint"] in recomputed)
        assert row["verdict"] == recomputed.get(row["endpoint"], row["verdict"])


def test_clicking_a_cell_opens_its_section_whose_rerun_command_runs(
    campaign, tmp_path, page, page_events
):
    report = json.loads((campaign["report"] / "campaign.json").read_text())
    cell = report["cells"][1]
    anchor = "cell-" + re.sub(r"[^A-Za-z0-9_-]", "-", cell["dir"])
    section = page.locator(f"#{anchor}")
    load(page_events, compare(campaign["store"]))
    expect(section).to_have_js_property("open", False)
    # a click anywhere on one of the cell's rows (here its verdict); closed by the reader,
    # the section opens again on the next click (the address is already at it)
    for again in (False, True):
        if again:
            section.evaluate("details => { details.open = false; }")
        cell_of_row(page, anchor).click()
        expect(section).to_have_js_property("open", True, timeout=OPEN_WAIT_S * 1000)
        assert page.evaluate("location.hash") == f"#{anchor}"
    expect(page.locator("details.cell[open]")).to_have_count(1)
    # its own endpoints and per-pass tables, and the command that reruns it
    for table in ("endpoints-B-table", "passes-B-table"):
        assert section.locator(f"#{anchor}-{table} tbody tr").count() > 0, table
    heading = section.locator("h3", has_text=re.compile("^Rerun locally$"))
    rerun = heading.evaluate("h => h.nextElementSibling.textContent")
    argv = shlex.split(rerun)
    assert argv[:3] == ["compile-ahead", "ab", "compile"] and "--first-block" not in argv
    out = tmp_path / "rerun"
    proc = run(command(*argv[1:], "--out", out, "--no-plot", "--quiet"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    ran = json.loads((out / "experiment.json").read_text())
    planned = json.loads((campaign["report"] / cell["dir"] / "experiment.json").read_text())
    for key in ("ladder", "pairs", "pass_profile", "counters"):
        assert ran[key] == planned[key], key
    assert [(a["name"], a["spec"]) for a in ran["arms"]] == [
        (a["name"], a["spec"]) for a in planned["arms"]
    ]
    assert len((out / "trials.jsonl").read_text().splitlines()) == 2 * planned["pairs"]


@pytest.mark.parametrize("bad", ["%", "%E0%A4%A", "cell-%ZZ"])
def test_a_malformed_anchor_is_ignored_and_rows_still_open_their_cells(
    campaign, page, page_events, bad
):
    """The page opened at an address whose #anchor does not decode: no script error, no
    section opened by it, and a click on a row still opens its cell."""
    html_file = compare(campaign["store"])
    opened = page.locator("details.cell[open]")
    done = page_events.goto(f"{html_file.resolve().as_uri()}#{bad}")
    assert done.errors == [], done.errors
    assert page.evaluate("location.hash") == f"#{bad}"
    expect(opened).to_have_count(0)
    anchor = page.locator("#cells-table tr[data-cell]").first.get_attribute("data-cell")
    assert anchor is not None
    cell_of_row(page, anchor).click()
    expect(opened).to_have_count(1, timeout=OPEN_WAIT_S * 1000)
    expect(opened).to_have_id(anchor)
    assert page.evaluate("location.hash") == f"#{anchor}"
    assert done.errors == [], done.errors  # none from the click either


def _copy_store(store: Path, to: Path) -> Path:
    with sqlite3.connect(store) as src, sqlite3.connect(to) as dst:
        src.backup(dst)
    return to


def test_cells_from_two_machines_are_shown_per_machine(campaign, tmp_path, page, page_events):
    store = _copy_store(campaign["store"], tmp_path / "two.sqlite")
    with connect(store) as conn:  # block 1 of cell 0 as if it ran on another machine
        digest, data = conn.execute("SELECT digest, data FROM fingerprints").fetchone()
        conn.execute("INSERT INTO fingerprints VALUES ('0ther000', ?)", (data + " ",))
        conn.execute("UPDATE blocks SET fingerprint = '0ther000' WHERE cell = 0 AND block = 1")
    pooled = page_text(compare(store))
    assert "blocks from 2 machine fingerprints (0ther000, " in pooled
    out = tmp_path / "stratified"
    proc = run(campaign_command("report", str(store), "--out", str(out), "--stratify",
                                "--no-plot"), tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads((out / "campaign.json").read_text())
    load(page_events, compare(store, "--stratify", out=tmp_path / "stratified.html"))
    assert_rows_equal(page.evaluate(ROWS_JS), expected_rows(data))
    sections = page.locator("details.cell").evaluate_all("cells => cells.map(d => d.id)")
    cell0 = [s for s in sections if s.startswith("cell-cell00-")]
    assert sorted(cell0) == sorted(
        f"cell-cell00-tiny_32-64-machine-{m}" for m in ("0ther000", digest[:8])
    )
    machines = {r["machine"][:8] for r in data["rows"] if r["dir"].startswith("cell00-")}
    assert machines == {"0ther000", digest[:8]}


def test_failed_blocks_and_a_cell_without_blocks_are_said_on_the_page(tmp_path, page, page_events):
    """Arm B's interpreter fails every trial after its first: cell 0 keeps block 0 (its
    block 1 fails), cell 1 has every block failed."""
    wrapper = failing_interpreter(tmp_path / "python-fails", succeed=1)
    spec = tmp_path / "fail.toml"
    spec.write_text(
        '[campaign]\nkind = "compile"\npairs = 2\nwarmup = 0\n'
        f'arms = ["A=current", "B={wrapper}"]\n\n[axes]\nmodel = ["tiny"]\n'
        'ladder = ["32", "64"]\n'
    )
    store = tmp_path / "f.sqlite"
    proc = run(campaign_command("run", str(spec), "--store", str(store), "--quiet"), tmp_path)
    assert proc.returncode == 2 and "3 block(s) failed" in proc.stderr, proc.stderr
    with connect(store) as conn:
        failed = conn.execute(
            "SELECT c.label, b.block, b.host, b.error FROM blocks b JOIN cells c "
            "ON c.idx = b.cell WHERE b.status = 'failed'"
        ).fetchall()
    assert len(failed) == 3
    report = tmp_path / "report"
    proc = run(campaign_command("report", str(store), "--out", str(report)), tmp_path)
    assert proc.returncode == 0, proc.stderr
    for html_file in (compare(store), report / "compare.html"):
        text = page_text(html_file)
        for label, block, host, error in failed:
            said = f"cell {label}: block {block} failed on {host}: {error}"
            assert re.sub(r"\s+", " ", said) in text
        assert "model=tiny, ladder=32 · " in text and "1 of 2 blocks done (PARTIAL)" in text
        assert "cell model=tiny, ladder=64: not analysed: no block done yet" in text
        assert "Traceback" not in text
    load(page_events, compare(store))
    rows = page.evaluate(ROWS_JS)
    assert rows and {r[0] for r in rows} == {"model=tiny, ladder=32"}
    assert {r[5] for r in rows} == {1}  # the one pair the partial cell has


def test_an_empty_store_says_so_and_a_file_that_is_no_store_is_one_line(tmp_path, capsys):
    spec_path = tmp_path / "tiny.toml"
    spec_path.write_text(TINY_COMPILE)
    spec = load_spec(spec_path, check_cell)
    store = tmp_path / "empty.sqlite"
    Store.create(store, spec, {c.index: {"model": c.model} for c in spec.cells}).close()
    text = page_text(compare(store))
    assert "No cell of this campaign has a block done: nothing to compare yet" in text
    assert text.count("not analysed: no block done yet") >= 2
    assert "Traceback" not in text
    capsys.readouterr()
    for name, content in (("zero.sqlite", b""), ("notes.txt", b"not a store\n")):
        path = tmp_path / name
        path.write_bytes(content)
        assert main(["compare", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].endswith("not a campaign store (not an SQLite database)")
        assert path.read_bytes() == content  # left as it was
        assert not path.with_name(f"{path.stem}.compare.html").exists()


# --- release history: stand-in blocks written through the store's API -----------------------

RELEASES = ("2025.2.0", "2025.4.1", "2026.0.0")
ARMS = tuple(f"ov{v}" for v in RELEASES)
RELEASE_PAIRS = 3
LEVEL = (1.0, 1.25, 0.9)  # each release's compile wall, relative
PASS_MS = {"PassDrops": (40.0, 40.0, 8.0), "PassGrows": (2.0, 12.0, 12.0), "Steady": (5, 5, 5)}


def _wall(capacity: int, arm: int, block: int) -> float:
    return (0.5 + capacity / 100) * LEVEL[arm] + 0.01 * ((block * 7 + arm * 3) % 5)


def _pass_ms(name: str, arm: int, block: int) -> float:
    return PASS_MS[name][arm] + 0.05 * ((block + 2 * arm) % 3)


def _result(ladder: list[int], arm: int, block: int) -> dict:
    selfs = {"MOC": {name: _pass_ms(name, arm, block) / 1e3 for name in PASS_MS}}
    rungs = [
        {"capacity": c, "compile_s": _wall(c, arm, block),
         "compiles": [{"wall_s": _wall(c, arm, block), "pass_self_s": selfs}]}
        for c in ladder
    ]  # fmt: skip
    return {"openvino_version": RELEASES[arm], "rungs": rungs,
            "total_compile_s": sum(r["compile_s"] for r in rungs)}  # fmt: skip


def _block(ladder: list[int], block: int, started: float) -> dict:
    arms = [{"name": name, "command": ["python", "trial.py", "{out}"],
             "spec": f"python=/envs/openvino-{v}/bin/python", "openvino": v}
            for name, v in zip(ARMS, RELEASES, strict=True)]  # fmt: skip
    experiment = {
        "kind": "compile", "arms": arms, "pairs": 1, "warmup": 0, "ladder": ladder,
        "pass_profile": True, "counters": False, "context": {"model": "stand-in"},
        "labels": {}, "first_block": block,
    }  # fmt: skip
    order = make_plan(list(ARMS), RELEASE_PAIRS, 0).blocks[block]
    trials = [
        {"index": position, "block": 0, "position": position, "arm": ARMS[arm],
         "warmup": False, "returncode": 0, "wall_s": 1.0, "started_unix": started + position,
         "result_path": f"/stand-in/{block}-{arm}.json", "result": _result(ladder, arm, block),
         "error": None, "stderr_tail": "", "command": ["python", "trial.py"],
         "env": {"set": {}, "unset": []}, "artifacts": []}
        for position, arm in enumerate(order)
    ]  # fmt: skip
    builds = dict(zip(ARMS, RELEASES, strict=True))
    fingerprint = {"digest": "standin0", "data": {"cpu_model": "stand-in", "openvino": builds}}
    return {"status": "done", "started": started, "ended": started + 3, "node": "stand-in",
            "host": "stand-in", "workdir": "/stand-in", "command": ["ab"], "exit": 0,
            "experiment": experiment, "trials": trials, "fingerprint": fingerprint}  # fmt: skip


def release_store(tmp_path: Path) -> Path:
    spec_path = tmp_path / "releases.toml"
    spec_path.write_text(
        f'[campaign]\nkind = "compile"\npairs = {RELEASE_PAIRS}\nwarmup = 0\n'
        f"arms = [{', '.join(f'{chr(34)}openvino=={v}{chr(34)}' for v in RELEASES)}]\n\n"
        '[axes]\nmodel = ["tiny"]\nladder = ["32,64", "64,128"]\n\n'
        "[options]\npass-profile = true\n"
    )
    spec = load_spec(spec_path, check_cell)
    store = Store.create(tmp_path / "r.sqlite", spec, {c.index: {} for c in spec.cells})
    for block in range(RELEASE_PAIRS):
        for cell in spec.cells:
            ladder = [int(c) for c in str(cell.axes["ladder"]).split(",")]
            store.commit(store.submit(cell.index, block), _block(ladder, block, 1e9 + block))
    store.close()
    return store.path


def _mean_interval(values: list[float]) -> tuple[float, float, float]:
    mean = sum(values) / len(values)
    low, high = scipy.stats.t.interval(0.95, len(values) - 1, mean, scipy.stats.sem(values))
    return mean, float(low), float(high)


def _number(text: str) -> float:
    return float(text.replace("\u2212", "-"))


def test_release_history_lines_and_pass_moves_on_stand_in_data(tmp_path, page, page_events):
    """Stand-in data: building environments of real OpenVINO releases takes the package index
    and minutes per release, too slow for CI, so made-up blocks of three versioned arms are
    written through the store's own API (submit, commit) as the coordinator records real ones.
    The page's lines (a point per release with its interval) and the passes that moved most
    between consecutive releases are checked against the values put in: means and t intervals
    recomputed with scipy, the flags by the rule recomputed (compare_fixtures.flagged_rows)."""
    store = release_store(tmp_path)
    html_file = compare(store)
    report = tmp_path / "report"
    proc = run(campaign_command("report", str(store), "--out", str(report)), tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((report / "campaign.json").read_text())
    assert_verdicts_follow_the_rule(report, data)
    load(page_events, html_file)
    assert_rows_equal(page.evaluate(ROWS_JS), expected_rows(data))
    counted = page.locator("#flagged-count").text_content() or ""
    title = page.locator("#history").text_content()
    charts = page.locator("svg.history").evaluate_all(
        "svgs => svgs.map(s => [s.previousElementSibling.textContent,"
        " [...s.querySelectorAll('circle')].map(c => [c.querySelector('title').textContent,"
        " +c.getAttribute('cx')])])"
    )
    moves = page.locator("h4").evaluate_all(
        "heads => heads.map(h => [h.textContent, [...h.nextElementSibling"
        ".querySelectorAll('tbody tr')].map(r => [r.cells[0].textContent,"
        " +r.cells[4].dataset.v, r.cells[7].textContent])])"
    )
    assert title == "Release history"
    flags = [r["verdict"] for r in data["rows"] if r["flagged"]]
    assert flags and counted.startswith(f"{len(flags)} of {len(data['rows'])} comparisons flagged")
    point = re.compile(r"^(.*), (ov[\d.]+): (\S+) \(95% CI (\S+) to (\S+)\) s$")
    seen = {}
    for chart, circles in charts:
        capacity = {"Compile wall C=32": 32, "Compile wall C=64": 64, "Compile wall C=128": 128}
        if chart not in capacity:
            continue
        for text, cx in circles:
            cell, arm, *numbers = point.match(text).groups()
            seen.setdefault((chart, cell), []).append((arm, cx, *map(_number, numbers)))
    # a line per cell and rung: C=64 is a rung of both cells
    assert sorted(seen) == sorted(
        [("Compile wall C=32", "model=tiny, ladder=32,64"),
         ("Compile wall C=64", "model=tiny, ladder=32,64"),
         ("Compile wall C=64", "model=tiny, ladder=64,128"),
         ("Compile wall C=128", "model=tiny, ladder=64,128")]
    )  # fmt: skip
    for (chart, _), points in seen.items():
        capacity = int(chart.rsplit("=", 1)[1])
        assert [p[0] for p in points] == list(ARMS)  # releases in the spec's order
        assert [p[1] for p in points] == sorted(p[1] for p in points)
        for arm, (_, _, mean, low, high) in enumerate(points):
            want = _mean_interval([_wall(capacity, arm, b) for b in range(RELEASE_PAIRS)])
            assert (mean, low, high) == pytest.approx(want, rel=1e-4)
    # per cell and consecutive releases: the ranking's first pass, its effect and the rule
    assert len(moves) == 2 * (len(RELEASES) - 1)
    for heading, rows in moves:
        before, after = heading.split(": ")[1].split(" → ")
        b, a = ARMS.index(before), ARMS.index(after)
        # a trial's self time of a pass: summed over its rungs, two in every cell
        values = {name: {arm: [2 * _pass_ms(name, i, k) for k in range(RELEASE_PAIRS)]
                         for arm, i in ((before, b), (after, a))}
                  for name in PASS_MS}  # fmt: skip
        moved = "PassGrows" if b == 0 else "PassDrops"
        assert rows[0][0] == moved
        diffs = [y - x for x, y in zip(values[moved][before], values[moved][after], strict=True)]
        assert rows[0][1] == pytest.approx(sum(diffs) / len(diffs), rel=1e-6)
        flagged = flagged_rows(values, before, after, None)
        shown = {name: verdict for name, _, verdict in rows}
        assert {n: v for n, v in shown.items() if v in ("regression", "improvement")} == flagged
        assert moved in flagged
