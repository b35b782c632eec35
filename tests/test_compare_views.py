"""The compare page's noise floor and rule against scipy, and the campaign views (cross-cell
table, forest plots, release histories, cell sections) on made-up data: plot geometry read
back from the SVG, and a click on a cell opening its section in headless Chromium."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from scipy import stats

from compile_ahead.profiling.compare import campaign, svg
from compile_ahead.profiling.compare.floor import Status, judge, noise_floor
from compile_ahead.profiling.compare.headless import find_chromium, open_browser
from compile_ahead.profiling.trials.stats import paired_summary


def test_noise_floor_is_the_mde_at_the_pair_count():
    noise = [0.3, -0.1, 0.2, -0.4, 0.1, 0.0, -0.2]
    floor = noise_floor(noise, 10, "A/A arm X")
    sd = np.std(noise, ddof=1)
    expected = (stats.t.ppf(0.975, 9) + stats.t.ppf(0.8, 9)) * sd / math.sqrt(10)
    assert floor.value == pytest.approx(expected) and floor.source == "A/A arm X"
    assert noise_floor(noise, 40, "x").value < floor.value  # more pairs see smaller changes
    assert noise_floor(noise, 10, "x", min_sd=2 * sd).value == pytest.approx(2 * expected)
    assert noise_floor([1.0], 10, "x").value is None  # one difference shows no spread
    assert noise_floor(noise, 1, "x").value is None


def test_a_change_below_the_floor_is_never_flagged_whatever_its_p():
    control = [10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0]
    treatment = [10.11, 10.09, 10.10, 10.11, 10.10, 10.09, 10.10, 10.10]  # +1%, every pair
    s = paired_summary(control, treatment, "lower")
    assert s.ci_excludes_zero and s.sign_flip_p <= 2 / 2**8
    own = noise_floor(s.diffs, s.n, "own pairs")
    assert judge(s, own) is Status.REGRESSION
    noisy_aa = noise_floor([0.5, -0.4, 0.3, -0.6, 0.2, 0.4, -0.3, 0.1], s.n, "A/A arm A2")
    assert abs(s.mean_diff) < noisy_aa.value
    assert judge(s, noisy_aa) is Status.BELOW_FLOOR and not judge(s, noisy_aa).flagged
    faster = paired_summary(treatment, control, "lower")
    assert judge(faster, own) is Status.IMPROVEMENT
    assert judge(paired_summary(control, treatment, None), own) is Status.CHANGED
    spread = paired_summary(control, [10.5, 9.4, 10.2, 9.9, 10.6, 9.5, 10.0, 10.1], "lower")
    assert judge(spread, own) is Status.NO_EFFECT
    assert judge(paired_summary([1.0], [2.0]), own) is Status.NOT_TESTED


def _effect(endpoint: str, effect: float, low: float, high: float, status: Status):
    return campaign.CellEffect(endpoint, "s", effect, effect * 10, low, high, 5, status)


CELLS = [
    campaign.CampaignCell(
        "qwen-0.5b/bf16", "qwen 0.5b bf16",
        (_effect("Compile wall", 0.4, 0.2, 0.6, Status.REGRESSION),
         _effect("Peak RSS", -0.1, -0.3, 0.1, Status.NO_EFFECT)),
        "<p>cell one's own section</p>",
    ),
    campaign.CampaignCell(
        "qwen-1.5b/f16", "qwen 1.5b f16",
        (_effect("Compile wall", -0.8, -1.2, -0.4, Status.IMPROVEMENT),),
        "<p>cell two's own section</p>",
    ),
]  # fmt: skip


def _svgs(page: str) -> list[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(r"<svg .*?</svg>", page, re.S)]


def test_forest_plot_places_each_cell_on_one_scale():
    (plot,) = _svgs(campaign.forest_plots(CELLS).split("<h3>Peak RSS</h3>")[0])
    dots = plot.findall(".//circle")
    bars = [b for b in plot.findall(".//line") if "ci" in b.get("class", "")]
    zero = next(b for b in plot.findall("line") if b.get("class") == "zero")
    x0 = float(zero.get("x1"))
    xs = [float(d.get("cx")) for d in dots]
    # effects 0.4 and -0.8 on either side of 0, at distances in their ratio
    assert xs[0] > x0 > xs[1]
    assert (x0 - xs[1]) / (xs[0] - x0) == pytest.approx(2.0, abs=0.02)
    for dot, bar in zip(dots, bars, strict=True):
        assert float(bar.get("x1")) < float(dot.get("cx")) < float(bar.get("x2"))
    assert [d.get("class") for d in dots] == ["dot regression", "dot improvement"]
    links = [a.get("href") for a in plot.findall("a")]
    assert links == [f"#{c.anchor}" for c in CELLS]


def test_release_history_draws_a_line_per_series_with_intervals():
    releases = ("2025.2", "2025.3", "2025.4", "2026.4")
    values = [(7.0, 6.8, 7.2), (7.4, 7.1, 7.7), (7.1, 6.9, 7.3), (7.9, 7.6, 8.2)]
    points = tuple(svg.HistoryPoint(r, *v) for r, v in zip(releases, values, strict=True))
    series = campaign.ReleaseHistory(
        "Compile wall C=1024", "s", releases, (svg.HistorySeries("qwen 0.5b C=1024", points),)
    )
    (plot,) = _svgs(campaign.release_history(series))
    circles = list(plot.iter("circle"))
    xs = [float(c.get("cx")) for c in circles]
    ys = [float(c.get("cy")) for c in circles]
    assert xs == sorted(xs) and len(set(xs)) == 4  # one point per release, in release order
    # higher values are drawn higher (smaller y), linearly
    v = [p[0] for p in values]
    slope = (ys[3] - ys[0]) / (v[3] - v[0])
    assert slope < 0
    assert all(ys[i] == pytest.approx(ys[0] + slope * (v[i] - v[0]), abs=0.2) for i in range(4))
    whiskers = [w for w in plot.iter("line") if "whisker" in w.get("class", "")]
    for w, (_, low, high) in zip(whiskers, values, strict=True):
        # the interval's ends on the same scale as the points
        assert float(w.get("y1")) == pytest.approx(ys[0] + slope * (low - v[0]), abs=0.2)
        assert float(w.get("y2")) == pytest.approx(ys[0] + slope * (high - v[0]), abs=0.2)
    ticks = [t.text for t in plot.iter("text")]
    assert list(releases) == [t for t in ticks if t in releases]


def test_cross_cell_table_links_every_row_to_its_cell():
    page = campaign.campaign_page("campaign", CELLS)
    rows = re.findall(r'<tr [^>]*data-cell="([^"]+)"[^>]*>(.*?)</tr>', page)
    assert [cell for cell, _ in rows] == ["cell-qwen-0-5b-bf16"] * 2 + ["cell-qwen-1-5b-f16"]
    for cell, row in rows:
        assert f'href="#{cell}"' in row and f'<details id="{cell}"' in page


@pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed")
def test_clicking_a_cell_opens_its_section(tmp_path):
    page = tmp_path / "campaign.html"
    page.write_text(campaign.campaign_page("campaign", CELLS))
    with open_browser(tmp_path / "browser") as tab:
        load = tab.navigate(page.as_uri())
        assert load.errors == [] and load.failed == []
        anchor = CELLS[1].anchor
        assert tab.evaluate(f"document.getElementById('{anchor}').open") is False
        tab.evaluate(f"document.querySelector('#cells-table a[href=\"#{anchor}\"]').click()")
        opened = tab.evaluate(
            f"new Promise(r => setTimeout(() => r(document.getElementById('{anchor}').open), 100))"
        )
        assert opened is True
        assert tab.evaluate(f"document.getElementById('{CELLS[0].anchor}').open") is False
