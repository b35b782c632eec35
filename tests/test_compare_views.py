"""The compare page's campaign views (cross-cell table, forest plots, release histories, cell
sections) on made-up data: plot geometry read back from the SVG, and a click on a cell opening
its section in headless Chromium."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from playwright.sync_api import expect

from compile_ahead.profiling.compare import campaign, svg


def _effect(endpoint: str, effect: float, low: float, high: float, status: str):
    flagged = status in ("regression", "improvement")
    key = endpoint.lower().replace(" ", "_")
    return campaign.CellEffect(
        key, endpoint, "B vs A", "s", effect, effect * 10, low, high, 5, status, flagged
    )


CELLS = [
    campaign.CampaignCell(
        "qwen-0.5b/bf16", "qwen 0.5b bf16",
        (_effect("Compile wall", 0.4, 0.2, 0.6, "regression"),
         _effect("Peak RSS", -0.1, -0.3, 0.1, "no detectable effect")),
        "<p>cell one's own section</p>",
    ),
    campaign.CampaignCell(
        "qwen-1.5b/f16", "qwen 1.5b f16",
        (_effect("Compile wall", -0.8, -1.2, -0.4, "improvement"),),
        "<p>cell two's own section</p>",
    ),
]  # fmt: skip


def _svgs(page: str) -> list[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(r"<svg .*?</svg>", page, re.S)]


def test_forest_plot_places_each_cell_on_one_scale():
    (plot,) = _svgs(campaign.forest_plots(CELLS).split('<h3 data-key="peak_rss">')[0])
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


HEAD = campaign.CampaignHeader("campaign", "store", {"spec": "made up"}, "[campaign]")


def test_cross_cell_table_links_every_row_to_its_cell():
    page = campaign.campaign_page(HEAD, CELLS)
    table = page.split('id="cells-table"')[1].split("</table>")[0]
    rows = re.findall(r'<tr [^>]*data-cell="([^"]+)"[^>]*>(.*?)</tr>', table)
    assert [cell for cell, _ in rows] == ["cell-qwen-0-5b-bf16"] * 2 + ["cell-qwen-1-5b-f16"]
    for cell, row in rows:
        assert f'href="#{cell}"' in row and f'<details id="{cell}"' in page


def test_clicking_a_cell_opens_its_section(tmp_path, page, page_events):
    html_file = tmp_path / "campaign.html"
    html_file.write_text(campaign.campaign_page(HEAD, CELLS))
    load = page_events.goto(html_file.as_uri())
    assert load.errors == [] and load.failed == []
    anchor = CELLS[1].anchor
    expect(page.locator(f"#{anchor}")).to_have_js_property("open", False)
    page.locator(f'#cells-table a[href="#{anchor}"]').click()
    expect(page.locator(f"#{anchor}")).to_have_js_property("open", True)
    expect(page.locator(f"#{CELLS[0].anchor}")).to_have_js_property("open", False)
