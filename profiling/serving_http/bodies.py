"""The response bodies of OpenAI's completions and chat completions APIs: the whole object of a
non-streamed response, and the chunks of a streamed one.

Each choice (and each streamed chunk) also carries ``token_ids``, the generated ids, beyond
OpenAI's fields (as vLLM's ``return_token_ids`` gives them): clients ignore an unknown field,
and a model without a tokenizer answers with them alone (its text is empty).
"""

from __future__ import annotations

import time
from typing import Any

# The engine's reasons a request ended, as OpenAI's finish_reason.
FINISH_REASONS = {"eos": "stop", "length": "length"}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


class Bodies:
    """The bodies of one response: ``kind`` "completion" or "chat", its id and model."""

    def __init__(self, kind: str, response_id: str, model: str) -> None:
        self.kind = kind
        self.id = response_id
        self.model = model
        self.created = int(time.time())

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def whole(
        self, text: str, token_ids: list[int], finish_reason: str, prompt_tokens: int
    ) -> dict[str, Any]:
        """The non-streamed response."""
        if self.kind == "completion":
            choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": None}
            obj = "text_completion"
        else:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
            }
            obj = "chat.completion"
        choice |= {"finish_reason": finish_reason, "token_ids": token_ids}
        return self._head(obj) | {
            "choices": [choice],
            "usage": usage(prompt_tokens, len(token_ids)),
        }

    def chunk(
        self,
        text: str,
        token_ids: list[int],
        finish_reason: str | None = None,
        first: bool = False,
    ) -> dict[str, Any]:
        """One streamed chunk: new text and ids, or the end (``finish_reason``); a chat
        stream's ``first`` chunk names the assistant's role."""
        if self.kind == "completion":
            choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": None}
            obj = "text_completion"
        else:
            delta: dict[str, Any] = {"role": "assistant"} if first else {}
            if text or (first and finish_reason is None):
                delta["content"] = text
            choice = {"index": 0, "delta": delta, "logprobs": None}
            obj = "chat.completion.chunk"
        choice |= {"finish_reason": finish_reason, "token_ids": token_ids}
        return self._head(obj) | {"choices": [choice]}

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        """The last chunk of a stream asked with ``stream_options.include_usage``."""
        obj = "text_completion" if self.kind == "completion" else "chat.completion.chunk"
        return self._head(obj) | {
            "choices": [],
            "usage": usage(prompt_tokens, completion_tokens),
        }
