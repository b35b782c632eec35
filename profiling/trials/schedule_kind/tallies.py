"""What `ab schedule` counts rather than tests: whether each boundary's successor was ready
in time, and top-1 agreement with the control arm (the first) over the same windows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from compile_ahead.profiling.trials.analysis import (
    Analysis,
    Tally,
    block_results,
)
from compile_ahead.profiling.trials.runner import TrialRecord
from compile_ahead.profiling.trials.schedule_kind.endpoints import boundary_records
from compile_ahead.runtime.ladder.reporting.report import BoundaryRecord


def _is_ready(boundary: BoundaryRecord) -> bool | None:
    """Was the successor compiled before its boundary? None where no deadline applies (an
    eager schedule compiles everything before decoding)."""
    margin = boundary.ready_margin_s
    if margin is None and boundary.decode_left_s is None:
        return None
    if isinstance(boundary.ready, bool):
        return boundary.ready
    return margin is not None and margin >= 0


def readiness_tally(per_block: dict[str, list[dict | None]]) -> Tally:
    """Successor deadlines met (ready before its boundary) over all measured trials."""
    per_arm: dict[str, str] = {}
    for arm, results in per_block.items():
        flags = [
            _is_ready(b) for res in results if res is not None for b in boundary_records(res) or []
        ]
        known = [x for x in flags if x is not None]
        per_arm[arm] = f"{sum(known)} / {len(known)} ready" if known else "\u2014"
    return Tally("Boundaries ready in time", per_arm)


Window = dict[object, list[tuple[int, object, object]]]  # window -> [(step, top1, digest)]
SHOWN_DISAGREEING = 6  # disagreeing windows a tally names


def _nearest(ladder: list[int], context: int) -> int:
    return min(ladder, key=lambda c: abs(context - c))


class SequenceWindow(NamedTuple):
    """A batch's window: one sequence's steps around one boundary."""

    sequence: int
    boundary: int


def _window_key(entry: dict, boundary: int) -> object:
    """A window's key: its boundary, and in a batch (entries naming their sequence) the
    sequence too, so each sequence's window is compared with the same sequence's."""
    sequence = entry.get("sequence")
    return SequenceWindow(sequence, boundary) if isinstance(sequence, int) else boundary


def boundary_windows(result: dict) -> Window:
    """Top-1 ids (and logits digests) around each boundary, keyed by the boundary (in a batch,
    by (sequence, boundary)).

    The runtime's report lists per-step entries in ``boundary_tokens`` ({step, context, top1,
    logits_digest}, and ``sequence`` in a batch); each is assigned to the nearest ladder
    capacity. A report may instead put ``top1`` lists (and a ``logits_digest``) in its
    ``boundaries`` records.
    """
    windows: Window = {}
    entries = [e for e in result.get("boundary_tokens") or [] if isinstance(e, dict)]
    ladder = [c for c in result.get("ladder") or [] if isinstance(c, int)]
    if entries and ladder:
        for e in entries:
            context = e.get("context")
            if not isinstance(context, int) or not isinstance(e.get("step"), int):
                continue
            windows.setdefault(_window_key(e, _nearest(ladder, context)), []).append(
                (e["step"], e.get("top1"), e.get("logits_digest"))
            )
        return windows
    for b in result.get("boundaries") or []:
        if isinstance(b, dict) and isinstance(b.get("top1"), list):
            key = (b.get("from"), b.get("to"))
            ids = b["top1"]
            windows[key] = [(i, tok, None) for i, tok in enumerate(ids)]
            if b.get("logits_digest") is not None:
                windows[key].append((-1, None, b["logits_digest"]))
    return windows


def agreement_counts(
    control: dict, treatment: dict, disagreeing: list[object] | None = None
) -> tuple[int, int, int, int, int, int]:
    """(windows whose every top-1 agrees, windows compared; steps agreeing, steps compared;
    logits digests equal, digests compared) between two runs, a window per boundary (per
    sequence and boundary in a batch). ``disagreeing`` gets the keys of windows that differ."""
    ref = boundary_windows(control)
    agree = total = tok_agree = tok_total = dig_eq = dig_total = 0
    for key, steps in boundary_windows(treatment).items():
        if key not in ref:
            continue
        theirs = {step: (tok, dig) for step, tok, dig in ref[key]}
        all_equal, compared = True, 0
        for step, tok, dig in steps:
            if step not in theirs:
                continue
            ref_tok, ref_dig = theirs[step]
            if tok is not None and ref_tok is not None:
                compared += 1
                tok_agree += int(tok == ref_tok)
                all_equal = all_equal and tok == ref_tok
            if dig is not None and ref_dig is not None:
                dig_total += 1
                dig_eq += int(dig == ref_dig)
        missing = len({s for s, t, _ in ref[key] if t is not None} - {s for s, *_ in steps})
        tok_total += compared + missing
        if compared or missing:
            total += 1
            agree += int(all_equal and not missing)
            if disagreeing is not None and not (all_equal and not missing):
                disagreeing.append(key)
    return agree, total, tok_agree, tok_total, dig_eq, dig_total


def _disagreeing_text(keys: list[object]) -> str:
    """The sequences of a batch whose windows disagreed, e.g. "sequence 1 at 128 (2 blocks)"."""
    per_window: dict[SequenceWindow, int] = {}
    for key in keys:
        if isinstance(key, SequenceWindow):
            per_window[key] = per_window.get(key, 0) + 1
    named = [
        f"sequence {seq} at {boundary}" + (f" ({n} blocks)" if n > 1 else "")
        for (seq, boundary), n in sorted(per_window.items())
    ]
    more = len(named) - SHOWN_DISAGREEING
    return ", ".join(named[:SHOWN_DISAGREEING]) + (f" and {more} more" if more > 0 else "")


def agreement_tally(per_block: dict[str, list[dict | None]], control: str) -> Tally:
    """Per arm, top-1 agreement with the control at the same steps; in a batch each
    sequence's windows against the same sequence's, the disagreeing sequences named."""
    per_arm = {control: "control"}
    for arm, results in per_block.items():
        if arm == control:
            continue
        sums, disagreeing, batched = [0] * 6, list[object](), False
        for ref, res in zip(per_block[control], results, strict=True):
            if ref is not None and res is not None:
                counts = agreement_counts(ref, res, disagreeing)
                sums = [s + c for s, c in zip(sums, counts, strict=True)]
                batched = batched or any(
                    isinstance(k, SequenceWindow) for k in boundary_windows(res)
                )
        a, n, ta, tn, de, dn = sums
        if n == 0:
            per_arm[arm] = "\u2014"
            continue
        windows = "sequence boundary windows" if batched else "boundaries"
        text = f"{a} / {n} {windows} ({ta} / {tn} steps top-1 equal)"
        if dn:
            text += f"; logits digest equal {de} / {dn}"
        if _disagreeing_text(disagreeing):
            text += f"; disagreeing: {_disagreeing_text(disagreeing)}"
        per_arm[arm] = text
    return Tally(f"Boundary top-1 agreement with {control}", per_arm)


def add_tallies(analysis: Analysis, records: Sequence[TrialRecord]) -> None:
    per_block = block_results(records, analysis.plan)
    analysis.tallies.append(readiness_tally(per_block))
    analysis.tallies.append(agreement_tally(per_block, analysis.control))
