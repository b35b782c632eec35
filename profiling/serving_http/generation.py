"""Answering one generation request once it is read: submitted to the engine, then either one
JSON body when it ends or server-sent events as its tokens come (``data: {chunk}`` each, then
``data: [DONE]``).

The response starts only when the engine's first event is in: a request the engine refuses
still gets a status and an error body, not a stream that says nothing. While it waits, and
while a non-streamed request runs, the client is watched: a client that goes away cancels its
request, which frees its row at the engine's next step. A stream's client is watched by
sse-starlette, which cancels the stream; its ``finally`` cancels the request. A stream whose
client stops reading is ended after SEND_TIMEOUT_S without progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import JSONResponse, Response

from compile_ahead.profiling.serving_http.bodies import FINISH_REASONS, Bodies
from compile_ahead.profiling.serving_http.errors import ApiError
from compile_ahead.profiling.serving_http.text_stream import TextStream

if TYPE_CHECKING:
    from starlette.requests import Request

    from compile_ahead.profiling.serving_http.engine_bridge import Submission
    from compile_ahead.profiling.serving_http.text_stream import Decoder
    from compile_ahead.runtime.serving.api import TokenEvent

# A stream's send that makes no progress this long (a client that does not read) ends it.
SEND_TIMEOUT_S = 30.0
# A comment line this often on a quiet stream, so that a proxy or client keeps it open.
PING_S = 15.0


class ClientGone(Exception):
    """The client disconnected before its answer began."""


def ended(event: TokenEvent, draining: bool) -> ApiError | None:
    """The error a request's end gives (None for eos or length)."""
    if event.finished in FINISH_REASONS:
        return None
    why = event.message or event.finished
    if event.finished == "error":
        return ApiError(500, f"the engine failed on this request: {why}", code="engine_error")
    if event.finished == "cancelled":
        return ApiError(
            503, "the request was cancelled: the server is shutting down", code="server_shutdown"
        )
    status = 503 if draining else 400
    return ApiError(status, f"the engine refused the request: {why}", code="engine_refused")


async def _watch_disconnect(request: Request) -> None:
    """Returns when the client has gone (its body already read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def until_gone(request: Request, work: asyncio.Future[Any] | asyncio.Task[Any]) -> Any:
    """``work``'s result, or ClientGone when the client disconnects first."""
    watcher = asyncio.ensure_future(_watch_disconnect(request))
    try:
        done, _ = await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if work in done:
        return work.result()
    work.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await work
    raise ClientGone


async def whole_response(
    request: Request,
    submission: Submission,
    first: TokenEvent,
    bodies: Bodies,
    decoder: Decoder | None,
    prompt_tokens: int,
    draining: Any,
) -> Response:
    """The non-streamed answer: every token, then one body."""

    async def rest() -> TokenEvent:
        event = first
        while event.finished is None:
            assert event.token is not None  # a running request's event carries one
            tokens.append(event.token)
            event = await submission.next_event()
        return event

    tokens: list[int] = []
    last = await until_gone(request, asyncio.ensure_future(rest()))
    error = ended(last, draining())
    if error is not None:
        return JSONResponse(error.body(), status_code=error.status)
    text = decoder.decode(tokens) if decoder is not None and tokens else ""
    body = bodies.whole(text, tokens, FINISH_REASONS[last.finished], prompt_tokens)
    return JSONResponse(body)


def stream_response(
    submission: Submission,
    first: TokenEvent,
    bodies: Bodies,
    decoder: Decoder | None,
    prompt_tokens: int,
    include_usage: bool,
    on_disconnect: Any,
) -> Response:
    """The streamed answer: a chunk per token, the end, the usage if asked, [DONE]."""

    async def events() -> AsyncIterator[ServerSentEvent]:
        text = TextStream(decoder)
        count, event, opened = 0, first, False
        try:
            while event.finished is None:
                assert event.token is not None  # a running request's event carries one
                token = int(event.token)
                count += 1
                yield _sse(bodies.chunk(text.add(token), [token], first=not opened))
                opened = True
                event = await submission.next_event()
            error = ended(event, draining=True)
            if error is not None:  # cut short (shutdown, engine error): the error, no [DONE]
                yield _sse(error.body())
                return
            tail = text.finish()
            reason = FINISH_REASONS[event.finished]
            yield _sse(bodies.chunk(tail, [], finish_reason=reason, first=not opened))
            if include_usage:
                yield _sse(bodies.usage_chunk(prompt_tokens, count))
            yield ServerSentEvent(data="[DONE]")
        finally:
            if submission.finished is None:  # the client went away, or the send timed out
                submission.cancel()
                on_disconnect()

    return EventSourceResponse(events(), sep="\n", ping=PING_S, send_timeout=SEND_TIMEOUT_S)


def _sse(body: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps(body, separators=(",", ":")))
