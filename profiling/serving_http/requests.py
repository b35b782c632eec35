"""An OpenAI completions or chat completions request body, read into what the engine does
(one greedy request), with every parameter it cannot honour refused by name.

A parameter is accepted only with a value that leaves greedy decoding of one choice unchanged
(``temperature`` 0 or absent, ``n`` 1, ``top_p`` 1, penalties 0, no stop strings, ...);
any other value, and any name not listed here, is a 400 naming it, as OpenAI's API refuses an
unrecognised argument. ``seed`` and ``user`` are accepted with any value: greedy decoding does
not depend on a seed, and ``user`` only labels the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from compile_ahead.profiling.serving_http.errors import ApiError, bad_request, unsupported

# max_tokens of a completions request that gives none (OpenAI's documented default).
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
CHAT_ROLES = ("system", "developer", "user", "assistant")


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str


@dataclass(frozen=True)
class GenerationRequest:
    """One greedy request: a completions prompt (text or ids) or chat messages."""

    kind: Literal["completion", "chat"]
    model: str
    prompt_text: str | None = None
    prompt_ids: tuple[int, ...] | None = None
    messages: tuple[ChatMessage, ...] = ()
    max_tokens: int | None = None  # None: as many as the context holds
    stream: bool = False
    include_usage: bool = False


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _absent_or(*allowed: Any) -> Callable[[Any], bool]:
    return lambda v: (
        v is None
        or any(
            (type(v) is type(a) or (_is_number(v) and _is_number(a))) and v == a for a in allowed
        )
    )


_NEUTRAL_COMMON: dict[str, tuple[Callable[[Any], bool], str]] = {
    "temperature": (
        lambda v: v is None or (_is_number(v) and v == 0),
        "sampling (temperature > 0)",
    ),
    "top_p": (lambda v: v is None or (_is_number(v) and v == 1), "nucleus sampling (top_p < 1)"),
    "n": (_absent_or(1), "more than one choice (n > 1)"),
    "presence_penalty": (lambda v: v is None or (_is_number(v) and v == 0), "a presence penalty"),
    "frequency_penalty": (lambda v: v is None or (_is_number(v) and v == 0), "a frequency penalty"),
    "logit_bias": (lambda v: v is None or v == {}, "a logit bias"),
    "stop": (lambda v: v is None or v == [], "stop strings"),
    "seed": (lambda v: v is None or _is_int(v), "a seed that is not an integer"),
    "user": (lambda v: v is None or isinstance(v, str), "a user that is not a string"),
}
_NEUTRAL_COMPLETIONS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "echo": (_absent_or(False), "echoing the prompt"),
    "suffix": (lambda v: v is None, "a suffix"),
    "logprobs": (lambda v: v is None, "logprobs"),
    "best_of": (_absent_or(1), "best_of > 1"),
}
_NEUTRAL_CHAT: dict[str, tuple[Callable[[Any], bool], str]] = {
    "logprobs": (_absent_or(False), "logprobs"),
    "top_logprobs": (lambda v: v is None, "top_logprobs"),
    "response_format": (lambda v: v is None or v == {"type": "text"}, "a response format"),
    "tools": (lambda v: v is None or v == [], "tools"),
    "tool_choice": (_absent_or("none"), "tool choice"),
    "parallel_tool_calls": (lambda v: v is None, "parallel tool calls"),
    "functions": (lambda v: v is None or v == [], "functions"),
    "function_call": (_absent_or("none"), "function calls"),
    "modalities": (lambda v: v is None or v == ["text"], "output modalities other than text"),
    "store": (_absent_or(False), "stored completions"),
    "metadata": (lambda v: v is None or v == {}, "metadata (it is stored with a completion)"),
}
_READ_COMMON = ("model", "stream", "stream_options", "max_tokens")
_READ_COMPLETIONS = ("prompt",)
_READ_CHAT = ("messages", "max_completion_tokens")


def read_request(body: Any, kind: Literal["completion", "chat"]) -> GenerationRequest:
    """The request of a parsed JSON ``body`` to /v1/completions (``kind`` "completion") or
    /v1/chat/completions ("chat"); ApiError (400) for anything it cannot honour."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    neutral = _NEUTRAL_COMMON | (_NEUTRAL_COMPLETIONS if kind == "completion" else _NEUTRAL_CHAT)
    read = _READ_COMMON + (_READ_COMPLETIONS if kind == "completion" else _READ_CHAT)
    for name, value in body.items():
        if name in read:
            continue
        if name not in neutral:
            raise bad_request(
                f"Unrecognized request argument supplied: {name}",
                param=name,
                code="unrecognized_argument",
            )
        ok, what = neutral[name]
        if not ok(value):
            raise unsupported(name, what)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("model: a model name is required (see /v1/models)", param="model")
    stream = _stream(body)
    include_usage = _stream_options(body, stream)
    if kind == "completion":
        text, ids = _prompt(body.get("prompt"))
        max_tokens = _max_tokens(body, "max_tokens", COMPLETIONS_DEFAULT_MAX_TOKENS)
        return GenerationRequest(kind, model, text, ids, (), max_tokens, stream, include_usage)
    max_tokens = _chat_max_tokens(body)
    messages = _messages(body.get("messages"))
    return GenerationRequest(kind, model, None, None, messages, max_tokens, stream, include_usage)


def _stream(body: dict) -> bool:
    stream = body.get("stream")
    if stream is None:
        return False
    if not isinstance(stream, bool):
        raise bad_request("stream: must be true or false", param="stream")
    return stream


def _stream_options(body: dict, stream: bool) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not stream:
        raise bad_request(
            "stream_options: only allowed when stream is true", param="stream_options"
        )
    if not isinstance(options, dict) or set(options) - {"include_usage"}:
        raise unsupported("stream_options", "an option other than include_usage")
    usage = options.get("include_usage", False)
    if not isinstance(usage, bool):
        raise bad_request("stream_options.include_usage: must be true or false", "stream_options")
    return usage


def _max_tokens(body: dict, name: str, default: int | None) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if not _is_int(value) or value < 1:
        raise bad_request(f"{name}: must be an integer of at least 1, got {value!r}", param=name)
    return int(value)


def _chat_max_tokens(body: dict) -> int | None:
    legacy = _max_tokens(body, "max_tokens", None)
    current = _max_tokens(body, "max_completion_tokens", None)
    if legacy is not None and current is not None and legacy != current:
        raise bad_request(
            "max_tokens and max_completion_tokens differ: give one of them",
            param="max_completion_tokens",
        )
    return current if current is not None else legacy


def _prompt(prompt: Any) -> tuple[str | None, tuple[int, ...] | None]:
    """A completions prompt: a string, a list of token ids, or a list holding one of them
    (one prompt; a list of several is a batch, refused)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise bad_request("prompt: empty", param="prompt")
        return prompt, None
    if isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        return None, tuple(int(t) for t in prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(p, str | list) for p in prompt):
        raise unsupported("prompt", "more than one prompt in a request")
    raise bad_request(
        "prompt: must be a non-empty string or a non-empty list of token ids", param="prompt"
    )


def _messages(messages: Any) -> tuple[ChatMessage, ...]:
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages: must be a non-empty list", param="messages")
    out = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise bad_request(f"{where}: must be an object", param="messages")
        extra = set(message) - {"role", "content", "name"}
        if extra:
            raise unsupported("messages", f"{where}.{sorted(extra)[0]}")
        role = message.get("role")
        if role not in CHAT_ROLES:
            raise unsupported("messages", f"{where}.role {role!r} (only {', '.join(CHAT_ROLES)})")
        if message.get("name") is not None and not isinstance(message["name"], str):
            raise bad_request(f"{where}.name: must be a string", param="messages")
        out.append(ChatMessage(role, _content(message.get("content"), where)))
    return tuple(out)


def _content(content: Any, where: str) -> str:
    """A message's content: a string, or a list of text parts (joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise unsupported("messages", f"{where}.content part of type {kind!r}")
            if set(part) - {"type", "text"} or not isinstance(part.get("text"), str):
                raise bad_request(f"{where}.content: a text part is {{type, text}}", "messages")
            texts.append(part["text"])
        return "".join(texts)
    raise bad_request(f"{where}.content: must be a string or a list of text parts", "messages")


def refuse_unknown_model(request: GenerationRequest, served: str) -> None:
    if request.model != served:
        raise ApiError(
            404,
            f"The model {request.model!r} does not exist here; this server serves {served!r}",
            param="model",
            code="model_not_found",
        )
