"""One openvino-genai trial: LLMPipeline on CPU, what a user would pick instead of the ladder
on a CPU, on the same model; writes a RunReport like `compile-ahead run --report`, so
`ab schedule` / `ab baselines` put it in the same table as our schedules.

    python -m compile_ahead.profiling.trials.schedule_kind.genai_trial \
        --model M --ladder 1024,2048 --prompt-len 128 --decode-tokens 1920 --report OUT

The model: an optimum-intel export (or a stateful decoder IR) is used as it is; a checkpoint
or preset is first built as the stateful model of runtime/graphs/stateful.py and saved as an IR
(that
time is reported as ir_export_s, on the critical path but not in the foreground compile).
LLMPipeline cannot be teacher-forced, so it generates greedily from the protocol's prompt for
the same number of tokens (EOS ignored). With ``--batch B --prompt-len P0,P1,...`` it
generates for B prompts at once (left-padded, masked), as a batched `compile-ahead run` is
given them, and reports the batch's aggregate rate and step time beside. Its boundary top-1
ids are left out, because they answer a different input sequence than the teacher-forced
arms'. Its foreground compile is the pipeline's load (read + compile_model); per-token times
come from its own metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from collections.abc import Callable

    from compile_ahead.runtime.ladder.reporting.report import RunReport
    from compile_ahead.runtime.sources.base import ModelSource

ARM = "genai"
IR_NAME = "openvino_model.xml"


def model_directory(
    model: str, workdir: Path, synthetic_dtype: str | None = None
) -> tuple[Path, ModelSource, float]:
    """(directory LLMPipeline loads, the resolved source, seconds spent exporting an IR)."""
    import openvino as ov

    from compile_ahead.runtime.sources.resolve import resolve_model

    source = resolve_model(model, synthetic_dtype=synthetic_dtype)
    if not source.built_from_weights:  # an IR: LLMPipeline loads it as it is
        files = source.files  # type: ignore[attr-defined]
        if files.xml.name == IR_NAME:
            return files.model_dir, source, 0.0
        # LLMPipeline reads openvino_model.xml from a directory: link the IR under that name.
        os.symlink(files.xml, workdir / IR_NAME)
        os.symlink(files.bin, workdir / "openvino_model.bin")
        return workdir, source, 0.0
    from compile_ahead.runtime.graphs.stateful import build_stateful_model

    t0 = time.perf_counter()
    model_ir = build_stateful_model(source.config, source.weights)
    ov.save_model(model_ir, str(workdir / IR_NAME))
    return workdir, source, time.perf_counter() - t0


@dataclass(frozen=True)
class GenaiTrial:
    """One trial's settings, as `ab schedule` gives them on its command line."""

    model: str
    ladder: str
    prompt_lens: tuple[int, ...]  # one per sequence
    decode_tokens: int
    report: Path
    synthetic_dtype: str | None

    @property
    def prompt_len(self) -> int:
        """The longest prompt (the only one at batch 1)."""
        return max(self.prompt_lens)


def _lengths(text: str) -> tuple[int, ...]:
    """--prompt-len: one length, or one per sequence (16,40,128)."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 16,40, got {text!r}") from None


def _trial(flags: dict[str, Any], error: Callable[[str], NoReturn]) -> GenaiTrial:
    """The trial from its flags (the parser's values by name): one prompt length per
    sequence, one length given for all of them."""
    fields = dict(flags)
    lengths: tuple[int, ...] = fields.pop("prompt_len")
    batch: int = fields.pop("batch")
    if len(lengths) == 1:
        lengths *= batch
    if len(lengths) != batch:
        error(f"--batch {batch} needs one --prompt-len per sequence, got {len(lengths)}")
    return GenaiTrial(prompt_lens=lengths, **fields)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="genai_trial", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    p.add_argument("--model", required=True)
    p.add_argument("--ladder", required=True)
    p.add_argument("--prompt-len", type=_lengths, default=(128,))
    p.add_argument("--decode-tokens", type=int, required=True)
    p.add_argument("--report", type=Path, required=True)
    p.add_argument("--synthetic-dtype", default=None, help="as `compile-ahead run` takes it")
    p.add_argument("--batch", type=int, default=1, help="prompts generated together")
    trial = _trial(vars(p.parse_args(argv)), p.error)

    from compile_ahead.output.atomic import write_json_atomic

    t_start = time.perf_counter()  # critical path: IR export, load, generate
    with tempfile.TemporaryDirectory(prefix="genai-trial-") as tmp:
        directory, source, export_s = model_directory(trial.model, Path(tmp), trial.synthetic_dtype)
        timed = _generate(directory, source, trial.prompt_lens, trial.decode_tokens)
    timed["export_s"] = export_s
    timed["critical_path_s"] = time.perf_counter() - t_start
    report = _report(trial, source, timed)
    write_json_atomic(trial.report, report.to_json())
    summary = {"load_s": timed["load_s"], "ttft_s": report.prefill_s}
    print(json.dumps({**summary, "tokens": report.tokens_decoded}))
    return 0


def _generate(
    directory: Path, source: ModelSource, prompt_lens: tuple[int, ...], decode_tokens: int
) -> dict[str, Any]:
    """LLMPipeline loaded (timed) and generating the teacher-forced prompts' continuations
    (several: left-padded, the padding masked)."""
    import numpy as np
    import openvino as ov
    import openvino_genai as genai

    from compile_ahead.runtime.ladder.settings.run_protocol import teacher_forced

    vocab = source.config.vocab_size
    prompts = [teacher_forced(vocab, n, decode_tokens).prompt for n in prompt_lens]
    t0 = time.perf_counter()
    pipe = genai.LLMPipeline(str(directory), "CPU")
    load_s = time.perf_counter() - t0
    cfg = genai.GenerationConfig()
    cfg.max_new_tokens = decode_tokens
    cfg.ignore_eos = True
    cfg.eos_token_id = 0
    cfg.stop_token_ids = set()
    ids = np.zeros((len(prompts), max(prompt_lens)), np.int64)
    mask = np.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, ids.shape[1] - len(prompt) :] = prompt
        mask[row, ids.shape[1] - len(prompt) :] = 1
    inputs = genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(mask))
    g0 = time.perf_counter()
    result = pipe.generate(inputs, cfg)
    generate_s = time.perf_counter() - g0
    del pipe
    return {"result": result, "load_s": load_s, "generate_s": generate_s, "genai": genai}


def _report(trial: GenaiTrial, source: ModelSource, timed: dict[str, Any]) -> RunReport:
    """The trial's run report, from LLMPipeline's own metrics."""
    from compile_ahead.profiling.trials.schedule_kind.upstream_trial import per_rung_rates
    from compile_ahead.runtime.base.measure import peak_rss_bytes
    from compile_ahead.runtime.ladder.reporting.report import RungStats, RunReport
    from compile_ahead.runtime.ladder.settings.capacities import Ladder

    ladder = list(Ladder.parse(trial.ladder).rungs)
    result = timed["result"]
    raw = result.perf_metrics.raw_metrics
    ttft_s = float(next(iter(raw.m_times_to_first_token))) / 1e6
    # Durations of tokens 2..N (us); token 1 comes with the prefill (time to first token).
    steps_s = [float(d) / 1e6 for d in raw.m_durations]
    contexts = [trial.prompt_len + 1 + i for i in range(len(steps_s))]
    extra = {"ir_export_s": timed["export_s"], "generate_s": timed["generate_s"]}
    generated = sum(len(t) for t in result.tokens)
    ends = [n + len(t) for n, t in zip(trial.prompt_lens, result.tokens, strict=True)]
    if len(trial.prompt_lens) > 1:
        extra |= _batch_fields(trial, generated, ttft_s, steps_s)
    return RunReport(
        model=source.describe(),
        device="CPU (openvino-genai LLMPipeline)",
        schedule=ARM,
        schedule_title="openvino-genai LLMPipeline on CPU: dynamic shapes, one compile",
        ladder=ladder,
        prompt_len=trial.prompt_len,
        decode_tokens=trial.decode_tokens,
        protocol="greedy from the teacher-forced prompt (LLMPipeline cannot be forced)",
        tokens_decoded=generated,
        context_final=max(ends),
        foreground_compile_s=timed["load_s"],
        prefill_s=ttft_s,
        decode_s=sum(steps_s),
        critical_path_s=timed["critical_path_s"],
        rungs=[
            RungStats(r["capacity"], r["tokens"], r["decode_s"])
            for r in per_rung_rates(contexts, steps_s, ladder)
        ],
        kv_bytes_definition="LLMPipeline's own KV cache: not observable from here",
        graphs_resident_max=1,
        peak_rss_bytes=peak_rss_bytes(),
        extra={**extra, "genai": timed["genai"].__version__},
    )


def _batch_fields(
    trial: GenaiTrial, generated: int, ttft_s: float, steps_s: list[float]
) -> dict[str, Any]:
    """A batch's fields as `compile-ahead run --batch` names them: the aggregate rate over the
    generate (prefill and decode steps), the time per decode step (one token per sequence)."""
    total_s = ttft_s + sum(steps_s)
    return {
        "batch": len(trial.prompt_lens),
        "prompt_lens": list(trial.prompt_lens),
        "tokens_generated": generated,
        "tokens_per_s": generated / total_s if total_s > 0 else None,
        "step_s_mean": sum(steps_s) / len(steps_s) if steps_s else None,
    }


if __name__ == "__main__":
    sys.exit(main())
