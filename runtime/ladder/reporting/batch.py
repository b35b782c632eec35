"""What a batch of B > 1 sequences adds to the run report: each sequence's prompt, tokens,
stop and first token, the batch's aggregate rate and step time, and KV bytes per sequence
beside the batch's. A batch-1 report holds none of it: it is the format it always was."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

MIB = 2**20
SHOWN_SEQUENCES = 8  # the summary's per-sequence lines; beyond, one line folds the rest


@dataclass
class SequenceReport:
    sequence: int  # its index in the batch
    prompt_len: int
    tokens_generated: int
    tokens: list[int]  # the first comes from the prompt's last logits
    stop_reason: str  # eos, token limit, the top rung, or the run's own end
    first_token_s: float | None  # from the command's start; None: no token


@dataclass
class BatchStats:
    """The batch's part of a run report (its JSON keys are these fields' names)."""

    batch: int
    sequences: list[SequenceReport]
    batch_steps: int
    step_s_mean: float | None
    step_s_median: float | None
    tokens_generated: int
    tokens_per_s: float | None  # tokens the decode steps gave, over their time
    kv_reserved_avg_bytes_per_sequence: float | None
    kv_reserved_peak_bytes_per_sequence: float | None
    kv_committed_avg_bytes_per_sequence: float | None
    kv_committed_peak_bytes_per_sequence: float | None

    @classmethod
    def of(
        cls,
        sequences: list[SequenceReport],
        step_ns: list[int],
        from_prefill: int,
        kv: dict[str, float | int | None],
    ) -> BatchStats:
        """A step feeds every live sequence one token (a prompt token or its last one); every
        generated token is a step's output but the ``from_prefill`` first tokens a prefill
        graph gave, which the aggregate rate over the step time leaves out. ``kv``: the
        report's KV figures (kv_reserved_avg_bytes, ...), shared out per sequence."""
        batch = len(sequences)
        generated = sum(s.tokens_generated for s in sequences)
        steps_s = sum(step_ns) / 1e9

        def each(name: str) -> float | None:
            value = kv[name]
            return value / batch if value is not None else None

        return cls(
            batch=batch,
            sequences=sequences,
            batch_steps=len(step_ns),
            step_s_mean=steps_s / len(step_ns) if step_ns else None,
            step_s_median=sorted(step_ns)[len(step_ns) // 2] / 1e9 if step_ns else None,
            tokens_generated=generated,
            tokens_per_s=(generated - from_prefill) / steps_s if steps_s > 0 else None,
            kv_reserved_avg_bytes_per_sequence=each("kv_reserved_avg_bytes"),
            kv_reserved_peak_bytes_per_sequence=each("kv_reserved_peak_bytes"),
            kv_committed_avg_bytes_per_sequence=each("kv_committed_avg_bytes"),
            kv_committed_peak_bytes_per_sequence=each("kv_committed_peak_bytes"),
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """The summary's batch part."""
        rate, step = self.tokens_per_s, self.step_s_mean
        lines = [
            f"batch {self.batch}: {self.tokens_generated} tokens in {self.batch_steps} steps"
            + (f", {rate:.2f} tok/s aggregate" if rate else "")
            + (f", {step * 1e3:.2f} ms per step" if step else "")
            + "; KV per sequence: reserved avg "
            + _mib(self.kv_reserved_avg_bytes_per_sequence)
            + " MiB, committed peak "
            + _mib(self.kv_committed_peak_bytes_per_sequence)
            + " MiB"
        ]
        sequences = self.sequences
        shown = sequences if len(sequences) <= SHOWN_SEQUENCES else sequences[: SHOWN_SEQUENCES - 1]
        for s in shown:
            first = s.first_token_s
            when = f"first token {first:.2f} s" if first is not None else "no token"
            lines.append(
                f"  sequence {s.sequence}: prompt {s.prompt_len}, "
                f"{s.tokens_generated} tokens, {when}, stop: {s.stop_reason}"
            )
        if len(shown) < len(sequences):
            lines.append(f"  ... {len(sequences) - len(shown)} more sequences (each in the report)")
        return lines


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / MIB:.2f}"
