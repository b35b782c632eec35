"""One sequence of a run: what it is fed, what it generated, and why it stopped.

A run steps B >= 1 sequences together (B = 1 is a batch of one). Each has its own protocol
(prompt, token limit, EOS), its own past length in the KV store, and its own stop: a
sequence that reaches EOS, its own token limit or the top rung stops, and from then on its row
is fed nothing it keeps (past length 0, its new K/V dropped) and no token of it is reported.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compile_ahead.runtime.ladder.reporting.perplexity import token_nll
from compile_ahead.runtime.ladder.settings.run_protocol import RunProtocol

TOKEN_LIMIT = "token limit"


@dataclass
class SequenceState:
    """One sequence of a batch: what it was fed, what it generated, why it stopped."""

    index: int
    protocol: RunProtocol
    fed: int = 0  # tokens fed so far (prompt, then generated or forced)
    tokens: list[int] = field(default_factory=list)  # the prompt's top-1, then each step's
    logits: list[np.ndarray] = field(default_factory=list)  # each token's, when kept
    stop_reason: str | None = None
    first_token_ns: int | None = None
    prefill_ns: int = 0  # its prompt's time: on the prefill graph, or its prompt steps'
    # Teacher-forced text: (rung, NLL) of each output scored against the text's next token.
    scores: list[tuple[int, float]] = field(default_factory=list)

    @property
    def live(self) -> bool:
        return self.stop_reason is None

    def next_input(self) -> int:
        prompt = self.protocol.prompt
        if self.fed < len(prompt):
            return prompt[self.fed]
        return self.protocol.next_input(self.fed - len(prompt), self.tokens[-1])

    @property
    def in_prompt(self) -> bool:
        return self.fed < len(self.protocol.prompt)

    def prefilled(self, logits: np.ndarray, ts: int, keep_logits: bool, rung: int) -> None:
        """Its whole prompt was prefilled at once: ``logits`` are its last token's."""
        self.fed = len(self.protocol.prompt) - 1
        self.take(logits, ts, keep_logits, rung)

    def take(self, logits: np.ndarray, ts: int, keep_logits: bool, rung: int) -> None:
        """The logits of the token just fed (on ``rung``): past the prompt they give the next
        token (and, forcing a text, are scored against its next token), and the sequence stops
        at EOS or at its own token limit."""
        self.fed += 1
        produced = self.fed - len(self.protocol.prompt)  # 0: the prompt's last token
        if produced < 0:
            return
        token = int(np.argmax(logits))
        if produced == 0:
            self.first_token_ns = ts
        self.tokens.append(token)
        if keep_logits:
            self.logits.append(logits.copy())
        target = self.protocol.target(produced)
        if target is not None:
            self.scores.append((rung, token_nll(logits, target)))
        if self.protocol.ends(token):
            self.stop_reason = "eos"
        elif produced >= self.protocol.decode_tokens:
            self.stop_reason = TOKEN_LIMIT

    def to_json(self, command_ns: int, run_stop: str = "not stopped") -> dict[str, Any]:
        """Its report entry; a sequence the run's end cut short (an interrupt, an error)
        stops with the run's reason."""
        first = self.first_token_ns
        return {
            "sequence": self.index,
            "prompt_len": len(self.protocol.prompt),
            "tokens_generated": len(self.tokens),
            "tokens": self.tokens,
            "stop_reason": self.stop_reason or run_stop,
            "first_token_s": None if first is None else (first - command_ns) / 1e9,
        }


class Sequences:
    """A run's B >= 1 sequences: which are live, what they are fed next, why the run ended,
    and what the report says of each."""

    def __init__(self, protocols: tuple[RunProtocol, ...]) -> None:
        self.each = [SequenceState(i, p) for i, p in enumerate(protocols)]

    def __iter__(self) -> Iterator[SequenceState]:
        return iter(self.each)

    def __len__(self) -> int:
        return len(self.each)

    def live(self) -> np.ndarray:
        return np.array([s.live for s in self.each])

    def live_ones(self, live: np.ndarray) -> list[SequenceState]:
        return [s for s in self.each if live[s.index]]

    def in_prompt(self, live: np.ndarray) -> bool:
        """Whether every live sequence is still in its prompt (a prefill step)."""
        return all(s.in_prompt for s in self.live_ones(live))

    def next_inputs(self) -> np.ndarray:
        """Each live sequence's next token; a stopped one's row is fed 0, which it keeps not."""
        return np.array([s.next_input() if s.live else 0 for s in self.each], np.int64)

    def run_stop(self) -> str:
        """Why the run ended: the sequences' reason when they share one (a token limit is the
        protocol completed), else completed."""
        reasons = {s.stop_reason for s in self.each}
        if len(reasons) == 1:
            (reason,) = reasons
            if reason is not None and reason != TOKEN_LIMIT:
                return reason
        return "completed"

    def first_token_ns(self) -> int | None:
        """When the run's first token came: the first any sequence gave."""
        first = [s.first_token_ns for s in self.each if s.first_token_ns is not None]
        return min(first) if first else None

    def tokens_decoded(self) -> int:
        """Tokens the decode steps gave (each sequence's first comes from its prompt)."""
        return sum(max(0, len(s.tokens) - 1) for s in self.each)
