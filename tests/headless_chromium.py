"""Load a page in headless Chromium over its DevTools pipe: what the page logged as errors,
every request it made and which failed, its navigation timing, and JavaScript evaluated in
it. The compare page's tests and benchmarks/experiments/compare_page_load.py use it.

The protocol runs over --remote-debugging-pipe (JSON messages ending in NUL; commands on the
browser's fd 3, replies and events on its fd 4), so no websocket library is needed. The page
is attached before it navigates, so nothing it does is missed. JavaScript dialogs are
accepted and kept in ``Chromium.dialogs``: an open one would block every later command.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# No name but 127.0.0.1 resolves: a page that reaches for the network fails visibly.
NO_NETWORK_RULES = "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"
NO_NETWORK = f"--host-resolver-rules={NO_NETWORK_RULES}"
# Reached only when the browser hangs: a page that loads a large UI build on a busy machine can
# keep it from answering for a minute or more.
REPLY_TIMEOUT_S = 180.0


def find_chromium() -> str | None:
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)


@dataclass
class PageLoad:
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    requests: list[str] = field(default_factory=list)  # every URL the page requested
    failed: list[str] = field(default_factory=list)  # requests that failed, with the reason
    timing: dict = field(default_factory=dict)  # the PerformanceNavigationTiming entry


class Chromium:
    """A headless Chromium driven over its DevTools pipe."""

    def __init__(
        self, profile: Path, flags: Sequence[str] = (), window: tuple[int, int] = (1400, 1000)
    ) -> None:
        chromium = find_chromium()
        if chromium is None:
            raise FileNotFoundError("chromium is not installed")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def child_fds() -> None:  # in the child: the pipe ends on fds 3 and 4
            read_end, write_end = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        args = [
            chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--no-default-browser-check", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--remote-debugging-pipe",
            f"--window-size={window[0]},{window[1]}", f"--user-data-dir={profile}", *flags,
            "about:blank",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            args,
            pass_fds=(3, 4),
            preexec_fn=child_fds,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._id = 0
        self.events: list[dict] = []
        self.dialogs: list[str] = []

    def _read(self, timeout: float) -> dict:
        """The next message; an event is also kept in ``events`` (a dialog is accepted)."""
        while b"\0" not in self._buffer:
            if not select.select([self._from_browser], [], [], timeout)[0]:
                raise TimeoutError(f"no message from the browser in {timeout:g} s")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise EOFError("the browser closed its DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message = json.loads(raw)
        if message.get("method") == "Page.javascriptDialogOpening":
            self.dialogs.append(message["params"]["message"])
            self._send("Page.handleJavaScriptDialog", {"accept": True}, message.get("sessionId"))
        if "method" in message:
            self.events.append(message)
        return message

    def _send(self, method: str, params: dict | None, session: str | None) -> int:
        self._id += 1
        message: dict = {"id": self._id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        return self._id

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        wanted = self._send(method, params, session)
        while True:
            reply = self._read(REPLY_TIMEOUT_S)
            if reply.get("id") == wanted:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def wait_event(self, method: str, timeout: float = REPLY_TIMEOUT_S) -> dict:
        """The first event ``method`` not yet taken (waiting for it if needed)."""
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event["method"] == method:
                    return self.events.pop(i)
            self._read(max(0.01, deadline - time.monotonic()))

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # the browser and its helpers
        self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


class Page:
    """One tab, attached before it navigates; ``load`` records what the page did."""

    def __init__(self, browser: Chromium) -> None:
        self.browser = browser
        targets = browser.call("Target.getTargets")["targetInfos"]
        target = next(t for t in targets if t["type"] == "page")["targetId"]
        params = {"targetId": target, "flatten": True}
        self.session = browser.call("Target.attachToTarget", params)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.call(f"{domain}.enable", session=self.session)

    def navigate(self, url: str) -> PageLoad:
        """Open ``url``; return once it has loaded, with what it logged and requested."""
        self.browser.events.clear()
        self.browser.call("Page.navigate", {"url": url}, self.session)
        self.browser.wait_event("Page.loadEventFired")
        timing = self.evaluate(
            "new Promise(r => { const t = () => { const e = performance.getEntriesByType("
            "'navigation')[0]; e && e.loadEventEnd > 0 ? r(e.toJSON()) : setTimeout(t, 10); }; "
            "t(); })"
        )
        load = PageLoad(timing=timing or {})
        self.collect(load)
        return load

    def collect(self, load: PageLoad) -> None:
        """Move what the page reported since the last call into ``load``."""
        for event in self.browser.events:
            method, p = event["method"], event.get("params", {})
            if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                load.errors.append(
                    " ".join(str(a.get("value", a.get("description"))) for a in p["args"])
                )
            elif method == "Runtime.exceptionThrown":
                details = p["exceptionDetails"]
                thrown = details.get("exception", {}).get("description", "")
                load.errors.append(f"{details.get('text', 'exception')} {thrown}".strip())
            elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
                load.errors.append(p["entry"].get("text", ""))
            elif method == "Network.requestWillBeSent":
                load.requests.append(p["request"]["url"])
            elif method == "Network.loadingFailed":
                load.failed.append(f"{p.get('type')}: {p.get('errorText')}")
        self.browser.events.clear()

    def evaluate(self, expression: str):
        params = {"expression": expression, "returnByValue": True, "awaitPromise": True}
        result = self.browser.call("Runtime.evaluate", params, self.session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:60]}...: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")


@contextlib.contextmanager
def open_browser(
    profile: Path, flags: Sequence[str] = (NO_NETWORK,), window: tuple[int, int] = (1400, 1000)
) -> Iterator[Page]:
    """A headless Chromium (networking off by default) and its one tab; closed on exit."""
    browser = Chromium(profile, flags, window)
    try:
        yield Page(browser)
    finally:
        browser.close()
