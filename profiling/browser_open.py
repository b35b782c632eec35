"""Open an address that carries a secret (a local server's token) in the user's browser without
putting the secret on a command line, where any local user can read it (``ps``,
/proc/PID/cmdline) for as long as a newly started browser runs.

As Jupyter does: the browser is given a private file (mode 0600, in a fresh 0700 folder) whose
page sends it on to the address; the file is removed when the server closes.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import tempfile
import webbrowser
from collections.abc import Iterator
from pathlib import Path

PAGE = """<!doctype html>
<meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<meta http-equiv="refresh" content="0;url={attr}">
<title>compile-ahead</title>
<p><a href="{attr}">Continue</a></p>
<script>location.replace({js});</script>
"""


@contextlib.contextmanager
def redirect_page(url: str) -> Iterator[Path]:
    """A private page that sends the browser on to ``url``; removed on exit."""
    with tempfile.TemporaryDirectory(prefix="compile-ahead-open-") as folder:  # made 0700
        page = Path(folder) / "open.html"
        fd = os.open(page, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        js = json.dumps(url).replace("<", "\\u003c")  # no "</script>" inside the string
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(PAGE.format(attr=html.escape(url, quote=True), js=js))
        yield page


@contextlib.contextmanager
def opened_in_browser(url: str) -> Iterator[bool]:
    """Open ``url`` in a new browser tab through a private redirect page kept until the end of
    the block; whether a browser could be started."""
    with redirect_page(url) as page:
        yield webbrowser.open_new_tab(page.as_uri())
