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
    # Teacher-forced text (--text FILE): the document's name. Its forced tokens are then the
    # text after the prompt, one more than the steps feed: the prompt's last logits and each
    # step's are scored against the next of them (scored()).
    document: str | None = None

    def ends(self, predicted: int) -> bool:
        return predicted in self.eos

    def next_input(self, step: int, predicted: int) -> int:
        return self.forced[step] if self.name == "teacher-forced" else predicted

    def target(self, produced: int) -> int | None:
        """The text's token the logits of output ``produced`` (0: the prompt's last) are
        scored against; None: not a text run, or past its end."""
        if self.document is None or produced >= len(self.forced):
            return None
        return self.forced[produced]


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


def teacher_forced_text(
    ids: list[int], prompt_len: int, decode_tokens: int | None, top: int, what: str
) -> RunProtocol:
    """A document's tokens forced through the ladder: its first ``prompt_len`` tokens are the
    prompt, then ``decode_tokens`` steps (None: to its end) feed the tokens after it, and every
    logits from the prompt's last on are scored against the token that follows. The run holds
    prompt_len + decode_tokens slots, which the top rung must hold; ``what`` names the file."""
    n = len(ids)
    if n < prompt_len + 2:
        raise CompileAheadError(
            f"{what}: {n} tokens, too few for its {prompt_len}-token prompt and one decode step "
            f"(give a smaller --prompt-len or a longer text)"
        )
    room = n - prompt_len - 1  # steps to the text's end: its last token is only scored
    if decode_tokens is not None and decode_tokens > room:
        raise CompileAheadError(
            f"--decode-tokens {decode_tokens}: {what} has {n} tokens, enough for {room} decode "
            f"steps after its {prompt_len}-token prompt"
        )
    steps = room if decode_tokens is None else decode_tokens
    if prompt_len + steps > top:
        raise CompileAheadError(
            f"{what}: {n} tokens, longer than the top rung ({top}) holds: its {prompt_len}-token "
            f"prompt and {steps} forced tokens need {prompt_len + steps} slots; give "
            f"--decode-tokens {top - prompt_len} to force only the first part, or a larger ladder"
        )
    forced = tuple(ids[prompt_len : prompt_len + steps + 1])
    name = what.removeprefix("--text ")  # the file, as the report names the document
    return RunProtocol("teacher-forced", tuple(ids[:prompt_len]), steps, forced, document=name)
