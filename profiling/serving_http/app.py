"""The endpoint's routes (Starlette): /v1/completions, /v1/chat/completions, /v1/models,
/health (the engine's status: ready or not, buckets compiled and compiling; 503 until ready and
while it shuts down) and /metrics (Prometheus text). Every route needs the bearer token
(auth.py); every refusal is an OpenAI-style error body."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from compile_ahead.profiling.serving_http.auth import Guard
from compile_ahead.profiling.serving_http.bodies import Bodies
from compile_ahead.profiling.serving_http.engine_bridge import Submission
from compile_ahead.profiling.serving_http.errors import ApiError, bad_request
from compile_ahead.profiling.serving_http.generation import (
    ClientGone,
    ended,
    stream_response,
    until_gone,
    whole_response,
)
from compile_ahead.profiling.serving_http.metrics import CONTENT_TYPE, EndpointMetrics
from compile_ahead.profiling.serving_http.requests import (
    GenerationRequest,
    read_request,
    refuse_unknown_model,
)

if TYPE_CHECKING:
    from compile_ahead.profiling.serving_http.chat import ChatTemplate
    from compile_ahead.runtime.serving.api import Engine
    from compile_ahead.runtime.sources.tokenizer import TextTokenizer

# A request body larger than this is refused (413) unread: a prompt of a few thousand tokens
# as JSON ids or text is well under it.
MAX_BODY_BYTES = 1 << 20
# A body that takes longer than this to arrive is refused (408): a slow sender holds no slot.
BODY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class EndpointSettings:
    model_name: str  # the id /v1/models lists and requests must name
    token: str
    loopback_only: bool = True
    max_body_bytes: int = MAX_BODY_BYTES
    body_timeout_s: float = BODY_TIMEOUT_S


class Endpoint:
    """The app around one engine: ``asgi`` is what uvicorn serves; ``draining`` once set
    refuses new generation requests (503) while the engine finishes the others."""

    def __init__(
        self,
        engine: Engine,
        settings: EndpointSettings,
        vocab_size: int,
        tokenizer: TextTokenizer | None = None,
        chat_template: ChatTemplate | None = None,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.vocab_size = vocab_size
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.draining = False
        self.active: set[Submission] = set()  # the requests in the engine
        self.metrics = EndpointMetrics(engine)
        self.started = int(time.time())
        routes = [
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/models/{model_id:path}", self.model, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.prometheus, methods=["GET"]),
        ]
        self.asgi = Starlette(
            routes=routes,
            middleware=[
                Middleware(
                    Guard,
                    token=settings.token,
                    loopback_only=settings.loopback_only,
                )
            ],
            exception_handlers={
                ApiError: _api_error,  # type: ignore[dict-item]
                HTTPException: _http_error,  # type: ignore[dict-item]
                Exception: _server_error,
            },
        )

    def cancel_all(self) -> None:
        """Cancel every request in flight (the command's shutdown, on a second signal)."""
        for submission in list(self.active):
            submission.cancel()

    # --- the routes ---------------------------------------------------------------------------
    async def completions(self, request: Request) -> Response:
        return await self._generate(request, "completion")

    async def chat_completions(self, request: Request) -> Response:
        return await self._generate(request, "chat")

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [self._model_card()]})

    async def model(self, request: Request) -> Response:
        if request.path_params["model_id"] != self.settings.model_name:
            raise ApiError(
                404,
                f"The model {request.path_params['model_id']!r} does not exist",
                param="model",
                code="model_not_found",
            )
        return JSONResponse(self._model_card())

    async def health(self, request: Request) -> Response:
        status = dict(self.engine.status()) | {"draining": self.draining}
        ready = bool(status.get("ready")) and not self.draining
        return JSONResponse(status, status_code=200 if ready else 503)

    async def prometheus(self, request: Request) -> Response:
        # In a worker thread: the engine answers metrics() from its own thread, which may be
        # busy with a step, and the event loop must go on streaming meanwhile.
        text = await run_in_threadpool(self.metrics.text)
        return Response(text, media_type=CONTENT_TYPE)

    def _model_card(self) -> dict[str, Any]:
        return {
            "id": self.settings.model_name,
            "object": "model",
            "created": self.started,
            "owned_by": "compile-ahead",
            "max_model_len": self.engine.max_context,
        }

    # --- generation ---------------------------------------------------------------------------
    async def _generate(self, request: Request, kind: Literal["completion", "chat"]) -> Response:
        route = request.url.path
        self.metrics.in_flight.inc()
        try:
            response = await self._answer(request, kind)
        except ApiError as err:
            response = JSONResponse(err.body(), status_code=err.status)
        finally:
            self.metrics.in_flight.dec()
        self.metrics.responses.labels(route, str(response.status_code)).inc()
        return response

    async def _answer(self, request: Request, kind: Literal["completion", "chat"]) -> Response:
        if self.draining:
            raise ApiError(503, "the server is shutting down", code="server_shutdown")
        body = await self._read_body(request)
        try:
            parsed = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise bad_request(
                f"We could not parse the JSON body of your request ({err})", code="invalid_json"
            ) from None
        wanted = read_request(parsed, kind)
        refuse_unknown_model(wanted, self.settings.model_name)
        prompt = self._prompt_ids(wanted)
        max_tokens = self._max_tokens(wanted, len(prompt))
        submission = Submission(
            self.engine,
            prompt,
            max_tokens,
            "cmpl" if kind == "completion" else "chatcmpl",
            self.active,
        )
        try:
            first = await until_gone(request, asyncio.ensure_future(submission.next_event()))
        except ClientGone:
            return self._gone(submission)
        if first.finished is not None:
            error = ended(first, self.draining) or ApiError(
                500, "the engine ended the request without a token", code="engine_error"
            )
            raise error
        bodies = Bodies(kind, submission.request_id, self.settings.model_name)
        decoder = self.tokenizer
        if wanted.stream:
            return stream_response(
                submission,
                first,
                bodies,
                decoder,
                len(prompt),
                wanted.include_usage,
                self.metrics.disconnects.inc,
            )
        try:
            return await whole_response(
                request, submission, first, bodies, decoder, len(prompt), lambda: self.draining
            )
        except ClientGone:
            return self._gone(submission)

    def _gone(self, submission: Submission) -> Response:
        submission.cancel()
        self.metrics.disconnects.inc()
        return Response(status_code=499)  # nobody reads it: nginx's "client closed request"

    async def _read_body(self, request: Request) -> bytes:
        limit = self.settings.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"the request body is over {limit} bytes", code="body_too_large")
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.settings.body_timeout_s):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise ApiError(
                            413, f"the request body is over {limit} bytes", code="body_too_large"
                        )
                    chunks.append(chunk)
        except TimeoutError:
            raise ApiError(
                408,
                f"the request body did not arrive within {self.settings.body_timeout_s:g} s",
                code="timeout",
            ) from None
        except ClientDisconnect:
            raise ApiError(400, "the client went away while sending", code="client_gone") from None
        return b"".join(chunks)

    def _prompt_ids(self, wanted: GenerationRequest) -> list[int]:
        if wanted.prompt_ids is not None:
            ids = list(wanted.prompt_ids)
            bad = [i for i in ids if not 0 <= i < self.vocab_size]
            if bad:
                raise bad_request(
                    f"prompt: token ids out of the vocabulary [0, {self.vocab_size}): {bad[:5]}",
                    param="prompt",
                )
            return ids
        if wanted.kind == "chat":
            if self.chat_template is None:
                raise bad_request(
                    "this model has no chat template: use /v1/completions",
                    param="messages",
                    code="no_chat_template",
                )
            text = self.chat_template.render(wanted.messages)
            return self._encode(text, "messages", special_tokens=False)
        return self._encode(wanted.prompt_text or "", "prompt", special_tokens=True)

    def _encode(self, text: str, param: str, special_tokens: bool) -> list[int]:
        if self.tokenizer is None:
            raise bad_request(
                "this model has no tokenizer: give the prompt as token ids",
                param=param,
                code="no_tokenizer",
            )
        if special_tokens:
            ids = list(self.tokenizer.encode(text).ids)
        else:  # a chat template writes the special tokens itself
            try:
                ids = list(self.tokenizer.encode(text, add_special_tokens=False).ids)  # type: ignore[call-arg]
            except TypeError:  # a tokenizer without the switch (openvino-tokenizers)
                ids = list(self.tokenizer.encode(text).ids)
        if not ids:
            raise bad_request(f"{param}: encodes to no tokens", param=param)
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise bad_request(
                f"{param}: the tokenizer gives ids beyond the model's vocabulary", param=param
            )
        return [int(i) for i in ids]

    def _max_tokens(self, wanted: GenerationRequest, prompt_tokens: int) -> int:
        room = self.engine.max_context - prompt_tokens
        if wanted.max_tokens is None:
            if room < 1:
                raise self._too_long(prompt_tokens, 1)
            return room
        if wanted.max_tokens > room:
            raise self._too_long(prompt_tokens, wanted.max_tokens)
        return wanted.max_tokens

    def _too_long(self, prompt_tokens: int, max_tokens: int) -> ApiError:
        return ApiError(
            400,
            f"This model's maximum context length is {self.engine.max_context} tokens; the "
            f"request asks for {prompt_tokens + max_tokens} ({prompt_tokens} in the prompt, "
            f"{max_tokens} to generate)",
            param="max_tokens",
            code="context_length_exceeded",
        )


async def _api_error(request: Request, err: ApiError) -> Response:
    return JSONResponse(err.body(), status_code=err.status)


async def _http_error(request: Request, err: HTTPException) -> Response:
    message = {404: "no such route", 405: "method not allowed"}.get(err.status_code, err.detail)
    body = ApiError(err.status_code, f"{request.method} {request.url.path}: {message}").body()
    return JSONResponse(body, status_code=err.status_code, headers=err.headers)


async def _server_error(request: Request, err: Exception) -> Response:
    traceback.print_exception(err, file=sys.stderr)
    body = ApiError(500, "internal server error", code="internal_error").body()
    return JSONResponse(body, status_code=500)
