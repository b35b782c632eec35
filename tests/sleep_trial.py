"""A stand-in trial that only sleeps, for measuring the campaign engine itself (benchmarks and
tests), never a measurement of a model: as the ``--command`` of an `ab schedule` cell,

    python tests/sleep_trial.py SECONDS {schedule} {out} [RELEASE]

it sleeps SECONDS (so the CPU is never what limits a campaign of them), or until the file
RELEASE exists (a test holds a block in flight, then lets the rest run at once), and writes a
report with
the keys `compile-ahead run --report` gives the schedule A/B, with values drawn from the trial's
index and schedule (so paired differences exist and differ between arms).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time


def campaign_toml(
    seconds: float, cells: int = 2, pairs: int = 2, warmup: int = 0, release: str | None = None
) -> str:
    """A schedule campaign of ``cells`` cells x ``pairs`` pairs whose trials only sleep."""
    ladders = ", ".join(f'"{64 << i},{128 << i}"' for i in range(cells))
    command = f"{sys.executable} {os.path.abspath(__file__)} {seconds:g} {{schedule}} {{out}}"
    command += f" {release}" if release else ""
    return (
        f'[campaign]\nname = "sleepers"\nkind = "schedule"\npairs = {pairs}\n'
        f'warmup = {warmup}\narms = ["s1", "s2"]\n\n[axes]\nmodel = ["tiny"]\n'
        f"ladder = [{ladders}]\n\n[options]\ncommand = {json.dumps(command)}\n"
    )


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print("usage: sleep_trial SECONDS SCHEDULE OUT [RELEASE]", file=sys.stderr)
        return 2
    seconds, schedule, out = float(argv[0]), argv[1], argv[2]
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (len(argv) == 4 and os.path.exists(argv[3])):
        time.sleep(min(0.05, max(end - time.monotonic(), 0.0)))
    rng = random.Random(f"{os.environ.get('CA_TRIAL_INDEX', '0')}-{schedule}")
    offset = 0.5 if schedule.endswith("2") else 0.0
    report = {
        "model": "sleep",
        "synthetic": True,
        "device": "none (a stand-in trial that sleeps)",
        "schedule": schedule,
        "foreground_compile_s": 2.0 - offset + rng.gauss(0, 0.05),
        "prefill_compile_s": 0.5,
        "critical_path_s": 5.0 - offset + rng.gauss(0, 0.05),
        "decode_s": 3.0 + rng.gauss(0, 0.05),
        "slept_s": seconds,
    }
    with open(out, "w") as fh:
        json.dump(report, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
