"""`compare --open`: the page served on 127.0.0.1, its trace links opened through `trace open`.

The page is served at ``/TOKEN/``, TOKEN the server's secret (profiling/loopback_server.py):
the address printed and opened carries it, and a request without it gets 403 and nothing else,
so another local user who finds the port reads neither the page nor a trace. The page's trace
links are relative, ``trace/NAME`` (NAME one of the page's traces): the first one starts
`trace open`'s own server for that file (profiling/perfetto/ui.py: the trace on 127.0.0.1:9001
or the next free port under a token of its own, CORS for the Perfetto UI, or the offline UI
build) and redirects the browser to that server's deep link into the UI; later ones are sent to
the same server while it waits, so there is at most one per trace. A trace server closes once
the UI has fetched the trace, or after TRACE_WAIT_S. Only requests naming this server (Host
127.0.0.1 or localhost and its port) are answered, so another site cannot drive it through a
rebound DNS name.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.browser_open import opened_in_browser
from compile_ahead.profiling.loopback_server import (
    CONNECTION_TIMEOUT_S,
    HOST,
    LoopbackServer,
    path_after_token,
    refuse,
)
from compile_ahead.profiling.perfetto import ui as trace_open

TRACE_PREFIX = "/trace/"
# A trace server whose trace the UI has not fetched by then closes anyway.
TRACE_WAIT_S = 600.0


def serve_trace(
    path: Path,
    ui: trace_open.OfflineUI | None,
    log: Callable[[str], None] | None,
    done_waiting: Callable[[trace_open.TraceServer], None] = lambda server: None,
) -> trace_open.TraceServer:
    """Start `trace open`'s server for ``path`` (the file opened once, as `trace open` opens
    it) in the background. The server closes, and the file with it, once the UI has fetched
    the trace (offline: and its own files), or after TRACE_WAIT_S; ``done_waiting`` is called
    when it stops waiting for the fetch."""
    trace = trace_open.open_trace_file(path)
    try:
        server = trace_open.bind(trace, None, ui, log)
    except BaseException:
        os.close(trace.fd)
        raise
    threading.Thread(target=server.serve_forever, name="compare-trace", daemon=True).start()

    def close_when_fetched() -> None:
        try:
            fetched = server.fetched.wait(TRACE_WAIT_S)
            done_waiting(server)
            deadline = time.monotonic() + trace_open.OFFLINE_MAX_WAIT_S
            while (
                fetched
                and ui is not None
                and server.idle_s() < trace_open.OFFLINE_IDLE_S
                and time.monotonic() < deadline
            ):
                time.sleep(0.2)
            server.shutdown()
            server.server_close()
        finally:
            os.close(trace.fd)

    threading.Thread(target=close_when_fetched, name="compare-trace-close", daemon=True).start()
    return server


class TraceServers:
    """At most one trace server per trace: a link to a trace whose server still waits for the
    UI's fetch goes to that server; once it has been fetched (the server is closing), the next
    link starts a new one."""

    def __init__(self, ui: trace_open.OfflineUI | None, log: Callable[[str], None] | None):
        self.ui = ui
        self.log = log
        self._servers: dict[Path, trace_open.TraceServer] = {}
        self._lock = threading.Lock()

    def link(self, path: Path) -> str:
        """The deep link into the UI for the trace at ``path``."""
        with self._lock:
            server = self._servers.get(path)
            if server is None or server.fetched.is_set():
                server = serve_trace(path, self.ui, self.log, self._forget)
                self._servers[path] = server
            return server.ui_url()

    def _forget(self, server: trace_open.TraceServer) -> None:
        with self._lock:
            if self._servers.get(server.trace.path) is server:
                del self._servers[server.trace.path]


class PageServer(LoopbackServer):
    def __init__(
        self,
        port: int,
        page: bytes,
        traces: dict[str, Path],
        ui: trace_open.OfflineUI | None,
        log: Callable[[str], None] | None,
    ) -> None:
        self.page = page
        self.traces = traces
        self.log = log
        self.trace_servers = TraceServers(ui, log)
        super().__init__(port, PageHandler)

    @property
    def url(self) -> str:
        """The page's address, token included."""
        return f"http://{HOST}:{self.port}/{self.token}/"


class PageHandler(BaseHTTPRequestHandler):
    server: PageServer
    timeout = CONNECTION_TIMEOUT_S  # an idle connection is closed

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if self.server.log is not None:
            self.server.log(f"{self.requestline} -> {code}")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # http.server's access log would bury the link

    def _ours(self) -> bool:
        return self.server.named_by(self)

    def do_GET(self) -> None:
        admitted = path_after_token(self.path, self.server.token)
        if admitted is None:
            refuse(self)
            return
        if not self._ours():
            self.send_error(HTTPStatus.FORBIDDEN, "not this server's address")
            return
        path = admitted.split("?", 1)[0]
        name = unquote(path[len(TRACE_PREFIX) :])
        if path == "":  # the page's relative links need its address to end in "/"
            self._redirect(f"/{self.server.token}/")
        elif path in ("/", "/index.html"):
            self._send(self.server.page, "text/html; charset=utf-8")
        elif path.startswith(TRACE_PREFIX) and name in self.server.traces:
            self._open_trace(self.server.traces[name])
        else:
            self.send_error(HTTPStatus.NOT_FOUND)

    def end_headers(self) -> None:
        # The token is in this server's addresses: never sent on to another site.
        self.send_header("Referrer-Policy", "no-referrer")
        super().end_headers()

    def _send(self, body: bytes, content_type: str) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        self.send_response(HTTPStatus.FOUND)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _open_trace(self, path: Path) -> None:
        try:
            link = self.server.trace_servers.link(path)
        except CompileAheadError as err:
            self.send_error(HTTPStatus.NOT_FOUND, str(err))
            return
        self._redirect(link)


def bind_page(
    page: bytes,
    traces: dict[str, Path],
    port: int | None,
    ui: trace_open.OfflineUI | None,
    log: Callable[[str], None] | None = None,
) -> PageServer:
    try:
        return PageServer(port or 0, page, traces, ui, log)
    except OSError as err:
        raise CompileAheadError(
            f"--port {port}: cannot listen on {HOST}:{port} ({err.strerror})"
        ) from err


def serve_page(
    page: bytes,
    traces: dict[str, Path],
    *,
    port: int | None = None,
    browser: bool = True,
    offline: bool = False,
    verbose: bool = False,
    out: IO[str] | None = None,
) -> None:
    """Serve the page until Ctrl-C (or SIGTERM), printing its address and opening it."""
    out = out or sys.stdout
    ui = trace_open.find_offline_ui() if offline else None

    def log(line: str) -> None:
        print(f"  {line}", file=sys.stderr, flush=True)

    server = bind_page(page, traces, port, ui, log if verbose else None)
    threading.Thread(target=server.serve_forever, name="compare-page", daemon=True).start()
    try:
        with contextlib.ExitStack() as opened:
            print(f"serving the page at {server.url} until Ctrl-C", file=out, flush=True)
            if browser and not opened.enter_context(opened_in_browser(server.url)):
                print("no browser could be started: open the address above", file=out, flush=True)
            while True:
                time.sleep(0.2)
    except KeyboardInterrupt:
        print("server closed", file=out, flush=True)
    finally:
        server.shutdown()
        server.server_close()
