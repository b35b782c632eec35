"""`compile-ahead serve` without --requests: the engine behind an OpenAI-compatible HTTP
endpoint (profiling/serving_http), until a signal ends it.

Trust: it listens on 127.0.0.1 unless --host names another address; every request needs the
bearer token, made at start and printed (or read from --token-file, a file only this user can
read). On the first SIGINT, SIGTERM or SIGHUP it stops: the listening socket closes, new
requests on open connections get 503, and the requests in flight go on for up to
--drain-timeout seconds; those still running then are cancelled (a non-streamed one gets 503, a
stream gets an error event and no [DONE]). A second signal cancels them at once. The command
exits 130, after writing the serving trace (--trace) of the requests the engine keeps: the
newest KEEP_FINISHED finished ones (runtime/serving/engine_thread.py), so that memory stays
bounded however long it serves.
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
from concurrent.futures import wait as wait_futures
from pathlib import Path
from typing import TYPE_CHECKING

from compile_ahead.commands.options import count, seconds
from compile_ahead.errors import CompileAheadError
from compile_ahead.interrupts import deferred, in_background, wait_out

if TYPE_CHECKING:
    from compile_ahead.profiling.serving_http.app import Endpoint
    from compile_ahead.profiling.serving_http.server import HttpServer
    from compile_ahead.runtime.serving.api import Engine, ServingSettings
    from compile_ahead.runtime.sources.base import ModelSource
    from compile_ahead.runtime.sources.tokenizer import TextTokenizer

DEFAULT_PORT = 8000
# Connections (and requests) served at once; beyond them a request gets 503.
MAX_CONNECTIONS = 64
# A connection that sends no whole request head within this of opening (or of its last
# response) is closed: idle or trickling connections cannot hold the server.
IDLE_TIMEOUT_S = 10.0
DRAIN_TIMEOUT_S = 10.0
# After the drain, what the server's thread is given to end before the command leaves anyway.
STOP_MARGIN_S = 5.0


def add_listen_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1, loopback only)",
    )
    p.add_argument(
        "--port",
        type=count(0),
        default=DEFAULT_PORT,
        help=f"the port to listen on (default {DEFAULT_PORT}; 0: any free port)",
    )
    p.add_argument(
        "--token-file",
        default=None,
        metavar="FILE",
        help="read the bearer token (the clients' api_key) from FILE, which only you may read "
        "(chmod 600); default: a new token, printed at start",
    )
    p.add_argument(
        "--model-name",
        default=None,
        help="the model id clients name (default: --model as given)",
    )
    p.add_argument(
        "--max-connections",
        type=count(1),
        default=MAX_CONNECTIONS,
        help=f"connections and requests served at once; beyond, 503 (default {MAX_CONNECTIONS})",
    )
    p.add_argument(
        "--idle-timeout",
        type=seconds,
        default=IDLE_TIMEOUT_S,
        metavar="SECONDS",
        help="close a connection that sends no whole request within this (default "
        f"{IDLE_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--drain-timeout",
        type=seconds,
        default=DRAIN_TIMEOUT_S,
        metavar="SECONDS",
        help="on Ctrl-C or SIGTERM, how long requests in flight may go on before they are "
        f"cancelled (default {DRAIN_TIMEOUT_S:g})",
    )


def _check_host(args: argparse.Namespace) -> None:
    """--host: an address; one that is not loopback is served with a warning."""
    if args.host != "127.0.0.1":
        try:
            address = ipaddress.ip_address(args.host)
        except ValueError:
            raise CompileAheadError(f"--host {args.host}: not an IPv4 or IPv6 address") from None
        if not address.is_loopback:
            print(
                f"compile-ahead: warning: --host {args.host} is reachable from other machines; "
                "the token crosses the network in clear text (no TLS here)",
                file=sys.stderr,
            )


# The replay's flags (serve --requests) and their defaults: given without --requests, refused.
REPLAY_FLAGS: dict[str, object] = {
    "simulate": None, "goodput": [], "out": None, "costs_out": None,
}  # fmt: skip
# The server's flags and their defaults: given with --requests, refused.
SERVER_FLAGS: dict[str, object] = {
    "host": "127.0.0.1",
    "port": DEFAULT_PORT,
    "token_file": None,
    "model_name": None,
    "max_connections": MAX_CONNECTIONS,
    "idle_timeout": IDLE_TIMEOUT_S,
    "drain_timeout": DRAIN_TIMEOUT_S,
}


def check_mode_flags(args: argparse.Namespace) -> None:
    """Flags of the other mode are refused in one line rather than ignored."""
    listening = args.requests is None
    other = REPLAY_FLAGS if listening else SERVER_FLAGS
    given = [name for name, default in other.items() if getattr(args, name) != default]
    if given:
        flag = "--" + given[0].replace("_", "-")
        mode = (
            "the request file's replay (--requests)" if listening else "listening (no --requests)"
        )
        raise CompileAheadError(f"{flag} is for {mode}")


def listen_http(args: argparse.Namespace, settings: ServingSettings) -> int:
    with deferred():  # these load OpenVINO and the HTTP stack
        from compile_ahead.profiling.serving_http.auth import new_token, read_token_file
        from compile_ahead.profiling.serving_http.server import bind

    _check_host(args)
    token = read_token_file(args.token_file) if args.token_file else new_token()
    sock = bind(args.host, args.port)  # a port in use is refused before the model loads
    try:
        engine, endpoint = _start(args, settings, token)
    except BaseException:
        sock.close()
        raise
    return _serve(args, engine, endpoint, sock, token)


def _start(
    args: argparse.Namespace, settings: ServingSettings, token: str
) -> tuple[Engine, Endpoint]:
    with deferred():
        from compile_ahead.commands.options import resolve_from_args
        from compile_ahead.profiling.serving_http.app import Endpoint, EndpointSettings
        from compile_ahead.profiling.serving_http.chat import source_chat_template
        from compile_ahead.runtime.serving.api import start_engine

    source = resolve_from_args(args)
    tokenizer = _tokenizer(source)
    chat_template = source_chat_template(source)
    print(f"model: {source.label}", flush=True)
    engine = start_engine(source, settings)
    endpoint = Endpoint(
        engine,
        EndpointSettings(
            model_name=args.model_name or args.model,
            token=token,
            loopback_only=ipaddress.ip_address(args.host).is_loopback,
        ),
        source.config.vocab_size,
        tokenizer,
        chat_template,
    )
    return engine, endpoint


def _tokenizer(source: ModelSource) -> TextTokenizer | None:
    """The model's tokenizer, or None when it has none (requests then give token ids): the
    one the source names itself (``text_tokenizer()``, e.g. a GGUF's own, where sources have
    it), else its directory's."""
    from compile_ahead.runtime.model.ir_files import TOKENIZER_XML
    from compile_ahead.runtime.sources.tokenizer import load_tokenizer

    own = getattr(source, "text_tokenizer", None)
    if callable(own):
        try:
            return own()
        except CompileAheadError:  # none: the requests give token ids
            return None
    where = source.model_dir
    if where is None or not (
        (where / TOKENIZER_XML).is_file() or (where / "tokenizer.json").is_file()
    ):
        return None
    return load_tokenizer(where, source.name)


def _serve(
    args: argparse.Namespace, engine: Engine, endpoint: Endpoint, sock: socket.socket, token: str
) -> int:
    from compile_ahead.profiling.serving_http.server import HttpServer

    server = HttpServer(
        endpoint,
        sock,
        grace_s=args.drain_timeout + STOP_MARGIN_S,
        max_connections=args.max_connections,
        idle_timeout_s=args.idle_timeout,
    )
    try:
        server.start()
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(f"serving {endpoint.settings.model_name} at http://{host}:{server.port}/v1")
        print(f"api key: {'from ' + args.token_file if args.token_file else token}")
        print("Ctrl-C to stop", flush=True)
        while server.running():
            server.join(0.2)
        failure = server.failure()
        raise CompileAheadError(f"the HTTP server stopped: {failure}")
    except KeyboardInterrupt:
        _shut_down(args, engine, endpoint, server)
        if args.trace is not None:
            _write_trace(args.trace, engine)
        raise


def _write_trace(path: Path, engine: Engine) -> None:
    """The serving trace of what the stopped engine keeps (its newest finished requests)."""
    from compile_ahead.profiling.traces.serving import write_serving_trace
    from compile_ahead.runtime.serving.engine_thread import ThreadedEngine

    stopped = engine.stopped_engine() if isinstance(engine, ThreadedEngine) else None
    if stopped is None:
        print("compile-ahead: trace not written: the engine did not stop", file=sys.stderr)
        return
    print(f"trace: {write_serving_trace(path, stopped, stopped.clock.now())}", flush=True)


def _shut_down(
    args: argparse.Namespace, engine: Engine, endpoint: Endpoint, server: HttpServer
) -> None:
    """The stated behaviour on a signal (module docstring): no new requests, the engine
    drained within --drain-timeout, the server's thread ended."""
    endpoint.draining = True
    server.stop()
    drained = in_background(lambda: engine.drain(args.drain_timeout), "engine-drain")

    def unfinished() -> list[str]:
        left = []
        if not drained.done():
            left.append(
                f"the engine's drain (requests in flight cancelled after {args.drain_timeout:g} s)"
            )
        if server.running():
            left.append("the HTTP server")
        return left

    def give_up() -> None:
        endpoint.cancel_all()
        server.stop(force=True)

    def wait(slice_s: float) -> None:
        if server.running():
            server.join(slice_s)
        else:
            wait_futures([drained], timeout=slice_s)

    wait_out(unfinished, wait, give_up)
    server.join(STOP_MARGIN_S)
