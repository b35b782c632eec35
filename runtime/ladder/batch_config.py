"""A batch of sequences in a run's configuration: how many, what each is fed, and what is
refused before anything is compiled.

A batch is B sequences stepped together through static [B, C] graphs, each with its own
prompt, its own past length and its own stop. ``check_batch`` checks what needs no model (B
against the prompts given, the prefill flags, whether the device compiles a graph of B
sequences at all: compile/settings/batch_probe.py); ``settle_sequences`` makes each
sequence's protocol once the model is known. Batch 1 is the run it always was: neither is
called then.

A batch is prefilled as a batch-1 run of its longest prompt would be (ladder/prefill.py):
with a prefill graph (the paged one on CPU, the static chunked one elsewhere, or as
--prefill-shape / --prefill-chunk say) each sequence's prompt runs on that batch-1 graph in
turn, its K/V written into its own row of the batch's store, so ragged prompts need no
padding; with chunk 1 (short prompts, or --prefill-chunk 1) they go token by token through the
batched decode graph, every sequence in its prompt fed its next prompt token each step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from compile_ahead.errors import CompileAheadError
from compile_ahead.runtime.compile.settings.batch_probe import check_batch_compiles
from compile_ahead.runtime.ladder.batch_bound import check_batch_size
from compile_ahead.runtime.ladder.run_protocol import RunProtocol, greedy, teacher_forced

if TYPE_CHECKING:
    from collections.abc import Callable

    from compile_ahead.runtime.ladder.capacities import Ladder
    from compile_ahead.runtime.sources.base import ModelSource

# config.py's RunConfig and Prompt, which import this module: named, not imported.
RunConfig = Any
Prompt = Any

WAYS_TO_GIVE_PROMPTS = (
    "one per sequence: --prompt-ids repeated, --prompts FILE, or --prompt-len 16,40,..."
)


def batch_size(batch: int | None, prompts: Sequence[object]) -> int:
    """B: as given, else one sequence per prompt given (at least one)."""
    return batch if batch is not None else max(1, len(prompts))


def check_batch(config: RunConfig) -> None:
    """B against the prompts given and the prefill flags; one line each."""
    batch, prompts = config.batch, config.prompts
    if batch is not None:
        check_batch_size(batch)
    b = check_batch_size(batch_size(batch, prompts), "the prompts given")
    if prompts and b != len(prompts):
        raise CompileAheadError(
            f"--batch {b} needs {b} prompts but {len(prompts)} were given ({WAYS_TO_GIVE_PROMPTS})"
        )
    if b == 1:
        return
    check_batch_compiles(config.options, b)  # the device itself, before any rung


def _prompt_length(prompt: RunProtocol | Prompt, source: ModelSource, default: int) -> int:
    if isinstance(prompt, RunProtocol):
        return len(prompt.prompt)
    if prompt.greedy:
        return len(prompt.tokens(source))
    return prompt.length if prompt.length is not None else default


def settle_sequences(
    config: RunConfig,
    source: ModelSource,
    default_len: int,
    default_prompt_len: Callable[[Ladder], int],
) -> tuple[Ladder, tuple[RunProtocol, ...]]:
    """The ladder (from the longest prompt; ``default_len`` for a prompt of no length) and
    each sequence's protocol: its prompt (``default_prompt_len`` of the ladder when it has
    no length), its own token limit (--decode-tokens, else up to the top rung) and, greedy,
    the model's EOS."""
    b = batch_size(config.batch, config.prompts)
    given = config.prompts or (config.protocol,) * b
    longest = max(_prompt_length(p, source, default_len) for p in set(given))
    ladder = config._ladder_for(source.config.max_position_embeddings, longest)
    made: dict[RunProtocol | Prompt, RunProtocol] = {}  # B equal prompts: one protocol
    for prompt in given:
        if prompt not in made:
            made[prompt] = _protocol(config, source, prompt, ladder, default_prompt_len(ladder))
    sequences = tuple(made[p] for p in given)
    for i, seq in enumerate(sequences):
        if len(seq.prompt) + 1 > ladder.top:
            raise CompileAheadError(
                f"the prompt of sequence {i} ({len(seq.prompt)} tokens) does not fit the top "
                f"rung ({ladder.top}) with room to decode"
            )
    return ladder, sequences


def _protocol(
    config: RunConfig,
    source: ModelSource,
    prompt: RunProtocol | Prompt,
    ladder: Ladder,
    default_len: int,
) -> RunProtocol:
    if isinstance(prompt, RunProtocol):
        return prompt
    if prompt.greedy:
        ids = prompt.tokens(source)
        tokens = config.decode_tokens
        if tokens is None:
            tokens = max(0, ladder.top - len(ids))  # a prompt over the top is refused below
        eos = source.config.eos_token_ids if prompt.stop_at_eos else ()
        return greedy(ids, tokens, eos)
    length = prompt.length if prompt.length is not None else default_len
    if not 0 < length < ladder.top:
        raise CompileAheadError(
            f"--prompt-len {length} must be in 1..{ladder.top - 1} to leave room to decode "
            f"below the top rung ({ladder.top})"
        )
    tokens = config.decode_tokens if config.decode_tokens is not None else ladder.top - length
    return teacher_forced(source.config.vocab_size, length, tokens)
