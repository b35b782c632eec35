"""Generated token ids to text as they come, for the streamed responses: each new token's text
is what decoding the last few tokens adds, held back while it ends in an unfinished UTF-8
character (a byte-level tokenizer splits one character over several tokens)."""

from __future__ import annotations

from typing import Protocol

# Tokens decoded again before the newest one: enough context for a decoder that joins tokens
# (a leading space, a byte sequence), a bounded cost per token.
WINDOW = 6
UNFINISHED = "\ufffd"  # what a decoder gives for an incomplete UTF-8 sequence


class Decoder(Protocol):
    def decode(self, ids: list[int]) -> str: ...


class TextStream:
    """``add(token)`` gives the text the token completes ("" while a character is unfinished,
    or without a tokenizer); ``text`` is all of it so far."""

    def __init__(self, decoder: Decoder | None) -> None:
        self._decoder = decoder
        self._ids: list[int] = []
        self._anchor = 0  # the window's first token
        self._anchor_text = ""  # the text of ids[anchor:emitted] already given out
        self.text = ""

    def add(self, token: int) -> str:
        if self._decoder is None:
            return ""
        self._ids.append(token)
        window = self._decoder.decode(self._ids[self._anchor :])
        if window.endswith(UNFINISHED) or not window.startswith(self._anchor_text):
            return ""
        new = window[len(self._anchor_text) :]
        self.text += new
        self._anchor = max(0, len(self._ids) - WINDOW)
        self._anchor_text = self._decoder.decode(self._ids[self._anchor :])
        return new

    def finish(self) -> str:
        """What is still held back at the end: the whole output decoded, less what was given
        out (an unfinished character comes out as the decoder gives it)."""
        if self._decoder is None or not self._ids:
            return ""
        full = self._decoder.decode(self._ids)
        new = full[len(self.text) :] if full.startswith(self.text) else ""
        self.text += new
        return new
