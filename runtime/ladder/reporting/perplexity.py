"""Teacher-forced text scored (`run --text FILE`): each step's logits against the text's next
token, as negative log-likelihood per rung and overall, with the tokens each figure covers.

The log-softmax is taken on the host in float64 from the logits the step already returned
(whatever the graph's precision), so the score adds no rounding of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


def token_nll(logits: np.ndarray, target: int) -> float:
    """-log softmax(logits)[target], in float64."""
    x = np.asarray(logits, np.float64).reshape(-1)
    top = float(x.max())
    return float(top + math.log(float(np.exp(x - top).sum())) - x[target])


@dataclass
class Score:
    """The NLL of ``tokens`` scored tokens (a rung's, or the whole run's)."""

    tokens: int
    nll_sum: float

    @property
    def nll_per_token(self) -> float | None:
        return self.nll_sum / self.tokens if self.tokens else None

    @property
    def perplexity(self) -> float | None:
        nll = self.nll_per_token
        return None if nll is None else math.exp(nll)

    def to_json(self) -> dict[str, Any]:
        return {
            "tokens_scored": self.tokens,
            "nll_per_token": self.nll_per_token,
            "perplexity": self.perplexity,
        }


@dataclass
class TextScore:
    """The report's ``text_score``: the document, the whole run's score and each rung's (the
    rung whose graph gave the logits; the prompt's last logits count on the first rung)."""

    document: str
    prompt_len: int
    overall: Score
    rungs: dict[int, Score]

    @classmethod
    def of(cls, document: str, prompt_len: int, scores: list[tuple[int, float]]) -> TextScore:
        """From (rung, nll) per scored token, of every sequence."""
        rungs: dict[int, Score] = {}
        for rung, nll in scores:
            score = rungs.setdefault(rung, Score(0, 0.0))
            score.tokens += 1
            score.nll_sum += nll
        overall = Score(len(scores), math.fsum(nll for _, nll in scores))
        return cls(document, prompt_len, overall, dict(sorted(rungs.items())))

    def to_json(self) -> dict[str, Any]:
        return {
            "document": self.document,
            "prompt_len": self.prompt_len,
            **self.overall.to_json(),
            "rungs": [{"capacity": c, **s.to_json()} for c, s in self.rungs.items()],
        }

    def lines(self) -> list[str]:
        """The summary's part."""
        head = f"text {self.document}: {_score(self.overall)}"
        lines = [f"{head} after a {self.prompt_len}-token prompt"]
        lines += [f"  rung {c:>6}: {_score(s)}" for c, s in self.rungs.items()]
        return lines


def _score(score: Score) -> str:
    nll, ppl = score.nll_per_token, score.perplexity
    if nll is None or ppl is None:
        return "no token scored"
    return f"NLL {nll:.4f} nats/token, perplexity {ppl:.3f} over {score.tokens} tokens"
