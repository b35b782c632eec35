"""The compare page's size and load time in headless Chromium, by the browser's own timing.

    python benchmarks/experiments/compare_page_load.py ab-results/compile-releases [MORE...] \
        --loads 5

For each results directory or campaign store (or an already written page, PAGE.html): builds
the page as `compile-ahead compare DIR` does (into a temporary file; the directory is not
touched), then opens it from file:// with networking off, ``--loads`` times in one tab of the
system's headless Chromium, driven by Playwright (the first load is the browser's first look at
the file, later ones may be served from its caches), and reads the page's
PerformanceNavigationTiming: ``duration`` (navigation start to the end of the load event) and
``domContentLoadedEventEnd``. Also counts what the page logged as errors and any request
besides itself. Checks against the targets of the
page: under 3 MB, under 2 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

from compile_ahead.profiling.campaigns.results.page import campaign_sources

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # test-only helpers
from page_events import CHROMIUM_ARGS, NO_NETWORK, PageEvents, find_chromium

from compile_ahead.profiling.compare.sources import build_page

MAX_BYTES = 3 * 2**20
MAX_LOAD_MS = 2000.0
WINDOW = {"width": 1400, "height": 1000}
# The page's PerformanceNavigationTiming entry, once its load event has ended.
NAVIGATION_TIMING = """new Promise(r => { const t = () => { const e = performance
  .getEntriesByType('navigation')[0]; e && e.loadEventEnd > 0 ? r(e.toJSON()) : setTimeout(t, 10);
}; t(); })"""


def page_file(target: Path, scratch: Path) -> tuple[Path, float]:
    """The page to load (built from a results directory or campaign store into ``scratch``)
    and the seconds the build took (0 for a page given as an .html file)."""
    if target.is_file() and target.suffix == ".html":
        return target, 0.0
    t0 = time.perf_counter()
    page = build_page(target, campaign_sources())
    built = time.perf_counter() - t0
    path = scratch / f"{target.resolve().name}.html"
    path.write_text(page.html)
    return path, built


def measure(tab: Page, page: Path, loads: int) -> dict:
    durations, dom_ready, problems = [], [], []
    events = PageEvents(tab)
    url = page.resolve().as_uri()
    for _ in range(loads):
        events.goto("about:blank")
        load = events.goto(url)
        timing = tab.evaluate(NAVIGATION_TIMING)
        durations.append(float(timing["duration"]))
        dom_ready.append(float(timing["domContentLoadedEventEnd"]))
        problems += load.errors + load.failed + [u for u in load.requests if u != url]
    return {"durations": durations, "dom_ready": dom_ready, "problems": problems}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "targets", type=Path, nargs="+", help="results directories, campaign stores or pages"
    )
    p.add_argument("--loads", type=int, default=5, help="loads per page (default 5)")
    args = p.parse_args()
    chromium = find_chromium()
    if chromium is None:
        print("chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    ok = True
    with (
        tempfile.TemporaryDirectory(prefix="compare-page-load-") as tmp,
        sync_playwright() as playwright,
    ):
        scratch = Path(tmp)
        flags = [*CHROMIUM_ARGS, NO_NETWORK]
        browser = playwright.chromium.launch(executable_path=chromium, args=flags)
        for target in args.targets:
            page, built_s = page_file(target, scratch)
            size = page.stat().st_size
            tab = browser.new_page(viewport=WINDOW)  # a context of its own: fresh caches
            m = measure(tab, page, args.loads)
            median = statistics.median(m["durations"])
            passed = size < MAX_BYTES and median < MAX_LOAD_MS and not m["problems"]
            ok = ok and passed
            print(
                f"{target}: {size / 2**20:.2f} MiB, built in {built_s:.2f} s; load (ms) first "
                f"{m['durations'][0]:.0f}, median {median:.0f}, max {max(m['durations']):.0f}; "
                f"DOMContentLoaded median {statistics.median(m['dom_ready']):.0f} ms; "
                f"{'PASS' if passed else 'FAIL'} (< 3 MiB, < 2 s, no error or request)"
            )
            for problem in m["problems"]:
                print(f"  problem: {problem}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
