"""The boundary switch of a batch by schedule and B: i3's switch at B=8 against B=1, i2's KV copy
as B grows, and the peak RSS of i3 against i1 at the same B.

Each arm is one `compile-ahead run` in a fresh process on the same model (teacher-forced, every
sequence the same prompt length, so every sequence crosses every boundary), its report read
back. A first pass fills the compile cache (graphs keyed by B), so the rounds after it time the
switch itself rather than a compile; the rounds run the arms in an order rotated per round.
Prints per arm the median over rounds of each boundary's wait_s, allocation_s, copy_s and
switch_s, summed over the boundaries, and the peak RSS.

    python benchmarks/batching/switch_vs_batch.py --model DIR [--ladder 32,64,128]
        [--prompt 8] [--decode-tokens 112] [--rounds 2] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import median, orders, run_checked

ARMS = (("i3", 1), ("i3", 8), ("i2", 1), ("i2", 2), ("i2", 4), ("i2", 8), ("i1", 8))
FIELDS = ("wait_s", "allocation_s", "copy_s", "switch_s")


def run_arm(args: argparse.Namespace, schedule: str, batch: int, out: Path) -> dict:
    """One run's report."""
    report = out / f"{schedule}-b{batch}.json"
    cmd = [sys.executable, "-m", "compile_ahead.commands", "run", "--model", args.model]
    cmd += ["--schedule", schedule, "--ladder", args.ladder, "--batch", str(batch)]
    cmd += ["--prompt-len", ",".join([str(args.prompt)] * batch)]
    cmd += ["--decode-tokens", str(args.decode_tokens), "--no-progress"]
    cmd += ["--cache-dir", str(args.cache_dir), "--report", str(report)]
    run_checked(cmd)
    return json.loads(report.read_text())


def summary(report: dict) -> dict[str, float]:
    """The boundaries' times summed, the bytes copied, and the peak RSS."""
    bounds = report["boundaries"]
    out = {f: sum(b.get(f) or 0.0 for b in bounds) for f in FIELDS}
    out["bytes_copied"] = sum(b.get("bytes_copied") or 0 for b in bounds)
    out["boundaries"] = len(bounds)
    out["peak_rss_mib"] = report["peak_rss_bytes"] / 2**20
    out["step_ms"] = (report.get("step_s_median") or float("nan")) * 1e3  # batch fields only
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--ladder", default="32,64,128")
    p.add_argument("--prompt", type=int, default=8)
    p.add_argument("--decode-tokens", type=int, default=112)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--cache-dir", type=Path, default=Path("bench-out/switch-vs-batch-cache"))
    args = p.parse_args(argv)
    results: dict[tuple[str, int], list[dict[str, float]]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        for arm in ARMS:  # fills the compile cache; not counted
            run_arm(args, *arm, Path(tmp))
        print("compile cache filled", flush=True)
        for r, order in orders(ARMS, args.rounds):
            for arm in order:
                results[arm].append(summary(run_arm(args, *arm, Path(tmp))))
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    print(
        f"\n{args.model}: ladder {args.ladder}, prompt {args.prompt}, "
        f"{args.decode_tokens} tokens per sequence; medians over {args.rounds} rounds, "
        "summed over the boundaries"
    )
    med = {arm: {k: median([x[k] for x in rs]) for k in rs[0]} for arm, rs in results.items()}
    for arm in ARMS:
        m = med[arm]
        print(
            f"  {arm[0]} B={arm[1]}: {m['boundaries']:.0f} boundaries, switch "
            f"{m['switch_s'] * 1e3:.2f} ms (wait {m['wait_s'] * 1e3:.2f}, allocation "
            f"{m['allocation_s'] * 1e3:.2f}, copy {m['copy_s'] * 1e3:.2f}), "
            f"{m['bytes_copied'] / 2**20:.1f} MiB copied, step {m['step_ms']:.1f} ms, "
            f"peak RSS {m['peak_rss_mib']:.0f} MiB"
        )
    i3 = med[("i3", 8)]["switch_s"] / med[("i3", 1)]["switch_s"]
    print(f"  i3 switch B=8 / B=1: {i3:.2f}x")
    copies = ", ".join(f"B={b} {med[('i2', b)]['copy_s'] * 1e3:.2f} ms" for b in (1, 2, 4, 8))
    print(f"  i2 copy by B: {copies}")
    rss = med[("i3", 8)]["peak_rss_mib"] / med[("i1", 8)]["peak_rss_mib"]
    print(f"  peak RSS B=8 i3 / i1: {rss:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
