"""The whole prefill of a ragged batch: token by token through the batched decode graph against
each sequence's prompt on the batch-1 prefill graph (the device's default shape, the paged one
on CPU), same model, same prompts.

Each arm is one `compile-ahead run` in a fresh process on a transformers random-init checkpoint
(saved with save_pretrained; ``--checkpoint`` names one to use instead), teacher-forced, one
prompt length per sequence (default 16,40,128,200 at B=4), one token decoded after the
prompts; its report is read back. The token-by-token arm is `--prefill-chunk 1`, the other the
default. Arms alternate per round (AB/BA, the project's trial design). Per arm it prints the
medians over rounds of:

- prefill: the report's ``prefill.prefill_s``, the prompts' own time once their graph is there
  (token by token: the batch steps while a sequence is still in its prompt; on the prefill
  graph: each sequence's prompt in turn);
- last first token: the latest sequence's ``first_token_s`` from the command's start (startup,
  the compile or import of the graph the prompts run on, and the prefill);

and prefill-graph / token-by-token for each (paired rounds, geometric mean).

    python benchmarks/batching/batch_prefill.py [--checkpoint DIR] [--preset qwen2.5-0.5b]
        [--workdir DIR] [--lengths 16,40,128,200] [--ladder 256,512] [--schedule i3]
        [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import median, orders, ratio, run_checked
from _shared.models import hf_checkpoint

ARMS = ("token by token", "prefill graph")
FLAGS = {"token by token": ["--prefill-chunk", "1"], "prefill graph": []}
METRICS = ("prefill_s", "last_first_token_s")


def run_arm(args: argparse.Namespace, arm: str, model: Path, out: Path) -> dict[str, float]:
    """One run's prefill time and its last sequence's first token."""
    report = out / "report.json"
    cmd = [sys.executable, "-m", "compile_ahead.commands", "run", "--model", str(model)]
    cmd += ["--schedule", args.schedule, "--ladder", args.ladder, "--prompt-len", args.lengths]
    cmd += ["--decode-tokens", "1", "--no-progress", "--report", str(report), *FLAGS[arm]]
    run_checked(cmd)
    data = json.loads(report.read_text())
    paths = {"token by token": "decode-graph"}
    if data["prefill"]["path"] != paths.get(arm, data["prefill"]["path"]):
        raise SystemExit(f"{arm}: the run prefilled by {data['prefill']['path']}")
    firsts = [s["first_token_s"] for s in data["sequences"]]
    return {"prefill_s": data["prefill"]["prefill_s"], "last_first_token_s": max(firsts)}


def _model(args: argparse.Namespace) -> Path:
    if args.checkpoint is not None:
        return args.checkpoint
    from compile_ahead.runtime.model.presets import PRESETS

    target = args.workdir / f"{args.preset}-random-bf16"
    return hf_checkpoint(PRESETS[args.preset].config, target, "bf16")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", type=Path, help="a transformers checkpoint to use")
    p.add_argument("--preset", default="qwen2.5-0.5b", help="shapes of the random init")
    p.add_argument("--workdir", type=Path, default=Path("bench-out/batch-prefill"))
    p.add_argument("--lengths", default="16,40,128,200", help="prompt tokens per sequence")
    p.add_argument("--ladder", default="256,512")
    p.add_argument("--schedule", default="i3")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    model = _model(args)
    results: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        for r, order in orders(ARMS, args.rounds):
            for arm in order:
                results[arm].append(run_arm(args, arm, model, Path(tmp)))
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    batch = len(args.lengths.split(","))
    print(
        f"\n{model}: B={batch}, prompts {args.lengths}, {args.schedule}, ladder {args.ladder}; "
        f"medians over {args.rounds} rounds"
    )
    for metric in METRICS:
        each = {arm: [x[metric] for x in results[arm]] for arm in ARMS}
        print(
            f"  {metric:<20} token by token {median(each[ARMS[0]]):8.3f} s, prefill graph "
            f"{median(each[ARMS[1]]):8.3f} s, ratio {ratio(each[ARMS[0]], each[ARMS[1]]):.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
