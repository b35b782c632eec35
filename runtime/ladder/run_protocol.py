"""What a run feeds the model: the seed's teacher-forced protocol, or greedy from a prompt."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compile_ahead.errors import CompileAheadError

PROTOCOL_SEED = 1234


@dataclass(frozen=True)
class RunProtocol:
    name: str  # "teacher-forced" | "greedy"
    prompt: tuple[int, ...]
    decode_tokens: int
    forced: tuple[int, ...] = ()  # teacher-forced inputs for decode steps 0..T-1
    eos: frozenset[int] = frozenset()  # greedy: generation ends after one of these

    def ends(self, predicted: int) -> bool:
        return predicted in self.eos

    def next_input(self, step: int, predicted: int) -> int:
        return self.forced[step] if self.name == "teacher-forced" else predicted


def teacher_forced(
    vocab_size: int, prompt_len: int, decode_tokens: int, seed: int = PROTOCOL_SEED
) -> RunProtocol:
    """A fixed token sequence from a seed: P prompt tokens, then T forced decode inputs."""
    if prompt_len <= 0 or decode_tokens <= 0:
        raise CompileAheadError("--prompt-len and --decode-tokens must be positive")
    draws = np.random.default_rng(seed).integers(0, vocab_size, size=prompt_len + decode_tokens)
    ids = tuple(int(i) for i in draws)
    return RunProtocol("teacher-forced", ids[:prompt_len], decode_tokens, ids[prompt_len:])


def greedy(prompt: list[int], decode_tokens: int, eos: tuple[int, ...] = ()) -> RunProtocol:
    """Generate from the prompt until an EOS id or ``decode_tokens`` decode steps (the prompt's
    last logits give the first token; 0 steps: that token only)."""
    if not prompt or decode_tokens < 0:
        raise CompileAheadError("greedy generation needs a prompt and a token count >= 0")
    return RunProtocol("greedy", tuple(prompt), decode_tokens, eos=frozenset(eos))
