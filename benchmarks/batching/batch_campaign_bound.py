"""What the cores bound in a schedule campaign at batch (campaigns/seed_batching_quick.toml): per
cell (one B), each arm's medians and, paired by block with the control (the first arm), how
much of an arm's background compile its decode paid.

An arm that compiles the next rung while the batch decodes (i2, i3) shares the host's cores
between the two. Where the cores are few, the decode slows by some share of that compile: the
paired decode excess over the control (which compiled everything before decoding) divided by
the arm's background compile seconds. 0 would be a compile that cost the decode nothing (an
idle core, or a device of its own as on an NPU); 1 a compile paid in full on the critical path.

Reads the cells' trials.jsonl that `compile-ahead campaign report STORE --out DIR` writes:

    python benchmarks/batching/batch_campaign_bound.py DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import median

FIELDS = (
    ("foreground_compile_s", "foreground compile", "s"),
    ("critical_path_s", "critical path", "s"),
    ("decode_s", "decode", "s"),
    ("background_compile_s", "background compile", "s"),
    ("step_s_mean", "step", "s"),
    ("tokens_per_s", "aggregate", "tok/s"),
)


def cell_trials(cell: Path) -> dict[str, dict[int, dict]]:
    """arm -> block -> its measured trial's result (warm-ups and failures left out)."""
    by_arm: dict[str, dict[int, dict]] = defaultdict(dict)
    for line in (cell / "trials.jsonl").read_text().splitlines():
        trial = json.loads(line)
        if not trial["warmup"] and trial["returncode"] == 0 and trial.get("result"):
            by_arm[trial["arm"]][trial["block"]] = trial["result"]
    return by_arm


def print_cell(cell: Path) -> None:
    by_arm = cell_trials(cell)
    arms = json.loads((cell / "experiment.json").read_text())["arms"]
    names = [a["name"] if isinstance(a, dict) else str(a) for a in arms]
    control = names[0]
    any_result = next(iter(by_arm[control].values()))
    print(f"{cell.name}: B={any_result.get('batch', 1)}, {len(by_arm[control])} blocks")
    for arm in names:
        results = list(by_arm[arm].values())
        parts = []
        for key, label, unit in FIELDS:
            values = [r[key] for r in results if isinstance(r.get(key), (int, float))]
            if values:
                parts.append(f"{label} {median(values):.3g} {unit}")
        print(f"  {arm}: " + ", ".join(parts))
    for arm in names[1:]:
        blocks = sorted(set(by_arm[arm]) & set(by_arm[control]))
        shares = []
        for b in blocks:
            background = by_arm[arm][b].get("background_compile_s") or 0.0
            excess = by_arm[arm][b]["decode_s"] - by_arm[control][b]["decode_s"]
            if background > 0:
                shares.append(excess / background)
        if shares:
            print(
                f"  {arm} vs {control}: decode paid {median(shares):.2f} of the background "
                f"compile (median over {len(shares)} blocks; range "
                f"{min(shares):.2f} to {max(shares):.2f})"
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report", type=Path, help="a `campaign report --out` directory")
    args = p.parse_args(argv)
    cells = sorted(d for d in args.report.iterdir() if (d / "trials.jsonl").is_file())
    if not cells:
        raise SystemExit(f"{args.report}: no cell directory with a trials.jsonl")
    for cell in cells:
        print_cell(cell)
    return 0


if __name__ == "__main__":
    sys.exit(main())
