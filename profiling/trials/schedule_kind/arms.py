"""The arms of `ab schedule`: schedules by name (and the upstream baselines), each trial's
command line: a fresh `compile-ahead run --schedule S ... --report OUT`, an upstream pipeline's
trial, or a user's template."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Sequence

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.trials.runner import Arm
from compile_ahead.profiling.trials.schedule_kind.batch import prompt_len_text
from compile_ahead.profiling.trials.schedule_kind.template import TEMPLATE_KEYS
from compile_ahead.runtime.ladder.settings.capacities import Ladder

SCHEDULE_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_")


def known_arms() -> tuple[str, ...]:
    """What `compile-ahead run` and the upstream trial can run: our schedules, npuw-b0/b1."""
    from compile_ahead.profiling.trials.schedule_kind.baselines import BASELINES
    from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES

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
