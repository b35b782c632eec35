"""`compile-ahead ab schedule`: the seed's replicated experiment, any schedules side by side.

Each trial is one fresh `compile-ahead run --schedule S ... --report OUT` process. Endpoints
come from that report: foreground compile wall, protocol critical path, decode inference,
boundary waits, migration, time-weighted KV (reserved and committed, never mixed), peak RSS,
decode tok/s per rung; boundary readiness and top-1 agreement with the control arm (the first)
are counts, not tested effects.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import NamedTuple

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.trials.analysis import (
    Analysis,
    Endpoint,
    Tally,
    block_results,
    result_field,
)
from compile_ahead.profiling.trials.runner import Arm, TrialRecord
from compile_ahead.profiling.trials.schedule_kind.batch import prompt_len_text
from compile_ahead.profiling.trials.schedule_kind.template import TEMPLATE_KEYS
from compile_ahead.runtime.ladder.capacities import Ladder
from compile_ahead.runtime.ladder.reporting.report import BoundaryRecord

SCHEDULE_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_")


def known_arms() -> tuple[str, ...]:
    """What `compile-ahead run` and the upstream trial can run: our schedules, npuw-b0/b1."""
    from compile_ahead.profiling.trials.schedule_kind.baselines import BASELINES
    from compile_ahead.runtime.ladder.schedules import SCHEDULES

    return (*SCHEDULES, *BASELINES)


def parse_arms(text: str, custom_command: bool = False) -> tuple[str, ...]:
    """``--arms``, checked before any trial runs. With a ``--command`` template the names are
    the template's business; otherwise each must be a schedule we can run."""
    arms = tuple(a.strip().lower() for a in text.split(",") if a.strip())
    if len(arms) < 2:
        raise CompileAheadError(f"--arms {text!r}: give at least two schedules, e.g. i1,i2")
    bad = [a for a in arms if not set(a) <= SCHEDULE_NAME_CHARS]
    if bad:
        raise CompileAheadError(f"--arms: {', '.join(bad)} is not a schedule name")
    if len(set(arms)) != len(arms):
        raise CompileAheadError(f"--arms {text!r}: each schedule may appear once")
    unknown = [a for a in arms if a not in known_arms()]
    if unknown and not custom_command:
        raise CompileAheadError(
            f"--arms: unknown schedule {', '.join(unknown)}; choose from "
            f"{', '.join(known_arms())} (or pass --command to run your own)"
        )
    return arms


def ladder_arg(ladder: Ladder) -> str:
    """The ladder as a trial's command line gives it (``--ladder`` and ``{ladder}``)."""
    return ",".join(str(r) for r in ladder.rungs)


def run_command(
    schedule: str,
    model: str,
    ladder: Ladder,
    prompt_len: int | str,
    decode_tokens: int,
    template: str | None = None,
    extra: Sequence[str] = (),
    batch: int = 1,
) -> tuple[str, ...]:
    """The trial's command line; ``template`` replaces the default `compile-ahead run`.
    ``prompt_len`` is one length, or at ``batch`` > 1 one per sequence (16,40,...)."""
    values = {
        "schedule": schedule,
        "model": model,
        "ladder": ladder_arg(ladder),
        "prompt_len": str(prompt_len),
        "decode_tokens": str(decode_tokens),
        "batch": str(batch),
    }
    if template is None:
        return (
            sys.executable, "-m", "compile_ahead.commands", "run",
            "--model", model, "--schedule", schedule, "--ladder", values["ladder"],
            "--prompt-len", str(prompt_len), "--decode-tokens", str(decode_tokens),
            "--report", "{out}", "--no-progress", *extra,
        )  # fmt: skip
    parts = shlex.split(template)
    if not any("{out}" in p for p in parts):
        raise CompileAheadError("--command must contain {out}, where the trial writes its report")
    unknown = sorted(
        {m for p in parts for m in re.findall(r"\{([^{}]*)\}", p)} - set(TEMPLATE_KEYS)
    )
    if unknown:
        raise CompileAheadError(
            f"--command: unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)}; "
            f"known: {', '.join('{' + k + '}' for k in TEMPLATE_KEYS)}"
        )
    filled = []
    for part in parts:
        for key, value in values.items():
            part = part.replace("{" + key + "}", value)
        filled.append(part)
    return (*filled, *extra)


def make_arms(
    schedules: Sequence[str],
    model: str,
    ladder: Ladder,
    prompt_len: int,
    decode_tokens: int,
    template: str | None = None,
    extra: Sequence[str] = (),
    model_flags: Sequence[str] = (),
    prompt_lens: Sequence[int] = (),
) -> list[Arm]:
    """Our schedules run `compile-ahead run` with ``extra`` (or ``template``, which says its
    own flags); npuw-b0/npuw-b1 run the upstream baseline trial (OpenVINO's NPU LLM pipeline
    on CPU, pyramid off/on) and genai LLMPipeline, with the same protocol. ``model_flags``
    (which weights, e.g. --synthetic-dtype) go to every arm but a template. ``prompt_lens``
    (a batch: one per sequence, batch.py) make every trial run that batch; without them a
    trial's command line is the batch-1 one it always was."""
    from compile_ahead.profiling.trials.schedule_kind.genai_trial import ARM as GENAI_ARM
    from compile_ahead.profiling.trials.schedule_kind.upstream_trial import ARMS as UPSTREAM_ARMS

    batch = len(prompt_lens) if len(prompt_lens) > 1 else 1
    batch_flags = ("--batch", str(batch)) if batch > 1 else ()
    prompt: int | str = prompt_len_text(prompt_lens) if batch > 1 else prompt_len
    arms: list[Arm] = []
    for s in schedules:
        command: tuple[str, ...]
        info: dict[str, object]
        if s in UPSTREAM_ARMS:
            command = (*upstream_command(s, model, ladder, prompt_len, decode_tokens), *model_flags)
            info = {"schedule": s, "upstream": True}
        elif s == GENAI_ARM:
            command = (*genai_command(model, ladder, prompt, decode_tokens), *model_flags)
            command += batch_flags
            info = {"schedule": s, "upstream": True}
        else:
            ours = (*extra, *(model_flags if template is None else ()))
            ours += batch_flags if template is None else ()
            command = run_command(s, model, ladder, prompt, decode_tokens, template, ours, batch)
            info = {"schedule": s}
        arms.append(Arm(s, command, info=info))
    return arms


def upstream_command(
    arm: str, model: str, ladder: Ladder, prompt_len: int, decode_tokens: int
) -> tuple[str, ...]:
    from compile_ahead.profiling.trials.schedule_kind.upstream_trial import ARMS as UPSTREAM_ARMS

    return (
        sys.executable, "-m", "compile_ahead.profiling.trials.schedule_kind.upstream_trial",
        "--model", model, "--pyramid", "on" if UPSTREAM_ARMS[arm] else "off",
        "--ladder", ladder_arg(ladder), "--prompt-len", str(prompt_len),
        "--decode-tokens", str(decode_tokens), "--report", "{out}",
    )  # fmt: skip


def genai_command(
    model: str, ladder: Ladder, prompt_len: int | str, decode_tokens: int
) -> tuple[str, ...]:
    return (
        sys.executable, "-m", "compile_ahead.profiling.trials.schedule_kind.genai_trial",
        "--model", model, "--ladder", ladder_arg(ladder), "--prompt-len", str(prompt_len),
        "--decode-tokens", str(decode_tokens), "--report", "{out}",
    )  # fmt: skip


def boundary_records(result: dict) -> list[BoundaryRecord] | None:
    """A report's boundaries as typed records; None when it has none or a malformed one."""
    bounds = result.get("boundaries")
    if not isinstance(bounds, list):
        return None
    try:
        return [BoundaryRecord.from_json(b) for b in bounds]
    except (KeyError, TypeError):
        return None


def _boundary_sum(key: str) -> Callable[[dict], float | None]:
    def get(result: dict) -> float | None:
        records = boundary_records(result)
        values = [getattr(b, key) for b in records or []]
        numbers = [float(v) for v in values if isinstance(v, int | float)]
        # no boundary records (one rung, or an upstream pipeline that switches internally):
        # nothing was measured, which is not the same as zero
        return sum(numbers) if numbers and len(numbers) == len(values) else None

    return get


def _rung_tok_s(capacity: int) -> Callable[[dict], float | None]:
    def get(result: dict) -> float | None:
        for rung in result.get("rungs") or []:
            if isinstance(rung, dict) and rung.get("capacity") == capacity:
                value = rung.get("tok_s")
                return float(value) if isinstance(value, int | float) else None
        return None

    return get


def _decode_graphs_foreground(result: dict) -> float | None:
    """Foreground compile without the prefill graph's (which both arms of a schedule A/B
    compile alike): what the schedule itself puts before decoding."""
    total, prefill = result_field("foreground_compile_s")(result), None
    if total is not None:
        prefill = result_field("prefill_compile_s")(result)
    return None if total is None or prefill is None else total - prefill


def schedule_endpoints(ladder: Sequence[int], batch: int = 1) -> list[Endpoint]:
    """The endpoints of a schedule experiment; at ``batch`` > 1 also the batch's aggregate
    decode rate and its time per step (the run report's batch fields)."""
    f = result_field
    eps = [
        Endpoint("foreground_compile", "Foreground compile wall", "s", "lower",
                 f("foreground_compile_s")),
        Endpoint("foreground_decode_graphs", "Foreground compile, decode graphs only", "s",
                 "lower", _decode_graphs_foreground),
        Endpoint("first_token", "First token (from the command's start)", "s", "lower",
                 f("first_token_s")),
        Endpoint("critical_path", "Protocol critical path", "s", "lower", f("critical_path_s")),
        Endpoint("decode", "Decode inference", "s", "lower", f("decode_s")),
        Endpoint("boundary_wait", "Boundary wait (sum)", "s", "lower", _boundary_sum("wait_s")),
        Endpoint("migration", "Boundary migration (sum)", "s", "lower",
                 _boundary_sum("migration_s")),
        Endpoint("kv_reserved_avg", "KV reserved, time-weighted avg", "bytes", "lower",
                 f("kv_reserved_avg_bytes")),
        Endpoint("kv_committed_avg", "KV committed, time-weighted avg", "bytes", "lower",
                 f("kv_committed_avg_bytes")),
        Endpoint("kv_reserved_peak", "KV reserved, peak", "bytes", "lower",
                 f("kv_reserved_peak_bytes")),
        Endpoint("peak_rss", "Peak RSS", "bytes", "lower", f("peak_rss_bytes")),
        Endpoint("graphs_resident", "Compiled graphs resident, max", "graphs", "lower",
                 f("graphs_resident_max")),
    ]  # fmt: skip
    eps += [
        Endpoint(f"tok_s_{c}", f"Decode tok/s, rung C={c}", "tok/s", "higher", _rung_tok_s(c))
        for c in ladder
    ]
    if batch > 1:
        eps += [
            Endpoint("batch_tok_s", "Decode tok/s, all sequences (aggregate)", "tok/s",
                     "higher", f("tokens_per_s")),
            Endpoint("step_time", "Decode step time, mean (one token per sequence)", "s",
                     "lower", f("step_s_mean")),
        ]  # fmt: skip
    return eps


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


def model_label(records: Sequence[TrialRecord]) -> str:
    """What the trials ran, synthetic or not, from the reports themselves."""
    for r in records:
        res = r.result or {}
        if "model" in res:
            synthetic = res.get("synthetic")
            kind = "weights ?"
            if isinstance(synthetic, bool):
                kind = "SYNTHETIC weights" if synthetic else "real weights"
            return f"{res['model']} [{kind}]"
    return "unknown (no trial report)"


def devices(records: Sequence[TrialRecord]) -> str:
    """Device per arm as the trial reports name it."""
    seen: dict[str, str] = {}
    for r in records:
        if r.result is not None and r.arm not in seen:
            seen[r.arm] = str(r.result.get("device", "?"))
    return "; ".join(f"{arm}: {dev}" for arm, dev in seen.items()) or "unknown"


def arm_labels(records: Sequence[TrialRecord]) -> dict[str, str]:
    """Column heads: the arm plus the short name of its schedule (as its report gives it)."""
    labels: dict[str, str] = {}
    for r in records:
        title = (r.result or {}).get("schedule_title")
        if r.arm not in labels and isinstance(title, str) and title:
            labels[r.arm] = f"{r.arm} {title.split(':')[0].split(',')[0]}"
    return labels
