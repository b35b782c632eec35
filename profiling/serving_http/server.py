"""The endpoint's HTTP server: uvicorn on its own thread and event loop, bound to a socket made
here first (a port in use is one line before anything starts; port 0 picks a free one), so the
command's main thread stays free to take the interrupt signals as every command does
(src/compile_ahead/interrupts.py) and to stop the server.

Bounds: at most ``max_connections`` connections and requests at once (uvicorn's
limit_concurrency: beyond it a request gets 503), and a connection that has not sent a whole
request head within ``idle_timeout_s`` of opening (or of its last response) is closed, so idle
or trickling connections cannot hold the server (uvicorn alone times out only connections that
finished a response).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import TYPE_CHECKING, Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from compile_ahead.errors import CompileAheadError
from compile_ahead.interrupts import WAIT_SLICE_S, start_helper_thread

if TYPE_CHECKING:
    from compile_ahead.profiling.serving_http.app import Endpoint

STARTUP_TIMEOUT_S = 30.0


class HeadTimeoutH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with the keep-alive timer armed when a connection opens too,
    and not reset by part of a request head: only a whole head (h11's Request event, which
    uvicorn's own code answers by cancelling the timer) stops it."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def data_received(self, data: bytes) -> None:
        self.conn.receive_data(data)
        self.handle_events()


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port``, or one line saying why not."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
        )[0]
    except socket.gaierror:
        raise CompileAheadError(f"--host {host}: not a numeric IPv4 or IPv6 address") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as err:
        sock.close()
        raise CompileAheadError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.set_inheritable(False)
    return sock


class HttpServer:
    """uvicorn serving ``endpoint`` on ``sock`` from a helper thread (``start``); ``stop``
    begins its graceful end (no new connections; in-flight requests are waited for up to
    ``grace_s``), ``stop(force=True)`` ends it at once."""

    def __init__(
        self,
        endpoint: Endpoint,
        sock: socket.socket,
        grace_s: float,
        max_connections: int,
        idle_timeout_s: float,
    ) -> None:
        self.sock = sock
        config = uvicorn.Config(
            endpoint.asgi,
            http=HeadTimeoutH11,
            ws="none",
            lifespan="off",
            loop="asyncio",
            log_config=None,  # uvicorn's warnings go to Python's last-resort handler (stderr)
            access_log=False,
            limit_concurrency=max_connections,
            timeout_keep_alive=int(max(1, idle_timeout_s)),
            timeout_graceful_shutdown=int(grace_s) + 1,
            server_header=False,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self._failed: BaseException | None = None

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def start(self) -> None:
        def serve() -> None:
            try:
                asyncio.run(self._server.serve(sockets=[self.sock]))
            except BaseException as err:  # reported by start() or wait()
                self._failed = err

        self._thread = start_helper_thread(serve, "http-server")
        waited = 0.0
        while not self._server.started and self._thread.is_alive():
            self._thread.join(WAIT_SLICE_S / 4)
            waited += WAIT_SLICE_S / 4
            if waited > STARTUP_TIMEOUT_S:
                raise CompileAheadError("the HTTP server did not start")
        if not self._server.started:
            raise CompileAheadError(f"the HTTP server did not start: {self._failed}")

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, seconds: float) -> None:
        if self._thread is not None:
            self._thread.join(seconds)

    def stop(self, force: bool = False) -> None:
        self._server.should_exit = True
        if force:
            self._server.force_exit = True

    def failure(self) -> BaseException | None:
        return self._failed

    def connections(self) -> Any:
        return len(self._server.server_state.connections)
