"""How long a command takes to start, against `python -c "import openvino"` (the floor of any
process that runs a graph).

Three arms, each a fresh process per round, their order rotating per round (the project's
trial design) so drift on a shared machine hits all of them:

- import openvino: `python -c "import openvino"`;
- --help: `python -m compile_ahead.commands --help` (every subcommand's parser built);
- run (warm): `python -m compile_ahead.commands run --model tiny --ladder 16,32 --decode-tokens
  4 --no-progress --cache-dir D`, its compile cache filled by one untimed run first, so each
  timed run imports its graph (checked from its summary) instead of compiling it.

Printed per arm: the medians over rounds of the wall time (start to exit, as the caller sees
it) and of the CPU time (user + system, the process and its children), and each over the
openvino import's (paired by round, geometric mean). The machine's load average is printed
before and after: on a loaded machine the wall times stretch, the ratios less so.

    python benchmarks/startup/startup_vs_openvino.py [--rounds 5] [--model tiny]
        [--ladder 16,32] [--decode-tokens 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _shared
from _shared.common import median, orders, ratio, run_checked
from _shared.results import write_result

CONTROL = "import openvino"
TIMEOUT_S = 600
HELP_TARGET = 1.5  # the target: --help within 1.5x of importing openvino
# The run's summary line: "compile cache DIR: N imported, M compiled and stored[, ...]".
CACHE_COUNTS = re.compile(r"^compile cache .*: (\d+) imported, (\d+) compiled", re.MULTILINE)


def arm_commands(args: argparse.Namespace, cache_dir: Path) -> dict[str, list[str]]:
    """Each arm's command line, the control first."""
    cli = [sys.executable, "-m", "compile_ahead.commands"]
    run = [*cli, "run", "--model", args.model, "--ladder", args.ladder]
    run += ["--decode-tokens", str(args.decode_tokens), "--no-progress"]
    return {
        CONTROL: [sys.executable, "-c", "import openvino"],
        "--help": [*cli, "--help"],
        "run (warm)": [*run, "--cache-dir", str(cache_dir)],
    }


def timed(cmd: Sequence[str]) -> tuple[float, float, str]:
    """One fresh process: its wall seconds, its CPU seconds (children included) and stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = run_checked(cmd, timeout=TIMEOUT_S)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def cache_counts(stdout: str) -> tuple[int, int]:
    """A run's graphs imported from and compiled into the compile cache, from its summary."""
    found = CACHE_COUNTS.search(stdout)
    if found is None:
        raise SystemExit("the run printed no compile cache line:\n" + stdout[-2000:])
    return int(found[1]), int(found[2])


def check_warm(stdout: str) -> None:
    """A warm run imports every graph and compiles none."""
    imported, compiled = cache_counts(stdout)
    if compiled or not imported:
        raise SystemExit(f"the run was not warm: {imported} imported, {compiled} compiled")


def measure(arms: dict[str, list[str]], rounds: int) -> dict[str, dict[str, list[float]]]:
    """Every arm once per round, in the round's order; wall and CPU seconds per arm."""
    times: dict[str, dict[str, list[float]]] = {a: {"wall_s": [], "cpu_s": []} for a in arms}
    for r, order in orders(list(arms), rounds):
        for arm in order:
            wall, cpu, stdout = timed(arms[arm])
            if arm.startswith("run"):
                check_warm(stdout)
            times[arm]["wall_s"].append(wall)
            times[arm]["cpu_s"].append(cpu)
            print(f"  round {r + 1} {arm:<16} wall {wall:6.3f} s  CPU {cpu:6.3f} s", flush=True)
    return times


def summarize(times: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """Per arm: the medians, and each over the control's (paired rounds, geometric mean)."""
    control = times[CONTROL]
    return {
        arm: {
            "wall_median_s": median(t["wall_s"]),
            "cpu_median_s": median(t["cpu_s"]),
            "wall_ratio": ratio(control["wall_s"], t["wall_s"]),
            "cpu_ratio": ratio(control["cpu_s"], t["cpu_s"]),
        }
        for arm, t in times.items()
    }


def load_note() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (5 min {five:.2f}) on {os.cpu_count()} CPUs"


def print_table(summary: dict[str, dict[str, float]]) -> None:
    print(f"\n{'':<18}{'wall median':>12}{'CPU median':>12}{'wall / ov':>11}{'CPU / ov':>10}")
    for arm, s in summary.items():
        print(
            f"{arm:<18}{s['wall_median_s']:>10.3f} s{s['cpu_median_s']:>10.3f} s"
            f"{s['wall_ratio']:>10.2f}x{s['cpu_ratio']:>9.2f}x"
        )
    print(
        f"--help / import openvino: {summary['--help']['wall_ratio']:.2f}x wall "
        f"(target <= {HELP_TARGET}x)"
    )


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    p.add_argument("--model", default="tiny", help="the run's model (default tiny)")
    p.add_argument("--ladder", default="16,32", help="the run's ladder (default 16,32)")
    p.add_argument("--decode-tokens", type=int, default=4, help="the run's (default 4)")
    p.add_argument("--json", type=Path, default=None, help="also write the result file here")
    return p.parse_args()


def main() -> int:
    args = parse_args()
    print(f"before: {load_note()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="ca-startup-") as tmp:
        arms = arm_commands(args, Path(tmp) / "cache")
        print("filling the compile cache (one untimed run) ...", flush=True)
        timed(arms["run (warm)"])
        times = measure(arms, args.rounds)
    print(f"after: {load_note()}")
    summary = summarize(times)
    print_table(summary)
    if args.json:
        write_result(args.json, "startup_vs_openvino", {"times": times, "summary": summary}, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
