"""A schedule experiment at batch B (`ab schedule --batch B`): each sequence's prompt length,
and the arms that cannot decode a batch.

Every trial of an experiment at B > 1 runs `compile-ahead run --batch B --prompt-len
P0,P1,...`: B teacher-forced sequences, each with its own prompt length. One --prompt-len P
(or none: the ladder's default) means what it means to `run --batch B`: every sequence's prompt
is P tokens. With --prompt-spread F the lengths are ragged around P instead: evenly spread over
[P - F*P, P + F*P] (rounded, at least 1), the first sequence the shortest, so their mean is P.
Each sequence decodes --decode-tokens T tokens, so sequence b passes every boundary below its
prompt length + T: with P - F*P + T past a boundary, every sequence crosses it.
``--prompt-len 16,40,...`` gives one length per sequence instead. Batch 1 is the experiment it
always was: one --prompt-len, no --batch.
"""

from __future__ import annotations

from collections.abc import Sequence

from compile_ahead.errors import CompileAheadError

# The upstream NPUW pipeline decodes one sequence: these arms cannot run at B > 1.
SINGLE_SEQUENCE_ARMS = ("npuw-b0", "npuw-b1")


def ragged_lengths(center: int, batch: int, spread: float) -> tuple[int, ...]:
    """B prompt lengths evenly spread over ``center`` +- ``spread`` of it (mean ``center``)."""
    if batch == 1:
        return (center,)
    half = center * spread
    return tuple(max(1, round(center - half + 2 * half * b / (batch - 1))) for b in range(batch))


def check_spread(spread: float) -> float:
    """--prompt-spread: a fraction in [0, 1) of the prompt length on each side."""
    if not 0 <= spread < 1:
        raise CompileAheadError(
            f"--prompt-spread must be in [0, 1) (a fraction of --prompt-len on each side), "
            f"got {spread}"
        )
    return spread


def batch_and_lengths(
    batch: int | None,
    prompt_len: int | tuple[int, ...] | None,
    default_len: int,
    spread: float = 0.0,
) -> tuple[int, tuple[int, ...]]:
    """(B, each sequence's prompt length) from --batch, --prompt-len (one length, one per
    sequence, or none: ``default_len``) and --prompt-spread; one line when they disagree."""
    check_spread(spread)
    if isinstance(prompt_len, tuple):
        b = len(prompt_len) if batch is None else batch
        if b != len(prompt_len):
            raise CompileAheadError(
                f"--batch {b} needs one --prompt-len per sequence, got {len(prompt_len)} "
                f"({','.join(map(str, prompt_len))})"
            )
        if spread:
            raise CompileAheadError(
                "--prompt-spread spreads one --prompt-len; "
                f"--prompt-len {','.join(map(str, prompt_len))} gives each sequence its own"
            )
        return b, prompt_len
    b = 1 if batch is None else batch
    return b, ragged_lengths(default_len if prompt_len is None else prompt_len, b, spread)


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
