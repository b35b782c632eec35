"""`compare --open`: the page served on 127.0.0.1, its trace links opened through `trace open`.

The page is served at ``/``. A trace link ``/trace/NAME`` (NAME one of the page's traces)
starts `trace open`'s own server for that file (profiling/trace_open.py: the trace on
127.0.0.1:9001 or the next free port, CORS for the Perfetto UI, or the offline UI build) and
redirects the browser to that server's deep link into the UI; the trace server closes once
the UI has fetched the trace, or after TRACE_WAIT_S. Only requests naming this server
(Host 127.0.0.1 or localhost and its port) are answered, so another site cannot drive it
through a rebound DNS name.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import webbrowser
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling import trace_open

HOST = trace_open.HOST
TRACE_PREFIX = "/trace/"
# A trace server whose trace the UI has not fetched by then closes anyway.
TRACE_WAIT_S = 600.0


def serve_trace(
    path: Path, ui: trace_open.OfflineUI | None, log: Callable[[str], None] | None
) -> str:
    """Start `trace open`'s server for ``path`` (the file opened once, as `trace open` opens
    it) in the background; its deep link into the UI. The server closes, and the file with
    it, once the UI has fetched the trace (offline: and its own files), or after
    TRACE_WAIT_S."""
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
    return server.ui_url()


class PageServer(ThreadingHTTPServer):
    daemon_threads = True

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
        self.ui = ui
        self.log = log
        super().__init__((HOST, port), PageHandler)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}/"


class PageHandler(BaseHTTPRequestHandler):
    server: PageServer
    timeout = trace_open.CONNECTION_TIMEOUT_S  # an idle connection is closed

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if self.server.log is not None:
            self.server.log(f"{self.requestline} -> {code}")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # http.server's access log would bury the link

    def _ours(self) -> bool:
        port = self.server.server_address[1]
        return self.headers.get("Host") in {f"{HOST}:{port}", f"localhost:{port}"}

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if not self._ours():
            self.send_error(HTTPStatus.FORBIDDEN, "not this server's address")
        elif path in ("/", "/index.html"):
            self._send(self.server.page, "text/html; charset=utf-8")
        elif (
            path.startswith(TRACE_PREFIX)
            and unquote(path[len(TRACE_PREFIX) :]) in self.server.traces
        ):
            self._open_trace(self.server.traces[unquote(path[len(TRACE_PREFIX) :])])
        else:
            self.send_error(HTTPStatus.NOT_FOUND)

    def _send(self, body: bytes, content_type: str) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.write(body)

    def _open_trace(self, path: Path) -> None:
        try:
            link = serve_trace(path, self.server.ui, self.server.log)
        except CompileAheadError as err:
            self.send_error(HTTPStatus.NOT_FOUND, str(err))
            return
        self.send_response(HTTPStatus.FOUND)
        self.send_header("Location", link)
        self.send_header("Content-Length", "0")
        self.end_headers()


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
        print(f"serving the page at {server.url} until Ctrl-C", file=out, flush=True)
        if browser and not webbrowser.open_new_tab(server.url):
            print("no browser could be started: open the address above", file=out, flush=True)
        while True:
            time.sleep(0.2)
    except KeyboardInterrupt:
        print("server closed", file=out, flush=True)
    finally:
        server.shutdown()
        server.server_close()
