"""Quantization accuracy (reported, not targeted): the model as shipped and INT8/INT4 exports of
the same weights, each forced through the ladder on a document, against the f32 dequantized
reference: top-1 agreement at every scored position and the NLL difference (nats/token).

- The reference: transformers at f32, loaded from the model as given (a GGUF's tensors are
  dequantized to f32 by transformers' GGUF loader; a checkpoint as it is), one forward over
  the document's token ids, log-softmax in float64.
- The arms, each our ladder forcing the same ids (no tokenizer in between: a checkpoint that
  transformers' `save_pretrained` writes from a GGUF has a tokenizer.json that does not
  round-trip): `shipped` (the model as given, at the device's default precision, and
  `shipped-f32` at the f32 hint), `f32-checkpoint` (that reference saved with
  `save_pretrained`, at f32: the anchor), and `int8` / `int4` (optimum-intel exports of that
  checkpoint, `--weight-format int8|int4`, INT4 asymmetric in groups of 32 as the GGUF's
  Q4_1 blocks, at the default precision).

    python benchmarks/real_model/quantization.py --json quantization.json  # SmolLM2-135M's GGUF
    python benchmarks/real_model/quantization.py --model CHECKPOINT_DIR --ladder 256,512,1024 \\
        --prompt-len 32   # a small check
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _shared.models import _exporter_env, _import_transformers, smollm2_gguf
from _shared.results import write_result

ROOT = Path(__file__).resolve().parents[2]


def reference_model(model: Path) -> Any:
    """transformers at f32 from ``model`` (a .gguf file, or a checkpoint directory)."""
    import torch

    tf = _import_transformers()
    if model.suffix == ".gguf":
        return tf.AutoModelForCausalLM.from_pretrained(
            model.parent, gguf_file=model.name, dtype=torch.float32
        ).eval()
    return tf.AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()


def token_ids(model: Path, text: str) -> list[int]:
    """The document's ids by the model's own tokenizer as transformers reads it."""
    tf = _import_transformers()
    if model.suffix == ".gguf":
        tok = tf.AutoTokenizer.from_pretrained(model.parent, gguf_file=model.name)
    else:
        tok = tf.AutoTokenizer.from_pretrained(model)
    return list(tok(text, add_special_tokens=False)["input_ids"])


def reference_scores(model: Any, ids: list[int], prompt_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Per scored position t >= prompt_len: -log p(ids[t] | ids[:t]) and the top-1."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits[prompt_len - 1 : len(ids) - 1], dim=-1)
    nll = -logp[torch.arange(len(ids) - prompt_len), torch.tensor(ids[prompt_len:])]
    return nll.numpy(), logp.argmax(-1).numpy()


def ours(model: Path, ids: list[int], args: argparse.Namespace, precision: str | None) -> dict:
    """The ladder forcing ``ids`` on ``model``: NLL per token and top-1 per scored position."""
    from compile_ahead.runtime.compile.settings.options import CompileOptions
    from compile_ahead.runtime.ladder.runner import run_ladder
    from compile_ahead.runtime.ladder.settings.capacities import Ladder
    from compile_ahead.runtime.ladder.settings.config import RunConfig
    from compile_ahead.runtime.ladder.settings.run_protocol import teacher_forced_text
    from compile_ahead.runtime.ladder.settings.schedules import SCHEDULES
    from compile_ahead.runtime.sources.resolve import resolve_model

    ladder = Ladder.parse(args.ladder)
    protocol = teacher_forced_text(ids, args.prompt_len, None, ladder.top, "--text document")
    config = RunConfig(
        SCHEDULES[args.schedule],
        ladder,
        protocol,
        options=CompileOptions(inference_precision=precision),
    )
    result = run_ladder(resolve_model(str(model)), config)
    if result.error is not None:
        raise result.error
    score = result.report.text_score
    assert score is not None
    return {
        "nll_per_token": score.overall.nll_per_token,
        "top1": np.asarray(result.sequences[0]["tokens"]),
        "inference_precision": result.report.inference_precision,
    }


def export(checkpoint: Path, out: Path, fmt: str, group_size: int | None) -> Path:
    """optimum-intel's export of ``checkpoint`` at ``fmt`` (reused when already there)."""
    if (out / "openvino_model.xml").exists():
        return out
    cmd = ["optimum-cli", "export", "openvino", "--model", str(checkpoint)]
    cmd += ["--task", "text-generation-with-past", "--weight-format", fmt]
    if group_size is not None and fmt == "int4":
        cmd += ["--group-size", str(group_size)]
    subprocess.run([*cmd, str(out)], check=True, stdout=subprocess.DEVNULL, env=_exporter_env(out))
    return out


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--model", type=Path, default=None, help="a .gguf or a checkpoint (default: SmolLM2-135M)"
    )
    p.add_argument("--document", type=Path, default=ROOT / "LICENSE")
    p.add_argument("--ladder", default="1024,2048,4096")
    p.add_argument("--schedule", default="i2")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--formats", default="int8,int4", help="optimum-intel weight formats")
    p.add_argument(
        "--int4-group-size",
        type=int,
        default=32,
        help="INT4 group size (default 32: the GGUF's Q4 block; optimum-intel's own 128 does "
        "not divide SmolLM2's 576-wide layers)",
    )
    p.add_argument("--work", type=Path, default=Path("out/quantization_work"))
    p.add_argument("--json", type=Path, default=None, help="write the result file here")
    args = p.parse_args()
    args.model = args.model or smollm2_gguf()
    return args


def main() -> None:
    args = parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    top = int(args.ladder.split(",")[-1])
    ids = token_ids(args.model, args.document.read_text())[: top + 1]  # what the top rung holds
    reference = reference_model(args.model)
    ref_nll, ref_top1 = reference_scores(reference, ids, args.prompt_len)
    print(
        f"{args.document.name}: {len(ids)} tokens, {len(ref_nll)} scored; reference NLL "
        f"{ref_nll.mean():.5f} nats/token (transformers f32)"
    )
    checkpoint = args.work / "f32-checkpoint"
    if not (checkpoint / "config.json").exists():
        reference.save_pretrained(checkpoint, safe_serialization=True)
    del reference
    arms: dict[str, tuple[Path, str | None]] = {
        "shipped": (args.model, None),
        "shipped-f32": (args.model, "f32"),
        "f32-checkpoint": (checkpoint, "f32"),
    }
    for fmt in args.formats.split(","):
        if fmt:
            arms[fmt] = (export(checkpoint, args.work / fmt, fmt, args.int4_group_size), None)
    results: dict[str, Any] = {
        "document": str(args.document),
        "tokens_scored": len(ref_nll),
        "reference_nll_per_token": float(ref_nll.mean()),
        "arms": {},
    }
    print("| Arm | Precision | Top-1 vs f32 reference | NLL | NLL - reference |")
    print("|---|---|---|---|---|")
    for name, (model, precision) in arms.items():
        got = ours(model, ids, args, precision)
        agree = int((got["top1"] == ref_top1).sum())
        first = np.flatnonzero(got["top1"] != ref_top1)
        row = {
            "model": str(model),
            "inference_precision": got["inference_precision"],
            "top1_agree": agree,
            "top1_fraction": agree / len(ref_top1),
            "first_disagreement": int(first[0]) if first.size else None,
            "nll_per_token": got["nll_per_token"],
            "nll_minus_reference": got["nll_per_token"] - float(ref_nll.mean()),
        }
        results["arms"][name] = row
        print(
            f"| {name} | {row['inference_precision']} | {agree} / {len(ref_top1)} "
            f"({100 * row['top1_fraction']:.2f}%) | {row['nll_per_token']:.5f} "
            f"| {row['nll_minus_reference']:+.5f} |",
            flush=True,
        )
    if args.json:
        write_result(args.json, "quantization", results, args)


if __name__ == "__main__":
    main()
