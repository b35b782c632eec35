"""The endpoint served in the test process: the app (profiling/serving_http) over an engine the
test gives (usually tests/fake_engine.py's), uvicorn on a free loopback port, stopped after."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from compile_ahead.profiling.serving_http.app import Endpoint, EndpointSettings
from compile_ahead.profiling.serving_http.server import HttpServer, bind

MODEL = "tiny-fake"
TOKEN = "test-token-0123456789abcdef"


@dataclass
class Served:
    url: str  # http://127.0.0.1:PORT
    token: str
    engine: Any
    endpoint: Endpoint
    server: HttpServer

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def client(self, **kwargs: Any) -> Any:
        import openai

        options = {"max_retries": 0, "timeout": 30} | kwargs
        return openai.OpenAI(base_url=self.base_url, api_key=self.token, **options)


@contextlib.contextmanager
def served(
    engine: Any,
    tokenizer: Any = None,
    chat_template: Any = None,
    vocab_size: int = 1000,
    **server_options: Any,
) -> Iterator[Served]:
    settings = EndpointSettings(
        model_name=MODEL,
        token=TOKEN,
        **{
            k: server_options.pop(k)
            for k in list(server_options)
            if k in ("max_body_bytes", "body_timeout_s")
        },
    )
    endpoint = Endpoint(engine, settings, vocab_size, tokenizer, chat_template)
    sock = bind("127.0.0.1", 0)
    limits = {"max_connections": 64, "idle_timeout_s": 10.0} | server_options
    server = HttpServer(endpoint, sock, grace_s=2.0, **limits)
    server.start()
    try:
        yield Served(f"http://127.0.0.1:{server.port}", TOKEN, engine, endpoint, server)
    finally:
        server.stop(force=True)
        server.join(10)
        assert not server.running(), "the test's HTTP server did not stop"
