"""A schedule experiment at batch B (`ab schedule --batch B`): each sequence's prompt length,
and the arms that cannot decode a batch.

Every trial of an experiment at B > 1 runs `compile-ahead run --batch B --prompt-len
P0,P1,...`: B teacher-forced sequences, each with its own prompt length. Given one
--prompt-len P (or none: the ladder's default), the lengths are ragged around P: evenly spread
over [P - P/4, P + P/4] (rounded, at least 1), the first sequence the shortest, so their mean
is P. Each sequence decodes --decode-tokens T tokens, so sequence b passes every boundary
below its prompt length + T: with P - P/4 + T past a boundary, every sequence crosses it.
``--prompt-len 16,40,...`` gives one length per sequence instead. Batch 1 is the experiment
it always was: one --prompt-len, no --batch.
"""

from __future__ import annotations

from collections.abc import Sequence

from compile_ahead.errors import CompileAheadError

# The upstream NPUW pipeline decodes one sequence: these arms cannot run at B > 1.
SINGLE_SEQUENCE_ARMS = ("npuw-b0", "npuw-b1")
RAGGED_SPREAD = 0.25  # each side of the given prompt length, as a fraction of it


def ragged_lengths(center: int, batch: int) -> tuple[int, ...]:
    """B prompt lengths evenly spread over ``center`` +- RAGGED_SPREAD of it (mean ``center``)."""
    if batch == 1:
        return (center,)
    half = center * RAGGED_SPREAD
    return tuple(max(1, round(center - half + 2 * half * b / (batch - 1))) for b in range(batch))


def batch_and_lengths(
    batch: int | None, prompt_len: int | tuple[int, ...] | None, default_len: int
) -> tuple[int, tuple[int, ...]]:
    """(B, each sequence's prompt length) from --batch and --prompt-len (one length, one per
    sequence, or none: ``default_len``); one line when they disagree."""
    if isinstance(prompt_len, tuple):
        b = len(prompt_len) if batch is None else batch
        if b != len(prompt_len):
            raise CompileAheadError(
                f"--batch {b} needs one --prompt-len per sequence, got {len(prompt_len)} "
                f"({','.join(map(str, prompt_len))})"
            )
        return b, prompt_len
    b = 1 if batch is None else batch
    return b, ragged_lengths(default_len if prompt_len is None else prompt_len, b)


def check_batch_arms(arms: Sequence[str], batch: int) -> None:
    """Refuse, in one line, arms that decode one sequence when the experiment has B > 1."""
    single = [a for a in arms if a in SINGLE_SEQUENCE_ARMS]
    if batch > 1 and single:
        rest = [a for a in arms if a not in SINGLE_SEQUENCE_ARMS]
        instead = f"--arms {','.join(rest)}" if len(rest) > 1 else "other arms"
        raise CompileAheadError(
            f"--batch {batch}: the arm(s) {', '.join(single)} (OpenVINO's NPUW pipeline) "
            f"decode one sequence; run {instead}, or --batch 1"
        )


def prompt_len_text(lengths: Sequence[int]) -> str:
    """The trial's --prompt-len: one length, or one per sequence."""
    return ",".join(str(n) for n in lengths)
