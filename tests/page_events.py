"""What a Playwright page did since it last navigated: the errors it logged (console errors and
assertions, the browser's own error entries such as a failed load, uncaught exceptions), every
request it made and which failed, and the JavaScript dialogs it opened (accepted, so none
blocks the page). The browser tests' fixtures (conftest.py) attach one to each page."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field

from playwright.sync_api import ConsoleMessage, Dialog, Page, Request

# No name but 127.0.0.1 resolves: a page that reaches for the network fails visibly.
NO_NETWORK_RULES = "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"
NO_NETWORK = f"--host-resolver-rules={NO_NETWORK_RULES}"
# Chromium refuses its sandbox to root, which the tests may run as.
CHROMIUM_ARGS = ("--no-sandbox", "--disable-gpu")
# Reached only when a page never loads: a busy machine can keep the browser from answering for
# a minute or more.
NAVIGATION_TIMEOUT_MS = 180_000


def find_chromium() -> str | None:
    """The system Chromium (Debian's chromium package), which the browser tests drive."""
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)


@dataclass
class PageLoad:
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    requests: list[str] = field(default_factory=list)  # every URL the page requested
    failed: list[str] = field(default_factory=list)  # requests that failed, with the reason
    dialogs: list[str] = field(default_factory=list)  # messages of the dialogs it opened


class PageEvents:
    """Records what ``page`` does into ``load``, a fresh one at each ``goto``."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.load = PageLoad()
        page.set_default_navigation_timeout(NAVIGATION_TIMEOUT_MS)
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.load.errors.append(f"uncaught {error}"))
        page.on("request", lambda request: self.load.requests.append(request.url))
        page.on("requestfailed", self._failed)
        page.on("dialog", self._dialog)

    def goto(self, url: str) -> PageLoad:
        """Open ``url``; return once it has loaded, with what it does from then on."""
        self.load = PageLoad()
        self.page.goto(url)
        return self.load

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "assert"):
            self.load.errors.append(message.text)

    def _failed(self, request: Request) -> None:
        self.load.failed.append(f"{request.resource_type}: {request.failure}")

    def _dialog(self, dialog: Dialog) -> None:
        self.load.dialogs.append(dialog.message)
        dialog.accept()
