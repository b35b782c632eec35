"""The browser tests' harness catches what it must: a page's logged errors, its uncaught
exceptions, its dialogs, and every request, with the network unreachable from the browser."""

from __future__ import annotations

PAGE = """<!doctype html><title>t</title><img src="http://example.com/pixel.png">
<script>console.error("logged"); alert("asked"); setTimeout(() => { throw new Error("thrown"); });
</script>"""


def test_errors_requests_and_dialogs_are_recorded_and_the_network_is_off(tmp_path, page_events):
    html_file = tmp_path / "page.html"
    html_file.write_text(PAGE)
    url = html_file.as_uri()
    load = page_events.goto(url)
    page_events.page.wait_for_function("document.readyState === 'complete'")
    page_events.page.wait_for_timeout(200)  # the timer's exception
    assert load.requests == [url, "http://example.com/pixel.png"]
    assert load.failed == ["image: net::ERR_NAME_NOT_RESOLVED"]  # no name resolves
    assert "logged" in load.errors
    assert any("thrown" in e for e in load.errors), load.errors
    assert load.dialogs == ["asked"]
    assert page_events.goto(url) is not load, "each navigation starts a fresh record"
