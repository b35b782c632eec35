"""What the local HTTP servers (`compare --open`'s page, `trace open`'s trace) share: they bind
127.0.0.1 only, answer only requests that carry their secret token, and serve a bounded number
of connections at once, each closed when it idles.

Any local user can connect to 127.0.0.1, so the address is no secret. Each server makes its own
token (``secrets``, 256 bits) and every URL it hands out starts with it, ``/TOKEN/...``, as
Jupyter's links carry theirs; a request whose path does not start with it gets 403 and no
content. A path prefix rather than a cookie or a query argument: the Perfetto UI fetches the
trace URL it is given as it is, across origins (no cookies), and the offline UI build and the
compare page reach their other files through relative links, which keep the prefix.
"""

from __future__ import annotations

import hmac
import secrets
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOST = "127.0.0.1"
TOKEN_BYTES = 32
# Connections served at once (a browser opens about 6 per server); more are closed unanswered.
MAX_CONNECTIONS = 16
# A connection idle this long (no request, or not reading what is sent) is closed.
CONNECTION_TIMEOUT_S = 5.0


def new_token() -> str:
    """A URL-safe secret of TOKEN_BYTES random bytes."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def path_after_token(path: str, token: str) -> str | None:
    """``path`` without its leading ``/TOKEN`` ("" for ``/TOKEN`` alone, "/x?q" for
    ``/TOKEN/x?q``), or None when its first segment is not ``token``. Compared in constant
    time, so the answer's timing does not tell how much of a guess was right."""
    if not path.startswith("/"):
        return None
    end = min((i for i in (path.find("/", 1), path.find("?", 1)) if i >= 0), default=len(path))
    given = path[1:end].encode("utf-8", "surrogateescape")
    if not hmac.compare_digest(given, token.encode()):
        return None
    return path[end:]


def refuse(handler: BaseHTTPRequestHandler) -> None:
    """403 with an empty body: nothing about what the server holds."""
    handler.send_response(HTTPStatus.FORBIDDEN)
    handler.send_header("Content-Length", "0")
    handler.end_headers()


class LoopbackServer(ThreadingHTTPServer):
    """A threading HTTP server on HOST with its own ``token``, serving at most
    MAX_CONNECTIONS connections at once (one thread each)."""

    daemon_threads = True

    def __init__(self, port: int, handler: type[BaseHTTPRequestHandler]) -> None:
        self.token = new_token()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__((HOST, port), handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def hosts(self) -> set[str]:
        """The Host headers that name this server (a page on another name that resolves
        here, DNS rebinding, names something else)."""
        return {f"{HOST}:{self.port}", f"localhost:{self.port}"}

    def named_by(self, handler: BaseHTTPRequestHandler) -> bool:
        """Whether the request's Host header names this server."""
        return handler.headers.get("Host", "").lower() in self.hosts()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # every slot busy: closed, no thread started
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()
